//! Warp-level instructions in hand-written PTX: shfl.sync in every mode with explicit clamp /
//! segment operands and the in-range predicate, vote.sync (ballot/any/all/uni), match.sync,
//! redux.sync, activemask and %laneid. One row = one lane; 64 rows = two warps. Expected values
//! are computed on the host from the per-lane inputs, following the PTX ISA definitions.

mod common;

use common::isa::{row, run_cases, Case, Row, W};
use W::B32;

const LANES: usize = 64;

fn inputs() -> Vec<u32> {
    (0..LANES as u32)
        .map(|i| (i * 2654435761u32) >> 7)
        .collect()
}

/// Rows whose expected value is `f(inputs, thread)`.
fn rows(f: impl Fn(&[u32], usize) -> u32) -> Vec<Row> {
    let v = inputs();
    (0..LANES)
        .map(|t| row(v[t] as u64, 0, 0, f(&v, t) as u64))
        .collect()
}

/// The PTX shfl.sync lane computation: returns (source lane, in range).
fn shfl_src(mode: &str, lane: u32, b: u32, c: u32) -> (u32, bool) {
    let b = b & 0x1f; // bval = b[4:0]
    let clamp = c & 0x1f;
    let segmask = (c >> 8) & 0x1f;
    let max_lane = (lane & segmask) | (clamp & !segmask);
    let min_lane = lane & segmask;
    let (j, ok) = match mode {
        "up" => {
            let j = lane as i32 - b as i32;
            (j, j >= min_lane as i32)
        }
        "down" => {
            let j = (lane + b) as i32;
            (j, j <= max_lane as i32)
        }
        "bfly" => {
            let j = (lane ^ b) as i32;
            (j, j <= max_lane as i32)
        }
        _ => {
            let j = (min_lane | (b & !segmask)) as i32;
            (j, j <= max_lane as i32)
        }
    };
    if ok {
        (j as u32, true)
    } else {
        (lane, false)
    }
}

/// Packs (value, predicate) as value | p << 31 (inputs are < 2^25).
const PACK: &str = "selp.u32 %r2, 1, 0, %p1;\nshl.b32 %r2, %r2, 31;\nor.b32 %d, %r1, %r2;";

#[test]
fn shfl_sync_every_mode_with_predicate() {
    let mut cases = Vec::new();
    // (mode, b, c): full warp, sub-warp segments of 8 and 16, a clamp below 31.
    let params: [(&str, u32, u32); 10] = [
        ("bfly", 5, 0x1f),
        ("bfly", 1, 0x181f), // width 8
        ("down", 3, 0x1f),
        ("down", 2, 0x101f), // width 16
        ("down", 1, 0x0f),   // clamp at lane 15
        ("up", 3, 0),
        ("up", 1, 0x1800), // width 8: c = segmask only
        ("idx", 7, 0x1f),
        ("idx", 37, 0x1f), // lane index taken mod 32
        ("idx", 2, 0x181f),
    ];
    for (mode, b, c) in params {
        let body = format!("shfl.sync.{mode}.b32 %r1|%p1, %a, {b}, {c}, -1;\n{PACK}");
        let r = rows(|v, t| {
            let lane = (t % 32) as u32;
            let (src, ok) = shfl_src(mode, lane, b, c);
            v[t - lane as usize + src as usize] | (ok as u32) << 31
        });
        cases.push(Case::new(format!("shfl.sync.{mode} b={b} c={c:#x}"), body, [B32; 4]).rows(r));
    }
    // Register operands for b and c, and no predicate output.
    cases.push(
        Case::new(
            "shfl.sync.idx with register lane",
            "and.b32 %r3, %a, 31;\nmov.u32 %r4, 31;\nshfl.sync.idx.b32 %d, %a, %r3, %r4, -1;",
            [B32; 4],
        )
        .rows(rows(|v, t| v[t / 32 * 32 + (v[t] & 31) as usize])),
    );
    run_cases(&cases);
}

#[test]
fn vote_match_redux_activemask_laneid() {
    let ballot = |v: &[u32], t: usize, f: fn(u32) -> bool| -> u32 {
        let w = t / 32 * 32;
        (0..32).fold(0, |m, l| m | (f(v[w + l]) as u32) << l)
    };
    let warp = |v: &[u32], t: usize| -> Vec<u32> { v[t / 32 * 32..t / 32 * 32 + 32].to_vec() };
    let cases = vec![
        Case::new(
            "vote.sync.ballot.b32",
            "and.b32 %r1, %a, 1;\nsetp.ne.u32 %p1, %r1, 0;\nvote.sync.ballot.b32 %d, %p1, -1;",
            [B32; 4],
        )
        .rows(rows(|v, t| ballot(v, t, |x| x & 1 != 0))),
        Case::new(
            "vote.sync.any/all/uni.pred",
            "and.b32 %r1, %a, 3;\nsetp.ne.u32 %p1, %r1, 0;\nvote.sync.any.pred %p2, %p1, -1;\nvote.sync.all.pred %p3, %p1, -1;\n\
             setp.ge.u32 %p4, %a, 0;\nvote.sync.uni.pred %p5, %p4, -1;\n\
             selp.u32 %r2, 1, 0, %p2;\nselp.u32 %r3, 2, 0, %p3;\nselp.u32 %r4, 4, 0, %p5;\nor.b32 %r2, %r2, %r3;\nor.b32 %d, %r2, %r4;",
            [B32; 4],
        )
        .rows(rows(|v, t| {
            let w = warp(v, t);
            let any = w.iter().any(|x| x & 3 != 0) as u32;
            let all = w.iter().all(|x| x & 3 != 0) as u32;
            any | all << 1 | 4
        })),
        Case::new("match.any.sync.b32", "and.b32 %r1, %a, 3;\nmatch.any.sync.b32 %d, %r1, -1;", [B32; 4]).rows(rows(
            |v, t| {
                let w = t / 32 * 32;
                (0..32).fold(0, |m, l| m | ((v[w + l] & 3 == v[t] & 3) as u32) << l)
            },
        )),
        Case::new(
            "match.all.sync.b32",
            "shr.u32 %r1, %t, 5;\nmul.lo.u32 %r5, %r1, %a;\nmatch.all.sync.b32 %r1|%p1, %r5, -1;\n\
             selp.u32 %r2, 1, 0, %p1;\nshl.b32 %r2, %r2, 31;\nshr.u32 %r1, %r1, 1;\nor.b32 %d, %r1, %r2;",
            [B32; 4],
        )
        // Warp 0 multiplies by 0 (all equal: mask, p = 1); warp 1 has distinct values (0, p = 0).
        .rows(rows(|_, t| if t < 32 { 0x7fff_ffff | 1 << 31 } else { 0 })),
        Case::new("redux.sync.add.u32", "redux.sync.add.u32 %d, %a, -1;", [B32; 4])
            .rows(rows(|v, t| warp(v, t).iter().fold(0u32, |a, &x| a.wrapping_add(x)))),
        Case::new("redux.sync.min.s32", "sub.s32 %r1, %a, 4000000;\nredux.sync.min.s32 %d, %r1, -1;", [B32; 4])
            .rows(rows(|v, t| warp(v, t).iter().map(|&x| x as i32 - 4_000_000).min().unwrap() as u32)),
        Case::new("redux.sync.max.u32", "redux.sync.max.u32 %d, %a, -1;", [B32; 4])
            .rows(rows(|v, t| *warp(v, t).iter().max().unwrap())),
        Case::new("redux.sync.xor.b32", "redux.sync.xor.b32 %d, %a, -1;", [B32; 4])
            .rows(rows(|v, t| warp(v, t).iter().fold(0, |a, &x| a ^ x))),
        Case::new("redux.sync.or.b32", "redux.sync.or.b32 %d, %a, -1;", [B32; 4])
            .rows(rows(|v, t| warp(v, t).iter().fold(0, |a, &x| a | x))),
        Case::new("activemask.b32 (converged)", "activemask.b32 %d;", [B32; 4]).rows(rows(|_, _| u32::MAX)),
        Case::new("%laneid", "mov.u32 %d, %laneid;", [B32; 4]).rows(rows(|_, t| (t % 32) as u32)),
        Case::new(
            "%lanemask_lt/le/eq/ge/gt",
            "mov.u32 %r1, %lanemask_lt;\nmov.u32 %r2, %lanemask_le;\nmov.u32 %r3, %lanemask_eq;\nmov.u32 %r4, %lanemask_ge;\nmov.u32 %r5, %lanemask_gt;\n\
             xor.b32 %r1, %r1, %r2;\nxor.b32 %r1, %r1, %r3;\nmul.lo.u32 %r4, %r4, 3;\nxor.b32 %r1, %r1, %r4;\nmul.lo.u32 %r5, %r5, 5;\nxor.b32 %d, %r1, %r5;",
            [B32; 4],
        )
        .rows(rows(|_, t| {
            let l = (t % 32) as u32;
            let eq = 1u32 << l;
            let lt = eq - 1;
            let le = lt | eq;
            let ge = !lt;
            let gt = !le;
            lt ^ le ^ eq ^ ge.wrapping_mul(3) ^ gt.wrapping_mul(5)
        })),
        Case::new(
            "%ntid/%nctaid/%ctaid",
            "mov.u32 %r1, %ntid.x;\nmov.u32 %r2, %nctaid.x;\nmov.u32 %r3, %ctaid.x;\nmov.u32 %r4, %ntid.y;\n\
             shl.b32 %r2, %r2, 16;\nshl.b32 %r3, %r3, 24;\nshl.b32 %r4, %r4, 12;\nor.b32 %r1, %r1, %r2;\nor.b32 %r1, %r1, %r3;\nor.b32 %d, %r1, %r4;",
            [B32; 4],
        )
        .rows(rows(|_, _| LANES as u32 | 1 << 16 | 1 << 12)),
    ];
    run_cases(&cases);
}
