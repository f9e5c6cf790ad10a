//! `tanh` and `exp` for the elementwise kernels: in `f32`, plain arithmetic
//! that the compiler vectorises under the run-time SIMD dispatch (libm's
//! `tanhf` and `expf` are one scalar call per element); in `f64`, libm.
//!
//! - `tanh` is the rational approximation XLA's CPU backend uses (Eigen's
//!   `generic_fast_tanh_float`: an odd degree-13 numerator over an even
//!   degree-6 denominator on `[-7.9, 7.9]`, ±1 outside): within 2.9e-7
//!   absolute of `f64::tanh` over `[-10, 10]`, the largest gap where the
//!   clamp meets 1.
//! - `exp` is Cephes' `expf` (Eigen's `pexp` for `f32`, which XLA's CPU
//!   backend also evaluates): `2^n exp(r)` with `n = round(x / ln 2)`, `r`
//!   reduced in two steps and a degree-6 polynomial; within 1.01 ulps of
//!   `f64::exp` over the whole range (the test sweeps 17.6 million points
//!   and holds it to 2). Below the
//!   smallest normal result (`x < -87.34`) it gives 0, where libm gives a
//!   subnormal; above `88.72` it gives infinity.

use super::Elem;

/// `tanh` and `exp` as the kernels evaluate them.
pub(crate) trait Math: Elem {
    fn tanh_kernel(self) -> Self;
    fn exp_kernel(self) -> Self;
}

impl Math for f32 {
    // The coefficients as Eigen and Cephes publish them (f32 rounds them
    // the same).
    #[allow(clippy::excessive_precision)]
    #[inline(always)]
    fn tanh_kernel(self) -> f32 {
        let x = self.clamp(-7.905_311, 7.905_311);
        let x2 = x * x;
        let mut p = x2.mul_add(-2.760_768_5e-16, 2.000_187_9e-13);
        p = x2.mul_add(p, -8.604_671_5e-11);
        p = x2.mul_add(p, 5.122_297e-8);
        p = x2.mul_add(p, 1.485_722_4e-5);
        p = x2.mul_add(p, 6.372_619_3e-4);
        p = x2.mul_add(p, 4.893_524_6e-3);
        let p = x * p;
        let mut q = x2.mul_add(1.198_258_4e-6, 1.185_347_1e-4);
        q = x2.mul_add(q, 2.268_434_6e-3);
        q = x2.mul_add(q, 4.893_525_2e-3);
        p / q
    }

    #[allow(clippy::excessive_precision)]
    #[inline(always)]
    fn exp_kernel(self) -> f32 {
        const LO: f32 = -87.336_55;
        const HI: f32 = 88.722_83;
        let x = self.clamp(LO, HI);
        let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
        // x - n ln 2, with ln 2 split so that `n * 0.693359375` is exact.
        let r = n.mul_add(-0.693_359_4, x);
        let r = n.mul_add(2.121_944_4e-4, r);
        let mut p = 1.987_569_1e-4_f32;
        p = p.mul_add(r, 1.398_199_9e-3);
        p = p.mul_add(r, 8.333_452e-3);
        p = p.mul_add(r, 4.166_579_6e-2);
        p = p.mul_add(r, 1.666_666_5e-1);
        p = p.mul_add(r, 5.000_000_1e-1);
        let y = p.mul_add(r * r, r) + 1.0;
        // 2^n for n in [-126, 128] as two factors 2^k (2^128 alone would
        // overflow), each built in the bits with no float-to-int
        // conversion (Rust's saturating `as` does not vectorise): adding
        // 2^23 to an integer-valued float puts the integer in the low
        // mantissa bits, and shifting them into the exponent field gives
        // 2^(k - 127).
        let pow2 = |k: f32| f32::from_bits((k + 127.0 + 8_388_608.0).to_bits() << 23);
        let half = (n * 0.5).floor();
        let y = y * pow2(half) * pow2(n - half);
        if self < LO {
            0.0
        } else {
            y
        }
    }
}

impl Math for f64 {
    #[inline(always)]
    fn tanh_kernel(self) -> f64 {
        self.tanh()
    }

    #[inline(always)]
    fn exp_kernel(self) -> f64 {
        self.exp()
    }
}

#[cfg(test)]
mod tests {
    use super::Math;

    #[test]
    fn the_f32_tanh_is_within_a_few_ulps_of_f64s() {
        let mut worst = 0f64;
        for k in -100_000..=100_000 {
            let x = k as f64 * 1e-4;
            let got = f64::from((x as f32).tanh_kernel());
            worst = worst.max((got - (x as f32 as f64).tanh()).abs());
        }
        assert!(worst < 3e-7, "{worst}");
    }

    /// Within 2 ulps of the correctly rounded value over every normal
    /// result, 0 below, infinity above, NaN kept.
    #[test]
    fn the_f32_exp_is_within_two_ulps_of_f64s() {
        let mut worst = 0f64;
        for k in -8_734_000..=8_872_000 {
            let x = k as f32 * 1e-5;
            let want = f64::from(x).exp();
            let got = f64::from(x.exp_kernel());
            if x < -87.336_55 {
                assert_eq!(got, 0.0, "{x}");
                continue;
            }
            let ulp = f64::from(f32::EPSILON) * 2f64.powi(want.log2().floor() as i32);
            worst = worst.max((got - want).abs() / ulp);
        }
        assert!(worst <= 2.0, "{worst} ulps");
        assert_eq!(0f32.exp_kernel(), 1.0);
        assert_eq!((-1000f32).exp_kernel(), 0.0);
        assert_eq!(f32::NEG_INFINITY.exp_kernel(), 0.0);
        assert!(f32::NAN.exp_kernel().is_nan());
    }
}
