//! FP8 casts (OCP E4M3 and E5M2) of f32 values, rounded to nearest even and
//! saturating: what a model quantised to FP8 stores, for the float-coding
//! measurements and tests.

/// An FP8 format: exponent bits, mantissa bits, bias, and the largest
/// finite value's bits (without the sign).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8 {
    exponent: u32,
    mantissa: u32,
    bias: i32,
    max_bits: u8,
    nan_bits: u8,
}

/// OCP E4M3: no infinities, NaN `S.1111.111`, largest finite 448.
pub const E4M3: Fp8 = Fp8 {
    exponent: 4,
    mantissa: 3,
    bias: 7,
    max_bits: 0x7e,
    nan_bits: 0x7f,
};

/// OCP E5M2: IEEE-like, largest finite 57,344; casts saturate, so
/// infinities become the largest finite value.
pub const E5M2: Fp8 = Fp8 {
    exponent: 5,
    mantissa: 2,
    bias: 15,
    max_bits: 0x7b,
    nan_bits: 0x7f,
};

impl Fp8 {
    /// The value of the bits `b` (sign included); NaN for NaN bits.
    pub fn to_f32(self, b: u8) -> f32 {
        let sign: f32 = if b & 0x80 != 0 { -1.0 } else { 1.0 };
        let mag = b & 0x7f;
        if mag == self.nan_bits || (self.exponent == 5 && mag > 0x7c) {
            return f32::NAN;
        }
        if self.exponent == 5 && mag == 0x7c {
            return sign * f32::INFINITY;
        }
        let e = i32::from(mag >> self.mantissa);
        let m = f64::from(mag & ((1 << self.mantissa) - 1));
        let scale = (1u32 << self.mantissa) as f64;
        let v = if e == 0 {
            m / scale * 2f64.powi(1 - self.bias)
        } else {
            (1.0 + m / scale) * 2f64.powi(e - self.bias)
        };
        sign * v as f32
    }

    /// `x` cast to this format: rounded to nearest, ties to even; values
    /// beyond the largest finite one (infinities too) saturate to it; NaN
    /// stays NaN.
    pub fn from_f32(self, x: f32) -> u8 {
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        if x.is_nan() {
            return sign | self.nan_bits;
        }
        let a = f64::from(x.abs());
        let max = f64::from(self.to_f32(self.max_bits));
        if a >= max {
            return sign | self.max_bits;
        }
        let emin = 1 - self.bias;
        let m = self.mantissa as i32;
        // The spacing of representable values around `a`.
        let e = if a < 2f64.powi(emin) {
            emin
        } else {
            exponent_of(a)
        };
        let q = 2f64.powi(e - m);
        let r = (a / q).round_ties_even() * q;
        if r >= max {
            return sign | self.max_bits;
        }
        if r == 0.0 {
            return sign;
        }
        let bits = if r < 2f64.powi(emin) {
            (r / 2f64.powi(emin - m)) as u32
        } else {
            let e = exponent_of(r);
            let mant = (r / 2f64.powi(e - m)) as u32 - (1 << m);
            (((e + self.bias) as u32) << m) | mant
        };
        sign | bits as u8
    }
}

/// `floor(log2(a))` of a positive normal f64.
fn exponent_of(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fp8_value_casts_to_itself_and_ties_go_to_even() {
        for f in [E4M3, E5M2] {
            for b in 0..=255u8 {
                let v = f.to_f32(b);
                if v.is_nan() || v.is_infinite() {
                    continue;
                }
                // -0.0 keeps its sign.
                assert_eq!(f.from_f32(v), b, "{f:?} {b:#x} = {v}");
            }
        }
        // 1 + 1/16 lies between 1 and 1.125 in E4M3: the tie goes to the
        // even mantissa (1.0); 1 + 3/16 goes to 1.25.
        assert_eq!(E4M3.from_f32(1.0625), 0x38);
        assert_eq!(E4M3.from_f32(1.1875), 0x3a);
        assert_eq!(E4M3.from_f32(1e9), 0x7e);
        assert_eq!(E4M3.from_f32(-f32::INFINITY), 0xfe);
        assert_eq!(E5M2.from_f32(f32::INFINITY), 0x7b);
        assert_eq!(E5M2.from_f32(1e-9), 0);
        // The smallest E4M3 subnormal is 2^-9; half of it ties to 0.
        assert_eq!(E4M3.from_f32(2f32.powi(-10)), 0);
        assert_eq!(E4M3.from_f32(1.5 * 2f32.powi(-9)), 2);
    }
}
