//! Direct kernels for the usual first block of an image model: a 3x3
//! stride-1 convolution of a 1-channel input, relu, then a 2x2 average
//! pool (`avg_pool(relu(Conv(f, (3, 3))(x)), (2, 2), strides = (2, 2))`).
//!
//! With one input channel the patch matrix has 9 rows, so the im2col
//! path's passes over memory (the patch matrix, the convolution-sized
//! output and its gradient, each zeroed, pooled and masked in turn) cost
//! more than its multiply-adds. Here the forward pass computes each output
//! row in registers ([`LANES`] columns) straight from the padded image, two
//! rows at a time, relu'd and pooled before anything is stored; the
//! backward pass builds each channel's gradient row by row in registers,
//! nothing zeroed first, and takes its 9 weight products in one pass
//! ([`dots`]).
//!
//! The arithmetic is the im2col path's in the same order (bias, then the 9
//! taps; each window row's pair, then the two rows; the same dot products
//! and sums), so values and gradients are the same bit for bit, and when
//! the input's gradient is wanted the im2col path's backward pass
//! ([`super::conv`]) runs on what [`forward`] saved (the input and the relu
//! mask, in its layout). Other shapes take the im2col path both ways.
//! Measured on the 28 x 28 seed CNN's first block, batch 32, interleaved
//! runs: 0.40-0.47 ms forward and 0.56-0.61 ms backward, against
//! 0.65-0.73 and 0.59-0.71 ms.

use rayon::prelude::*;

use super::conv::{sum, sum_partials};
use super::gemm::dots;
use super::scratch::Scratch;
use super::{fine_chunking, lanes, Elem, Shared};
use crate::layers::{ConvGeometry, Epilogue, PoolKind};

/// Output columns a row's registers hold: rows up to this wide (28 for
/// MNIST, 32 for CIFAR) take the direct kernel.
const LANES: usize = 32;

/// Row stride of the padded image: every window column `kj < 3` reads
/// `LANES` values inside its row.
const STRIDE: usize = LANES + 2;

/// The geometry [`forward`] and [`backward`] handle, checked by
/// [`Direct::of`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Direct {
    /// Rows of the padded image.
    ph: usize,
    /// Convolution output rows and columns.
    oh: usize,
    ow: usize,
}

impl Direct {
    /// The direct kernel's geometry, if `geom` and `epi` are its block: one
    /// input channel, a 3x3 stride-1 undilated kernel, output rows of at
    /// most [`LANES`] columns, relu, and a 2x2 stride-2 unpadded average
    /// pool.
    pub(super) fn of(geom: &ConvGeometry, epi: &Epilogue) -> Option<Self> {
        let w = &geom.win;
        let pooled = matches!(
            epi.pool,
            Some((PoolKind::Avg, p))
                if (p.kh, p.kw, p.sh, p.sw) == (2, 2, 2, 2)
                    && p.pt + p.pb + p.pl + p.pr == 0
                    && (p.h, p.w) == (w.oh, w.ow)
        );
        let conv = geom.c == 1
            && geom.groups == 1
            && (w.kh, w.kw, w.sh, w.sw, w.dh, w.dw) == (3, 3, 1, 1, 1, 1)
            && w.pl + w.w + w.pr <= STRIDE
            && w.pl + LANES <= STRIDE
            && w.ow <= LANES;
        (conv && pooled && epi.relu).then_some(Self {
            ph: w.h + w.pt + w.pb,
            oh: w.oh,
            ow: w.ow,
        })
    }

    fn conv_plane(&self) -> usize {
        self.oh * self.ow
    }

    fn out_plane(&self) -> usize {
        (self.oh / 2) * (self.ow / 2)
    }
}

/// Copies the `h x w` image `x` into `pad` (`ph` rows of [`STRIDE`]) with
/// zeros around it.
#[inline(always)]
fn pad_image<E: Elem>(geom: &ConvGeometry, x: &[E], pad: &mut [E]) {
    let w = &geom.win;
    pad.fill(E::zero());
    for r in 0..w.h {
        let at = (r + w.pt) * STRIDE + w.pl;
        // A whole register per row where the image holds one (zeros past
        // the row's end), not a `memcpy` call of a short variable length.
        match x.get(r * w.w..r * w.w + LANES) {
            Some(src) => {
                let row: [E; LANES] = lanes(|l| if l < w.w { src[l] } else { E::zero() });
                pad[at..at + LANES].copy_from_slice(&row);
            }
            None => pad[at..at + w.w].copy_from_slice(&x[r * w.w..(r + 1) * w.w]),
        }
    }
}

/// Convolution output row `y` of one channel (kernel `k`, bias `b`) over
/// [`LANES`] columns, the ones past `ow` reading padding or the next row.
/// By value, so LLVM keeps the row in vector registers.
#[inline(always)]
fn conv_row<E: Elem>(pad: &[E], y: usize, k: &[E; 9], b: E) -> [E; LANES] {
    let mut acc = [b; LANES];
    for ki in 0..3 {
        for kj in 0..3 {
            let r: &[E; LANES] = pad[(y + ki) * STRIDE + kj..][..LANES]
                .try_into()
                .expect("a padded row");
            let wt = k[ki * 3 + kj];
            acc = lanes(|l| acc[l] + wt * r[l]);
        }
    }
    acc
}

/// Writes the first `n` values of `row` at `dst[at..]`. The whole array
/// goes when it fits in `dst` (one register store instead of a call to
/// `memcpy` for a short, variable length): the values past `n` land on
/// the next row, which the caller writes after this one.
#[inline(always)]
fn store<T: Copy, const N: usize>(dst: &mut [T], at: usize, row: &[T; N], n: usize) {
    match dst.get_mut(at..at + N) {
        Some(d) => d.copy_from_slice(row),
        None => dst[at..at + n].copy_from_slice(&row[..n]),
    }
}

/// `n <= N` values of `src` from `at` in an array: `N` read in place when
/// `src` holds them (one register load), else `n` copied and zeros after;
/// the lanes past `n` are for the caller to ignore.
#[inline(always)]
fn load<T: Copy + Default, const N: usize>(src: &[T], at: usize, n: usize) -> [T; N] {
    match src.get(at..at + N) {
        Some(r) => r.try_into().expect("N values"),
        None => {
            let mut a = [T::default(); N];
            a[..n].copy_from_slice(&src[at..at + n]);
            a
        }
    }
}

struct FwdTask<'a, E: Elem> {
    d: Direct,
    geom: &'a ConvGeometry,
    x: &'a [E],
    weight: &'a [E],
    bias: Option<&'a [E]>,
    y: Shared<E>,
    positive: Shared<u8>,
    keep: bool,
    batch: usize,
}

simd_dispatch!(fn forward_task_simd<E: Elem>(task: &FwdTask<'_, E>, t: usize) => forward_task);

#[inline(always)]
fn forward_task<E: Elem>(task: &FwdTask<'_, E>, t: usize) {
    let FwdTask {
        d,
        geom,
        x,
        weight,
        bias,
        y,
        positive,
        keep,
        batch,
    } = *task;
    let (plane, conv_plane, out_plane) = (geom.win.in_plane(), d.conv_plane(), d.out_plane());
    let (o, ow, pw) = (geom.o, d.ow, d.ow / 2);
    let quarter = E::from(0.25).unwrap_or_else(E::zero);
    let per = fine_chunking(batch);
    let mut pad = Scratch::<E>::new(d.ph * STRIDE);
    for b in t * per..((t + 1) * per).min(batch) {
        pad_image(geom, &x[b * plane..(b + 1) * plane], &mut pad);
        // SAFETY: example `b`'s outputs and mask, which only this task
        // writes; the buffers hold `batch` examples (the mask only when
        // kept) and are initialised (zeros).
        let yb = unsafe { y.range(b * o * out_plane, o * out_plane) };
        let pb = if keep {
            unsafe { positive.range(b * o * conv_plane, o * conv_plane) }
        } else {
            &mut []
        };
        for ch in 0..o {
            let k: &[E; 9] = weight[ch * 9..][..9].try_into().expect("a 3x3 kernel");
            let bias = bias.map_or(E::zero(), |b| b[ch]);
            for py in 0..d.oh / 2 {
                let mut rows = [[E::zero(); LANES]; 2];
                for (r, row) in rows.iter_mut().enumerate() {
                    let y = 2 * py + r;
                    let a = conv_row(&pad, y, k, bias);
                    if keep {
                        let m: [u8; LANES] = lanes(|l| u8::from(a[l] > E::zero()));
                        store(pb, ch * conv_plane + y * ow, &m, ow);
                    }
                    *row = lanes(|l| a[l].max(E::zero()));
                }
                // Each row's pair first, as the pooling kernel adds them,
                // so the values are the unfused ops' bit for bit.
                let [r0, r1] = &rows;
                let pooled: [E; LANES / 2] = lanes(|i| {
                    ((r0[2 * i] + r0[2 * i + 1]) + (r1[2 * i] + r1[2 * i + 1])) * quarter
                });
                store(yb, ch * out_plane + py * pw, &pooled, pw);
            }
        }
    }
}

/// The block's forward pass over `batch` examples: the pooled outputs and,
/// when `keep`, the relu mask in [`super::conv`]'s layout (`batch x o x oh
/// x ow`, 1 where the pre-activation was positive). A last row that the
/// pooling drops (odd `oh`) is not computed: its mask is 0 or 1 and its
/// gradient 0 either way.
pub(super) fn forward<E: Elem>(
    d: Direct,
    geom: &ConvGeometry,
    batch: usize,
    x: &[E],
    weight: &[E],
    bias: Option<&[E]>,
    keep: bool,
) -> (Vec<E>, Vec<u8>) {
    let mut y = vec![E::zero(); batch * geom.o * d.out_plane()];
    let mask_len = if keep {
        batch * geom.o * d.conv_plane()
    } else {
        0
    };
    let mut positive = vec![0u8; mask_len];
    let task = FwdTask {
        d,
        geom,
        x,
        weight,
        bias,
        y: Shared::new(&mut y),
        positive: Shared::new(&mut positive),
        keep,
        batch,
    };
    let per = fine_chunking(batch);
    (0..batch.div_ceil(per))
        .into_par_iter()
        .for_each(|t| forward_task_simd(&task, t));
    (y, positive)
}

struct BwdTask<'a, E: Elem> {
    d: Direct,
    geom: &'a ConvGeometry,
    x: &'a [E],
    positive: &'a [u8],
    dy: &'a [E],
    bias_grad: bool,
    batch: usize,
}

simd_dispatch!(fn backward_task_simd<E: Elem>(
    task: &BwdTask<'_, E>,
    t: usize,
) -> (Scratch<E>, Vec<E>) => backward_task);

/// Backward task `t`: examples `t * per..`, their share of the weight and
/// bias gradients, summed as the im2col path sums them.
#[inline(always)]
fn backward_task<E: Elem>(task: &BwdTask<'_, E>, t: usize) -> (Scratch<E>, Vec<E>) {
    let BwdTask {
        d,
        geom,
        x,
        positive,
        dy,
        bias_grad,
        batch,
    } = *task;
    let win = &geom.win;
    let (plane, conv_plane, out_plane) = (win.in_plane(), d.conv_plane(), d.out_plane());
    let (o, ow, pw) = (geom.o, d.ow, d.ow / 2);
    let quarter = E::from(0.25).unwrap_or_else(E::zero);
    let per = fine_chunking(batch);
    // Overwritten by the first example.
    let mut dw = Scratch::new(o * 9);
    let mut db = vec![E::zero(); if bias_grad { o } else { 0 }];
    // The patch matrix (im2col's values) and one channel's
    // convolution-output gradient, each with a register of slack so that
    // every row is written whole.
    let mut cols = Scratch::<E>::new(9 * conv_plane + LANES);
    let mut pad = Scratch::<E>::new(d.ph * STRIDE);
    let mut g = Scratch::<E>::new(conv_plane + LANES);
    for (i, b) in (t * per..((t + 1) * per).min(batch)).enumerate() {
        pad_image(geom, &x[b * plane..(b + 1) * plane], &mut pad);
        for tap in 0..9 {
            let (ki, kj) = (tap / 3, tap % 3);
            for y in 0..d.oh {
                let row: [E; LANES] = load(&pad, (y + ki) * STRIDE + kj, LANES);
                store(&mut cols, tap * conv_plane + y * ow, &row, ow);
            }
        }
        let taps: [&[E]; 9] = rows9(&cols, conv_plane);
        for ch in 0..o {
            // Offsets into the whole buffers, so that only the very last
            // row falls back to a short copy.
            let (dz_at, mask_at) = ((b * o + ch) * out_plane, (b * o + ch) * conv_plane);
            // The pooling's gradient, then relu's (dfdx's `df(y) * g`, so
            // a NaN spreads as in the unfused ops); the rows and columns the
            // pooling dropped get zero.
            for y in 0..2 * (d.oh / 2) {
                // Whole registers: lanes past the row read the next row (or
                // zeros) and are not stored; `up` is zero past the pooled
                // columns.
                let half: [E; LANES / 2] = load(dy, dz_at + (y / 2) * pw, pw);
                let up: [E; LANES] = lanes(|l| {
                    if l < 2 * pw {
                        half[l / 2] * quarter
                    } else {
                        E::zero()
                    }
                });
                let m: [u8; LANES] = load(positive, mask_at + y * ow, ow);
                let row: [E; LANES] =
                    lanes(|l| up[l] * if m[l] != 0 { E::one() } else { E::zero() });
                store(&mut g, y * ow, &row, ow);
            }
            let g = &mut g[..conv_plane];
            g[2 * (d.oh / 2) * ow..].fill(E::zero());
            if let Some(acc) = db.get_mut(ch) {
                *acc += sum(g);
            }
            let prods = dots(g, taps);
            for (w, p) in dw[ch * 9..][..9].iter_mut().zip(prods) {
                *w = if i > 0 { *w + p } else { p };
            }
        }
    }
    (dw, db)
}

/// The 9 rows of `cols`, each `n` long.
#[inline(always)]
fn rows9<E>(cols: &[E], n: usize) -> [&[E]; 9] {
    std::array::from_fn(|t| &cols[t * n..(t + 1) * n])
}

/// The block's weight and bias gradients (no input gradient: the caller
/// takes the im2col path when one is wanted) from the input and the relu
/// mask that [`forward`] kept; `dy` is the gradient of the pooled output,
/// and the bias gradient is empty unless `bias_grad`.
///
/// The same values as the im2col path, bit for bit: each output gradient
/// is one rounding of the same product, and the sums are [`dots`] (the
/// im2col path's dot products) and [`sum`], over examples and tasks in the
/// same order. Faster because nothing is zeroed first and the 9 products
/// of a channel read its gradient once.
pub(super) fn backward<E: Elem>(
    d: Direct,
    geom: &ConvGeometry,
    batch: usize,
    x: &[E],
    positive: &[u8],
    dy: &[E],
    bias_grad: bool,
) -> (Scratch<E>, Vec<E>) {
    let task = BwdTask {
        d,
        geom,
        x,
        positive,
        dy,
        bias_grad,
        batch,
    };
    let per = fine_chunking(batch);
    let parts: Vec<(Scratch<E>, Vec<E>)> = (0..batch.div_ceil(per))
        .into_par_iter()
        .map(|t| backward_task_simd(&task, t))
        .collect();
    sum_partials(parts, geom.o * 9, if bias_grad { geom.o } else { 0 })
}
