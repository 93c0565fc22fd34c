//! Per-lane loops of the register instructions that do not fit one line of
//! [`Block::exec_simple`](super::block::Block): the [`Kind::Alu`](crate::ir::Kind) call of a pure
//! `sem` function (specialized by operand count) and vector unpacking.

use super::step::{lanes, rd};
use crate::ir::{AluFn, Mods, Opd, NOREG};
use crate::sem::int as sint;

/// `d = f(m, sources)` for every lane of `em`; the loop is specialized by the number of
/// sources (1 to 4) so that no unused operand is read.
#[inline(always)]
pub(crate) fn alu(r: &mut [u64], syms: &[u64], em: u32, (f, m): (AluFn, &Mods), d: u32, s: &[Opd]) {
    let d = d as usize * 32;
    match s.len() {
        1 => {
            for l in lanes(em) {
                let v = [rd(r, syms, &s[0], l), 0, 0, 0];
                r[d + l] = f(m, v);
            }
        }
        2 => {
            for l in lanes(em) {
                let v = [rd(r, syms, &s[0], l), rd(r, syms, &s[1], l), 0, 0];
                r[d + l] = f(m, v);
            }
        }
        3 => {
            for l in lanes(em) {
                let v = [
                    rd(r, syms, &s[0], l),
                    rd(r, syms, &s[1], l),
                    rd(r, syms, &s[2], l),
                    0,
                ];
                r[d + l] = f(m, v);
            }
        }
        _ => {
            for l in lanes(em) {
                let v = [
                    rd(r, syms, &s[0], l),
                    rd(r, syms, &s[1], l),
                    rd(r, syms, &s[2], l),
                    rd(r, syms, &s[3], l),
                ];
                r[d + l] = f(m, v);
            }
        }
    }
}

/// `mov.bN {d0, d1, ..}, s`: field `j` of width `wd` bits of `s` to `d[j]` (`NOREG`: `_`).
#[inline]
pub(crate) fn unpack(r: &mut [u64], syms: &[u64], em: u32, d: &[u32], wd: u8, s: &Opd) {
    for l in lanes(em) {
        let v = rd(r, syms, s, l);
        for (j, dj) in d.iter().enumerate() {
            if *dj != NOREG {
                r[*dj as usize * 32 + l] = sint::unpack_field(v, j, wd);
            }
        }
    }
}
