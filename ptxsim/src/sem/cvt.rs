//! `cvt` semantics: every integer and float width, rounding modes, `.sat`, `.ftz`, `.relu`.

use super::int::{clamp_to, ival, norm};
use crate::ir::Mods;
use crate::num::{self, IRnd, Rnd};
use crate::types::Ty;

/// aux bit 0: `.relu`.
const RELU: u32 = 1;
/// aux bit 2: `.satfinite` (overflow to the largest finite value instead of infinity).
const SATFINITE: u32 = 4;

/// Source value as f64 (exact), applying `.ftz` to f32 inputs.
fn float_in(m: &Mods, v: u64) -> f64 {
    match m.sty {
        Ty::F64 => f64::from_bits(v),
        Ty::F32 => {
            let x = f32::from_bits(v as u32);
            (if m.ftz { num::ftz_f32(x) } else { x }) as f64
        }
        Ty::F16 | Ty::F16x2 => num::f16_to_f32(v as u16) as f64,
        _ => num::bf16_to_f32(v as u16) as f64,
    }
}

fn float_out(m: &Mods, x: f64) -> u64 {
    let x = if m.aux & RELU != 0 && !x.is_nan() && x < 0.0 {
        0.0
    } else {
        x
    };
    let x = if m.sat { num::sat_f64(x) } else { x };
    match m.ty {
        Ty::F64 => x.to_bits(),
        Ty::F32 => {
            let r = num::f64_to_f32(x, m.rnd);
            let r = if m.ftz { num::ftz_f32(r) } else { r };
            r.to_bits() as u64
        }
        Ty::F16 => {
            let h = num::f64_to_f16(x, m.rnd);
            (if m.aux & SATFINITE != 0 {
                num::satfinite_f16(h)
            } else {
                h
            }) as u64
        }
        _ => {
            let h = num::f64_to_bf16(x, m.rnd);
            (if m.aux & SATFINITE != 0 {
                num::satfinite_bf16(h)
            } else {
                h
            }) as u64
        }
    }
}

/// The general `cvt.dtype.atype d, a`.
pub(crate) fn cvt(m: &Mods, s: [u64; 4]) -> u64 {
    let (dt, st) = (m.ty, m.sty);
    match (dt.is_float(), st.is_float()) {
        (false, false) => {
            let v = ival(st, s[0]);
            if m.sat {
                clamp_to(dt, v)
            } else {
                norm(dt, v as u64)
            }
        }
        (true, false) => {
            let v = ival(st, s[0]);
            let x = match dt {
                Ty::F32 => num::int_to_f32(v, m.rnd).to_bits() as u64,
                Ty::F64 => num::int_to_f64(v, m.rnd).to_bits(),
                Ty::F16 => num::int_to_f16(v, m.rnd) as u64,
                _ => num::int_to_bf16(v, m.rnd) as u64,
            };
            if m.sat {
                float_out(
                    &Mods { rnd: Rnd::Rn, ..*m },
                    float_in(
                        &Mods {
                            sty: dt,
                            ftz: false,
                            ..*m
                        },
                        x,
                    ),
                )
            } else {
                x
            }
        }
        (false, true) => {
            let x = float_in(m, s[0]);
            let r = m.irnd.unwrap_or(IRnd::Rzi);
            num::float_to_int(x, r, dt.is_signed(), dt.bits())
        }
        (true, true) => {
            let x = float_in(m, s[0]);
            if let Some(r) = m.irnd {
                let y = match dt {
                    Ty::F64 => num::round_f64(x, r),
                    _ => num::round_f32(x as f32, r) as f64,
                };
                return float_out(&Mods { rnd: Rnd::Rn, ..*m }, y);
            }
            if x.is_nan() && !m.sat {
                return match dt {
                    Ty::F64 => num::CANONICAL_NAN_F64,
                    Ty::F32 => num::CANONICAL_NAN_F32 as u64,
                    _ => 0x7fff,
                };
            }
            float_out(m, x)
        }
    }
}

/// `cvt.rn.{f16x2,bf16x2}.f32 d, a, b`: `a` goes to the upper half, `b` to the lower.
pub(crate) fn cvt_x2(m: &Mods, s: [u64; 4]) -> u64 {
    let one = |v: u64| {
        let mm = Mods {
            ty: if m.ty == Ty::Bf16x2 {
                Ty::Bf16
            } else {
                Ty::F16
            },
            sty: Ty::F32,
            ..*m
        };
        cvt(&mm, [v, 0, 0, 0]) & 0xffff
    };
    (one(s[0]) << 16) | one(s[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(dt: Ty, st: Ty) -> Mods {
        let mut m = Mods::new(dt);
        m.sty = st;
        m
    }

    #[test]
    fn conversions() {
        assert_eq!(
            cvt(&c(Ty::S64, Ty::S32), [0xffff_fffe, 0, 0, 0]),
            (-2i64) as u64
        );
        assert_eq!(
            cvt(&c(Ty::U64, Ty::U32), [0xffff_fffe, 0, 0, 0]),
            0xffff_fffe
        );
        assert_eq!(cvt(&c(Ty::U16, Ty::U32), [0x12345, 0, 0, 0]), 0x2345);
        let mut sat = c(Ty::U8, Ty::S32);
        sat.sat = true;
        assert_eq!(cvt(&sat, [(-5i64) as u64, 0, 0, 0]), 0);
        assert_eq!(
            cvt(&c(Ty::F32, Ty::S32), [(-3i64) as u64, 0, 0, 0]),
            (-3.0f32).to_bits() as u64
        );
        let mut fi = c(Ty::S32, Ty::F32);
        fi.irnd = Some(IRnd::Rzi);
        assert_eq!(
            cvt(&fi, [(-2.7f32).to_bits() as u64, 0, 0, 0]),
            (-2i64) as u64
        );
        assert_eq!(cvt(&fi, [f32::NAN.to_bits() as u64, 0, 0, 0]), 0);
        assert_eq!(
            cvt(&c(Ty::F16, Ty::F32), [1.0f32.to_bits() as u64, 0, 0, 0]),
            0x3c00
        );
        assert_eq!(
            cvt(&c(Ty::F32, Ty::F16), [0x3c00, 0, 0, 0]),
            1.0f32.to_bits() as u64
        );
        assert_eq!(
            cvt(&c(Ty::Bf16, Ty::F32), [1.0f32.to_bits() as u64, 0, 0, 0]),
            0x3f80
        );
        let x2 = c(Ty::F16x2, Ty::F32);
        assert_eq!(
            cvt_x2(
                &x2,
                [1.0f32.to_bits() as u64, 2.0f32.to_bits() as u64, 0, 0]
            ),
            0x3c00_4000
        );
    }
}
