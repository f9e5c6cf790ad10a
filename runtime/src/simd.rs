//! Run-time dispatch of hot loops to the CPU's widest vector instructions.

/// `$vis fn $name<E: Bound>(args)`: calls the `#[inline(always)]` function
/// `$body` compiled for the widest vector instructions the CPU has
/// (AVX-512F, else AVX2 + FMA, else the crate's baseline), picked at run
/// time. The crate is built for the baseline x86-64, whose 4-float vectors
/// run the kernels' loops (im2col, the fused epilogues, pooling) at a
/// fraction of what AVX-512 does beside gemm's own dispatched kernels (and
/// the optimizers' host passes, with their divisions and square roots, at a
/// quarter of the speed).
/// Everything `$body` calls must be `#[inline(always)]` (or small enough
/// to be inlined) to be compiled for the wider set.
macro_rules! simd_dispatch {
    ($vis:vis fn $name:ident<$e:ident: $bound:path>($($arg:ident: $ty:ty),* $(,)?) => $body:ident) => {
        simd_dispatch!($vis fn $name<$e: $bound>($($arg: $ty),*) -> () => $body);
    };
    ($vis:vis fn $name:ident<$e:ident: $bound:path>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $body:ident) => {
        $vis fn $name<$e: $bound>($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512<$e: $bound>($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2<$e: $bound>($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked just above).
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}
