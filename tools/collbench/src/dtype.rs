//! Element types, reduction operators and the inputs whose results are known exactly.
//!
//! Every rank fills its buffers with small integers (see [`input_value`]): sums of them stay
//! integers far below 2^8, which f32, f16 and bf16 all represent exactly, so the expected result
//! is known bit for bit whatever order a backend reduces in (nccl-tests' approach, done on the
//! host). Reductions run in f32 and round back to the element type (round to nearest even).

use clap::ValueEnum;

/// The element type of the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }

    /// Writes `value` (exactly representable in this type) as element `index` of `bytes`.
    pub fn store(self, bytes: &mut [u8], index: usize, value: f32) {
        match self {
            Dtype::F32 => bytes[index * 4..index * 4 + 4].copy_from_slice(&value.to_le_bytes()),
            Dtype::F16 => {
                bytes[index * 2..index * 2 + 2].copy_from_slice(&f32_to_f16(value).to_le_bytes())
            }
            Dtype::Bf16 => {
                bytes[index * 2..index * 2 + 2].copy_from_slice(&f32_to_bf16(value).to_le_bytes())
            }
        }
    }

    /// Reads element `index` of `bytes` as f32.
    pub fn load(self, bytes: &[u8], index: usize) -> f32 {
        match self {
            Dtype::F32 => f32::from_le_bytes(
                bytes[index * 4..index * 4 + 4]
                    .try_into()
                    .unwrap_or_default(),
            ),
            Dtype::F16 => f16_to_f32(u16::from_le_bytes([bytes[index * 2], bytes[index * 2 + 1]])),
            Dtype::Bf16 => {
                bf16_to_f32(u16::from_le_bytes([bytes[index * 2], bytes[index * 2 + 1]]))
            }
        }
    }
}

/// The reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RedOp {
    Sum,
    Max,
    Min,
}

impl RedOp {
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Max => "max",
            RedOp::Min => "min",
        }
    }

    #[inline(always)]
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            RedOp::Sum => a + b,
            RedOp::Max => a.max(b),
            RedOp::Min => a.min(b),
        }
    }
}

/// Element `index` of rank `rank`'s input: an integer in 1..=8, different across ranks.
pub fn input_value(rank: usize, index: usize) -> f32 {
    ((index % 5) + (rank % 4) + 1) as f32
}

/// The exact reduction of element `index` over ranks `0..world`.
pub fn reduced_value(op: RedOp, world: usize, index: usize) -> f32 {
    (1..world).fold(input_value(0, index), |acc, r| {
        op.apply(acc, input_value(r, index))
    })
}

/// `dst[i] = dst[i] op src[i]` over whole elements of `dtype` (`dst` and `src` the same length).
pub fn reduce_into(dtype: Dtype, op: RedOp, dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    match dtype {
        Dtype::F32 => {
            // SAFETY: every bit pattern is a valid f32; align_to only reinterprets the aligned
            // middle, and the fallback below handles buffers that are not 4-byte aligned.
            let (d_pre, d_mid, d_post) = unsafe { dst.align_to_mut::<f32>() };
            let (s_pre, s_mid, s_post) = unsafe { src.align_to::<f32>() };
            let aligned =
                d_pre.is_empty() && s_pre.is_empty() && d_post.is_empty() && s_post.is_empty();
            if aligned && cfg!(target_endian = "little") {
                // Plain slices of f32 (buffers hold little-endian elements): the loop vectorizes.
                match op {
                    RedOp::Sum => d_mid.iter_mut().zip(s_mid).for_each(|(a, b)| *a += *b),
                    RedOp::Max => d_mid
                        .iter_mut()
                        .zip(s_mid)
                        .for_each(|(a, b)| *a = a.max(*b)),
                    RedOp::Min => d_mid
                        .iter_mut()
                        .zip(s_mid)
                        .for_each(|(a, b)| *a = a.min(*b)),
                }
                return;
            }
            for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                let a = f32::from_le_bytes([d[0], d[1], d[2], d[3]]);
                let b = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                d.copy_from_slice(&op.apply(a, b).to_le_bytes());
            }
        }
        Dtype::F16 => reduce_u16(dst, src, |a, b| {
            f32_to_f16(op.apply(f16_to_f32(a), f16_to_f32(b)))
        }),
        Dtype::Bf16 => reduce_u16(dst, src, |a, b| {
            f32_to_bf16(op.apply(bf16_to_f32(a), bf16_to_f32(b)))
        }),
    }
}

#[inline(always)]
fn reduce_u16(dst: &mut [u8], src: &[u8], f: impl Fn(u16, u16) -> u16) {
    for (d, s) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
        let r = f(
            u16::from_le_bytes([d[0], d[1]]),
            u16::from_le_bytes([s[0], s[1]]),
        );
        d.copy_from_slice(&r.to_le_bytes());
    }
}

pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// Round to nearest even; NaN stays NaN.
pub fn f32_to_bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    let rounding = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(rounding) >> 16) as u16
}

pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits >> 15) << 31;
    let exp = u32::from((bits >> 10) & 0x1f);
    let mant = u32::from(bits & 0x3ff);
    let out = match (exp, mant) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: value = mant * 2^-24.
            let v = mant as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, _) => sign | 0x7fc0_0000 | (mant << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (mant << 13),
    };
    f32::from_bits(out)
}

/// Round to nearest even, overflow to infinity, NaN stays NaN.
pub fn f32_to_f16(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal in f16: shift the full mantissa (with its implicit 1) into place.
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut out = m >> shift;
        if rest > half || (rest == half && out & 1 == 1) {
            out += 1;
        }
        return sign | out as u16;
    }
    let mut out = ((e as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && out & 1 == 1) {
        out += 1; // may carry into the exponent, which is the right rounding (up to infinity)
    }
    sign | out as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_round_trip_small_integers_and_known_values() {
        for i in -300i32..=300 {
            let v = i as f32;
            assert_eq!(f16_to_f32(f32_to_f16(v)), v, "f16 {v}");
            if i.abs() <= 256 {
                assert_eq!(bf16_to_f32(f32_to_bf16(v)), v, "bf16 {v}");
            }
        }
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(f32_to_f16(0.5), 0x3800);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f32_to_f16(2f32.powi(-24)), 0x0001);
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between two bf16 values: ties to even (1.0).
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert!(f16_to_f32(f32_to_f16(f32::NAN)).is_nan());
    }

    #[test]
    fn reductions_are_exact_on_the_check_inputs() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            for op in [RedOp::Sum, RedOp::Max, RedOp::Min] {
                let n = 37;
                let world = 7;
                let mut acc = vec![0u8; n * dtype.size()];
                for i in 0..n {
                    dtype.store(&mut acc, i, input_value(0, i));
                }
                for r in 1..world {
                    let mut other = vec![0u8; n * dtype.size()];
                    for i in 0..n {
                        dtype.store(&mut other, i, input_value(r, i));
                    }
                    reduce_into(dtype, op, &mut acc, &other);
                }
                for i in 0..n {
                    assert_eq!(
                        dtype.load(&acc, i),
                        reduced_value(op, world, i),
                        "{dtype:?} {op:?} {i}"
                    );
                }
            }
        }
    }
}
