//! `jax.image.resize` on the CPU: separable, the width then the height of
//! each plane as two 1-D passes, one rayon task per contiguous run of
//! planes. Each axis is the cheapest of four forms: untouched, a repeat
//! (`nearest` by an integer factor, a fill), a gather (`nearest`), or
//! weighted taps (the other methods: a few multiply-adds per output, the
//! height pass as whole-row `axpy`s that vectorise).

use crate::dtype::scalar;
use dfdx::prelude::*;
use rayon::prelude::*;

use super::{chunking, host_vec, Elem};
use crate::layers::resize::{ResizeGeometry, ResizeMethod, Taps};

/// How one axis is resized.
enum Axis<E> {
    /// Same size, and an interpolating method: a copy.
    Same,
    /// `nearest` by an integer factor: each input cell repeated.
    Repeat(usize),
    /// `nearest`: output `o` is input `idx[o]`.
    Gather(Vec<usize>),
    /// Output `o` is `sum_t w[o * width + t] * input[start[o] + t]`.
    Taps {
        start: Vec<usize>,
        width: usize,
        w: Vec<E>,
    },
}

impl<E: Elem> Axis<E> {
    fn new(method: ResizeMethod, antialias: bool, input: usize, output: usize) -> Self {
        let taps: Taps = crate::layers::resize::axis_taps(method, antialias, input, output);
        if method == ResizeMethod::Nearest {
            if output.is_multiple_of(input) {
                return Axis::Repeat(output / input);
            }
            return Axis::Gather(taps.start);
        }
        if input == output {
            return Axis::Same;
        }
        Axis::Taps {
            start: taps.start,
            width: taps.width,
            w: taps.weights.iter().map(|&v| scalar::<E>(v)).collect(),
        }
    }

    /// `out = resize(inp)` along a row.
    fn row(&self, inp: &[E], out: &mut [E]) {
        match self {
            Axis::Same | Axis::Repeat(1) => out.copy_from_slice(inp),
            Axis::Repeat(f) => {
                for (o, &v) in out.chunks_exact_mut(*f).zip(inp) {
                    o.fill(v);
                }
            }
            Axis::Gather(idx) => out.iter_mut().zip(idx).for_each(|(o, &i)| *o = inp[i]),
            Axis::Taps { start, width, w } => {
                for ((o, &s), w) in out.iter_mut().zip(start).zip(w.chunks_exact(*width)) {
                    *o = w
                        .iter()
                        .zip(&inp[s..s + width])
                        .fold(E::zero(), |a, (&w, &x)| a + w * x);
                }
            }
        }
    }

    /// `din += resizeᵀ(dout)` along a row.
    fn row_back(&self, dout: &[E], din: &mut [E]) {
        match self {
            Axis::Same | Axis::Repeat(1) => super::add_into(din, dout),
            Axis::Repeat(f) => {
                for (d, g) in din.iter_mut().zip(dout.chunks_exact(*f)) {
                    *d += g.iter().fold(E::zero(), |a, &v| a + v);
                }
            }
            Axis::Gather(idx) => dout.iter().zip(idx).for_each(|(&g, &i)| din[i] += g),
            Axis::Taps { start, width, w } => {
                for ((&g, &s), w) in dout.iter().zip(start).zip(w.chunks_exact(*width)) {
                    din[s..s + width]
                        .iter_mut()
                        .zip(w)
                        .for_each(|(d, &w)| *d += w * g);
                }
            }
        }
    }

    /// Rows `out_rows` (of `n` cells each) from rows `inp` (the height
    /// pass: whole rows at a time).
    fn rows(&self, inp: &[E], out: &mut [E], n: usize) {
        match self {
            Axis::Same | Axis::Repeat(1) => out.copy_from_slice(inp),
            Axis::Repeat(f) => {
                for (o, r) in out.chunks_exact_mut(n * f).zip(inp.chunks_exact(n)) {
                    o.chunks_exact_mut(n).for_each(|o| o.copy_from_slice(r));
                }
            }
            Axis::Gather(idx) => {
                for (o, &i) in out.chunks_exact_mut(n).zip(idx) {
                    o.copy_from_slice(&inp[i * n..(i + 1) * n]);
                }
            }
            Axis::Taps { start, width, w } => {
                for ((o, &s), w) in out
                    .chunks_exact_mut(n)
                    .zip(start)
                    .zip(w.chunks_exact(*width))
                {
                    o.fill(E::zero());
                    for (r, &w) in inp[s * n..(s + width) * n].chunks_exact(n).zip(w) {
                        o.iter_mut().zip(r).for_each(|(o, &x)| *o += w * x);
                    }
                }
            }
        }
    }

    /// `din += resizeᵀ(dout)` on whole rows of `n` cells.
    fn rows_back(&self, dout: &[E], din: &mut [E], n: usize) {
        match self {
            Axis::Same | Axis::Repeat(1) => super::add_into(din, dout),
            Axis::Repeat(f) => {
                for (d, g) in din.chunks_exact_mut(n).zip(dout.chunks_exact(n * f)) {
                    g.chunks_exact(n).for_each(|g| super::add_into(d, g));
                }
            }
            Axis::Gather(idx) => {
                for (g, &i) in dout.chunks_exact(n).zip(idx) {
                    super::add_into(&mut din[i * n..(i + 1) * n], g);
                }
            }
            Axis::Taps { start, width, w } => {
                for ((g, &s), w) in dout.chunks_exact(n).zip(start).zip(w.chunks_exact(*width)) {
                    for (d, &w) in din[s * n..(s + width) * n].chunks_exact_mut(n).zip(w) {
                        d.iter_mut().zip(g).for_each(|(d, &g)| *d += w * g);
                    }
                }
            }
        }
    }
}

/// Both axes of a plane.
struct Plan<E> {
    g: ResizeGeometry,
    height: Axis<E>,
    width: Axis<E>,
}

impl<E: Elem> Plan<E> {
    fn new(g: &ResizeGeometry) -> Self {
        Self {
            g: *g,
            height: Axis::new(g.method, g.antialias, g.h, g.oh),
            width: Axis::new(g.method, g.antialias, g.w, g.ow),
        }
    }

    /// One plane; `tmp` holds `h * ow` cells.
    fn forward(&self, x: &[E], y: &mut [E], tmp: &mut [E]) {
        let g = &self.g;
        for (r, t) in x.chunks_exact(g.w).zip(tmp.chunks_exact_mut(g.ow)) {
            self.width.row(r, t);
        }
        self.height.rows(tmp, y, g.ow);
    }

    /// One plane's input gradient, added to `dx`; `tmp` holds `h * ow`.
    fn backward(&self, dy: &[E], dx: &mut [E], tmp: &mut [E]) {
        let g = &self.g;
        tmp.fill(E::zero());
        self.height.rows_back(dy, tmp, g.ow);
        for (t, d) in tmp.chunks_exact(g.ow).zip(dx.chunks_exact_mut(g.w)) {
            self.width.row_back(t, d);
        }
    }
}

/// See [`FlaxenDevice::try_resize2d`](crate::layers::FlaxenDevice::try_resize2d).
pub(in crate::layers) fn resize2d<E: Elem, X: Shape, Y: Shape, T: Tape<E, Cpu>>(
    dev: &Cpu,
    geom: &ResizeGeometry,
    x: Tensor<X, E, Cpu, T>,
    y_shape: Y,
) -> Result<Tensor<Y, E, Cpu, T>, CpuError> {
    let g = *geom;
    let (ip, op) = (g.h * g.w, g.oh * g.ow);
    let numel = x.shape().num_elements();
    let planes = numel / ip.max(1);
    assert!(
        planes * ip == numel && y_shape.num_elements() == planes * op,
        "resize2d: tensor sizes disagree with {g:?}"
    );
    let x = x.try_contiguous()?;
    let (x, mut tape) = x.split_tape();
    let x_ghost = x.ghost();
    let xs = host_vec(x)?;
    let plan = Plan::<E>::new(&g);
    let per = chunking(planes);
    let mut ys = vec![E::zero(); planes * op];
    ys.par_chunks_mut(op * per)
        .zip(xs.par_chunks(ip * per))
        .for_each(|(y, x)| {
            let mut tmp = vec![E::zero(); g.h * g.ow];
            for (y, x) in y.chunks_exact_mut(op).zip(x.chunks_exact(ip)) {
                plan.forward(x, y, &mut tmp);
            }
        });
    drop(xs);
    let y = dev.try_tensor_from_vec(ys, y_shape)?;
    if T::OWNS_TAPE {
        let y_ghost = y.ghost();
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            let dx = grads.get_or_alloc_mut(&x_ghost)?;
            dx.par_chunks_mut(ip * per)
                .zip(dy.par_chunks(op * per))
                .for_each(|(dx, dy)| {
                    let mut tmp = vec![E::zero(); g.h * g.ow];
                    for (dx, dy) in dx.chunks_exact_mut(ip).zip(dy.chunks_exact(op)) {
                        plan.backward(dy, dx, &mut tmp);
                    }
                });
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            Ok(())
        });
    }
    Ok(y.put_tape(tape))
}
