//! The functional ops of the model language, a file per family: each holds
//! its signature, its shape rule (`check`) and its code (`expand`).
//! Dropout, a layer without parameters, is checked in `layers` and lands
//! here too.

mod activation;
mod attention;
mod axes;
pub mod broadcast;
mod concat;
mod lent;
mod mask;
mod pad;
mod pool;
pub mod random;
mod reduce;
mod reshape;
mod resize;
mod select;
mod softmax;
mod tables;

use crate::args::{Bound, Sig};
use crate::ast::Elem;
use crate::ctxt::Ctxt;
use crate::gen::Mode;
use crate::paths;
use crate::rules::Site;
use crate::symbol::OpKind;
use proc_macro2::TokenStream;
use quote::quote;

use activation::Act;
pub use activation::Activation;
pub use pool::Pool;
pub use resize::is_method_word;

/// A checked op (the step's inputs are recorded beside it).
pub enum Op {
    /// An elementwise activation.
    Activation(Activation),
    /// `Dropout(rate)`.
    Dropout(f64),
    /// `softmax` / `log_softmax` along this axis of the batched tensor.
    Softmax { log: bool, axis: usize },
    /// `mean` / `sum` over these axes of the batched tensor (ascending).
    Reduce { mean: bool, axes: Vec<usize> },
    /// `concatenate` along this axis of the batched tensor.
    Concat { axis: usize },
    /// `avg_pool` / `max_pool`.
    Pool(Pool),
    /// `flatten` of an image: flaxen's fast `Flatten2D`.
    FlattenImage {
        chw: [usize; 3],
        /// `channels_first = true`: the ported Flax model flattened
        /// channel-first, so a `Dense` reading it maps one to one.
        channels_first: bool,
    },
    /// Any other reshape to the step's shape (same element count).
    Reshape,
    /// `resize`: `jax.image.resize` of the height and width.
    Resize(resize::Resize),
    /// A permutation of the batched tensor's axes (`swapaxes`).
    Permute(Vec<usize>),
    /// `x[i]`: element `i` of the first per-example axis.
    Take(usize),
    /// An attention mask.
    Mask(mask::Mask),
    /// NumPy broadcasting of an operand of arithmetic from this
    /// per-example shape to the step's.
    Broadcast(Vec<usize>),
    /// `x[a..b]`: rows `a..b` of the first per-example axis; `true` on
    /// token ids.
    Slice(usize, usize, bool),
    /// `shift_right(x)`: the first per-example axis moved down one, a zero
    /// in front and the last row dropped (Flax's `shift_right`); `true` on
    /// token ids.
    ShiftRight(bool),
    /// `sinusoidal_positions(x)`: the fixed position table, `x`'s shape.
    Sinusoidal { min_scale: f64, max_scale: f64 },
    /// `select(mask, a, b)` (`jnp.where`): inputs the mask, then `a` and
    /// `b` where they are tensors; a number stands in for either.
    Select {
        on_true: Option<f64>,
        on_false: Option<f64>,
    },
    /// `arange(start, stop)`: the constant `[stop - start]` row of floats,
    /// the same for every example.
    Arange { start: i64 },
    /// `pad(x, pad_width)`: `(before, after)` rows of `value` per axis.
    Pad {
        widths: Vec<(usize, usize)>,
        value: f64,
    },
    /// `slice(x, start, stop, axis)`: `start..stop` of per-example `axis`.
    SliceAxis {
        axis: usize,
        start: usize,
        stop: usize,
    },
    /// `dot_product_attention(q, k, v)`; with `mask = m`, the mask is the
    /// last input.
    DotProductAttention { masked: bool },
    /// `embed.attend(x)`: the table of the `Embed` field of this name.
    Attend(syn::Ident),
    /// `random.normal(shape)` and the other draws: no input.
    Draw(random::Draw),
    /// The table of this `Embed` field, broadcast over the batch, for a
    /// nested model it is passed to: no input.
    Table(syn::Ident),
    /// `embed(ids)` of an `Embed` passed in: its table, then the ids.
    TableLookup,
    /// `embed.attend(x)` of an `Embed` passed in: `x`, then its table.
    TableAttend,
}

/// Which family (one file of this module) an op belongs to: the one
/// exhaustive mapping from the vocabulary, which every other dispatch here
/// matches on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Activation(Act),
    Softmax { log: bool },
    Reduce { mean: bool },
    Concat,
    Pool { avg: bool },
    Flatten,
    Reshape,
    Resize,
    SwapAxes,
    Transpose,
    CausalMask,
    AttentionMask,
    CombineMasks,
    ShiftRight,
    Sinusoidal,
    Pad,
    SliceAxis,
    DotProductAttention,
}

fn family(kind: OpKind) -> Family {
    let act = Family::Activation;
    match kind {
        OpKind::Relu => act(Act::Relu),
        OpKind::Gelu => act(Act::Gelu),
        OpKind::Sigmoid => act(Act::Sigmoid),
        OpKind::Tanh => act(Act::Tanh),
        OpKind::Silu => act(Act::Silu),
        OpKind::Swish => act(Act::Swish),
        OpKind::LeakyRelu => act(Act::LeakyRelu),
        OpKind::Elu => act(Act::Elu),
        OpKind::Selu => act(Act::Selu),
        OpKind::Softplus => act(Act::Softplus),
        OpKind::LogSigmoid => act(Act::LogSigmoid),
        OpKind::Relu6 => act(Act::Relu6),
        OpKind::HardTanh => act(Act::HardTanh),
        OpKind::HardSigmoid => act(Act::HardSigmoid),
        OpKind::HardSilu | OpKind::HardSwish => act(Act::HardSilu),
        OpKind::Exp => act(Act::Exp),
        OpKind::Log => act(Act::Log),
        OpKind::Sqrt => act(Act::Sqrt),
        OpKind::Rsqrt => act(Act::Rsqrt),
        OpKind::Sin => act(Act::Sin),
        OpKind::Cos => act(Act::Cos),
        OpKind::Abs => act(Act::Abs),
        OpKind::Square => act(Act::Square),
        OpKind::Pow => act(Act::Pow),
        OpKind::Clip => act(Act::Clip),
        OpKind::StopGradient => act(Act::StopGradient),
        OpKind::Softmax => Family::Softmax { log: false },
        OpKind::LogSoftmax => Family::Softmax { log: true },
        OpKind::Mean => Family::Reduce { mean: true },
        OpKind::Sum => Family::Reduce { mean: false },
        OpKind::Concatenate => Family::Concat,
        OpKind::AvgPool => Family::Pool { avg: true },
        OpKind::MaxPool => Family::Pool { avg: false },
        OpKind::Flatten => Family::Flatten,
        OpKind::Reshape => Family::Reshape,
        OpKind::Resize => Family::Resize,
        OpKind::SwapAxes => Family::SwapAxes,
        OpKind::Transpose => Family::Transpose,
        OpKind::MakeCausalMask => Family::CausalMask,
        OpKind::MakeAttentionMask => Family::AttentionMask,
        OpKind::CombineMasks => Family::CombineMasks,
        OpKind::ShiftRight => Family::ShiftRight,
        OpKind::SinusoidalPositions => Family::Sinusoidal,
        OpKind::Pad => Family::Pad,
        OpKind::Slice => Family::SliceAxis,
        OpKind::DotProductAttention => Family::DotProductAttention,
    }
}

/// The signature of an op (its input, the first argument, not counted).
pub fn sig(kind: OpKind) -> &'static Sig {
    match family(kind) {
        Family::Activation(a) => activation::sig(a),
        Family::Softmax { .. } => &softmax::SIG,
        Family::Reduce { .. } => &reduce::SIG,
        Family::Concat => &concat::SIG,
        Family::Pool { .. } => &pool::SIG,
        Family::Flatten => &reshape::FLATTEN,
        Family::Reshape => &reshape::RESHAPE,
        Family::Resize => &resize::SIG,
        Family::SwapAxes => &axes::SWAPAXES,
        Family::Transpose => &axes::TRANSPOSE,
        Family::CausalMask => &mask::CAUSAL,
        Family::AttentionMask => &mask::ATTENTION,
        Family::CombineMasks => &mask::COMBINE,
        Family::ShiftRight => &axes::SHIFT_RIGHT,
        Family::Sinusoidal => &tables::SINUSOIDAL,
        Family::Pad => &pad::PAD,
        Family::SliceAxis => &pad::SLICE,
        Family::DotProductAttention => &attention::SIG,
    }
}

/// Checks an op on inputs of these per-example shapes and names (several
/// only for `concatenate`); its output shape.
pub fn check(
    kind: OpKind,
    b: &Bound,
    shapes: &[Vec<usize>],
    names: &[String],
    site: &Site,
    cx: &mut Ctxt,
) -> Option<(Op, Vec<usize>)> {
    match family(kind) {
        Family::Activation(a) => activation::check(a, kind.name(), b, cx)
            .map(|a| (Op::Activation(a), site.shape.to_vec())),
        Family::Softmax { log } => softmax::check(log, b, site, cx),
        Family::Reduce { mean } => reduce::check(mean, b, site, cx),
        Family::Concat => concat::check(b, shapes, names, site, cx),
        Family::Pool { avg } => pool::check(avg, b, site, cx).map(|(p, s)| (Op::Pool(p), s)),
        Family::Flatten => reshape::flatten(b, site, cx),
        Family::Reshape => reshape::check(b, site, cx),
        Family::Resize => resize::check(b, site, cx),
        Family::SwapAxes => axes::swapaxes(b, site, cx),
        Family::Transpose => axes::transpose(b, site, cx),
        Family::CausalMask => mask::causal(site, cx),
        Family::AttentionMask => mask::attention(site, cx),
        Family::CombineMasks => mask::combine(site, cx),
        Family::ShiftRight => axes::shift_right(site, cx),
        Family::Sinusoidal => tables::sinusoidal(b, site, cx),
        Family::Pad => pad::check(b, site, cx),
        Family::SliceAxis => pad::check_slice(b, site, cx),
        Family::DotProductAttention => attention::check(b, shapes, site, cx),
    }
}

/// What an op's tensor inputs hold; `None` where any will do (only the
/// shape is read).
pub fn input_elem(kind: OpKind) -> Option<Elem> {
    match family(kind) {
        // Token ids (lm1b's `shift_inputs`) or features.
        Family::CausalMask | Family::ShiftRight => None,
        Family::AttentionMask => Some(Elem::Index),
        Family::CombineMasks => Some(Elem::Bool),
        Family::Activation(_)
        | Family::Softmax { .. }
        | Family::Reduce { .. }
        | Family::Concat
        | Family::Pool { .. }
        | Family::Flatten
        | Family::Reshape
        | Family::Resize
        | Family::SwapAxes
        | Family::Transpose
        | Family::Pad
        | Family::SliceAxis
        | Family::DotProductAttention
        | Family::Sinusoidal => Some(Elem::Float),
    }
}

/// How many leading positional arguments of an op are its tensors.
pub fn tensor_args(kind: OpKind) -> usize {
    match family(kind) {
        Family::DotProductAttention => 3,
        Family::AttentionMask | Family::CombineMasks => 2,
        Family::Activation(_)
        | Family::Softmax { .. }
        | Family::Reduce { .. }
        | Family::Concat
        | Family::Pool { .. }
        | Family::Flatten
        | Family::Reshape
        | Family::Resize
        | Family::SwapAxes
        | Family::Transpose
        | Family::ShiftRight
        | Family::Sinusoidal
        | Family::Pad
        | Family::SliceAxis
        | Family::CausalMask => 1,
    }
}

/// `x[a..b]`: checked here with the ops, called by the checker on indexing.
pub fn slice(
    start: Option<i64>,
    end: Option<i64>,
    shape: &[usize],
    ids: bool,
    what: &str,
) -> Result<(Op, Vec<usize>), String> {
    axes::slice(start, end, shape, ids, what)
}

/// `x[i]`: checked here with the ops, called by the checker on indexing.
pub fn take(index: i64, shape: &[usize], what: &str) -> Result<(Op, Vec<usize>), String> {
    axes::take(index, shape, what)
}

/// Whether an op is an elementwise activation, which a model may take as a
/// value (`act: Param<relu>`).
pub fn is_activation(kind: OpKind) -> bool {
    matches!(family(kind), Family::Activation(_))
}

/// Whether an op takes a tuple of tensors as its first argument.
pub fn takes_tuple(kind: OpKind) -> bool {
    family(kind) == Family::Concat
}

/// What `expand` needs to know about a step.
pub struct Io<'a> {
    /// The inputs' values (expressions), in order.
    pub args: Vec<TokenStream>,
    /// The first input's tensor type.
    pub in_ty: &'a TokenStream,
    /// Every input's tensor type.
    pub in_tys: &'a [TokenStream],
    /// The output's tensor type.
    pub out_ty: &'a TokenStream,
    /// The output's per-example shape.
    pub out: &'a [usize],
}

impl Op {
    /// The step's value, and the where-clauses it needs.
    pub fn expand(&self, io: Io, mode: &Mode) -> (TokenStream, Vec<TokenStream>) {
        let dfdx = paths::dfdx();
        let x = io.args.first().cloned().unwrap_or_default();
        // A module without state; several inputs go in as a tuple.
        let zst = |ty: TokenStream| {
            let r = mode.by_ref();
            let (arg, in_ty) = match &io.args[..] {
                [_] => (x.clone(), io.in_ty.clone()),
                several => {
                    let tys = io.in_tys;
                    (quote!((#(#several,)*)), quote!((#(#tys,)*)))
                }
            };
            let (v, w) = mode.apply(
                &ty,
                quote!(#r <#ty as ::core::default::Default>::default()),
                arg,
                &in_ty,
                io.out_ty,
            );
            (v, vec![w])
        };
        match self {
            Op::Activation(a) => match a.module() {
                Some(ty) => zst(ty),
                None => (a.call(x), Vec::new()),
            },
            // Inference (`forward`, with a tape or without) keeps every
            // value, as Flax's `deterministic=True` does.
            Op::Dropout(_) if !mode.mutable => (x, Vec::new()),
            Op::Dropout(rate) => {
                let ty = quote!(#dfdx::nn::modules::Dropout);
                let p = *rate as f32;
                let r = mode.by_ref();
                let (v, w) = mode.apply(&ty, quote!(#r #ty { p: #p }), x, io.in_ty, io.out_ty);
                (v, vec![w])
            }
            Op::Softmax { log, axis } => (softmax::expand(*log, *axis, x), Vec::new()),
            Op::Reduce { mean, axes } => (reduce::expand(*mean, axes, x, io.out), Vec::new()),
            Op::Concat { axis } => (concat::expand(*axis, &io.args, io.out), Vec::new()),
            Op::Pool(p) => zst(p.ty()),
            Op::FlattenImage { chw, .. } => zst(reshape::flatten_image_ty(*chw)),
            Op::Reshape => (reshape::expand(x, io.out), Vec::new()),
            Op::Resize(r) => zst(r.ty()),
            Op::Permute(perm) => (axes::permute(perm, x, io.out), Vec::new()),
            Op::Take(i) => (axes::take_expand(*i, x), Vec::new()),
            Op::Mask(m) => zst(m.ty()),
            Op::Broadcast(from) => (broadcast::expand(from, io.out, x), Vec::new()),
            Op::Slice(a, _, true) => axes::token_rows(x, io, *a, false),
            Op::ShiftRight(true) => axes::token_rows(x, io, 0, true),
            Op::Slice(a, b, false) => (axes::slice_expand(*a, *b, x, io.out), Vec::new()),
            Op::ShiftRight(false) => (axes::shift_right_expand(x, io.out), Vec::new()),
            Op::Sinusoidal {
                min_scale,
                max_scale,
            } => (tables::expand(*min_scale, *max_scale, x), Vec::new()),
            Op::Select { on_true, on_false } => {
                (select::expand(*on_true, *on_false, &io.args), Vec::new())
            }
            Op::Arange { start } => (select::arange(*start, io.out), Vec::new()),
            Op::Draw(d) => (d.expand(io.out), Vec::new()),
            Op::Table(field) => (lent::table(field, io.out), Vec::new()),
            Op::TableLookup => (lent::lookup(&io.args), Vec::new()),
            Op::TableAttend => (lent::attend(&io.args), Vec::new()),
            Op::Pad { widths, value } => {
                let shape_in: Vec<usize> = io
                    .out
                    .iter()
                    .zip(widths)
                    .map(|(d, (lo, hi))| d - lo - hi)
                    .collect();
                (pad::expand(widths, *value, x, &shape_in), Vec::new())
            }
            Op::DotProductAttention { masked } => {
                let rt = paths::compact();
                (
                    attention::expand(*masked, &io.args),
                    vec![quote!(E: #rt::ParamDtype)],
                )
            }
            Op::Attend(field) => {
                let l = paths::layers();
                (quote!(#l::embed_attend(&self.#field, #x)?), Vec::new())
            }
            Op::SliceAxis { axis, start, stop } => (
                pad::expand_slice(*axis, *start, *stop, x, io.out),
                Vec::new(),
            ),
        }
    }

    /// What the op's output holds.
    pub fn output_elem(&self) -> Elem {
        match self {
            Op::Activation(_)
            | Op::Dropout(_)
            | Op::Softmax { .. }
            | Op::Reduce { .. }
            | Op::Concat { .. }
            | Op::Pool(_)
            | Op::FlattenImage { .. }
            | Op::Reshape
            | Op::Permute(_)
            | Op::Take(_)
            | Op::Broadcast(_)
            | Op::Sinusoidal { .. }
            | Op::Select { .. }
            | Op::Arange { .. }
            | Op::Draw(random::Draw::Normal | random::Draw::Uniform(..))
            | Op::Table(_)
            | Op::TableLookup
            | Op::TableAttend
            | Op::Pad { .. }
            | Op::SliceAxis { .. }
            | Op::DotProductAttention { .. }
            | Op::Attend(_)
            | Op::Resize(_) => Elem::Float,
            // Token ids stay token ids; the checker records the elem.
            Op::Slice(_, _, ids) | Op::ShiftRight(ids) => match ids {
                true => Elem::Index,
                false => Elem::Float,
            },
            Op::Mask(_) | Op::Draw(random::Draw::Bernoulli(_)) => Elem::Bool,
        }
    }

    /// The op's word, which names its profiler spans (`relu`, `avg_pool`).
    pub fn word(&self) -> String {
        match self {
            Op::Activation(a) => a.word(),
            Op::Dropout(_) => "dropout".into(),
            Op::Softmax { log: true, .. } => "log_softmax".into(),
            Op::Softmax { log: false, .. } => "softmax".into(),
            Op::Reduce { mean: true, .. } => "mean".into(),
            Op::Reduce { mean: false, .. } => "sum".into(),
            Op::Concat { .. } => "concatenate".into(),
            Op::Pool(p) => p.word().into(),
            Op::FlattenImage { .. } => "flatten".into(),
            Op::Reshape => "reshape".into(),
            Op::Resize(_) => "resize".into(),
            Op::Permute(_) => "transpose".into(),
            Op::Take(_) => "index".into(),
            Op::Mask(m) => m.doc().trim_matches('`').into(),
            Op::Broadcast(_) => "broadcast".into(),
            Op::Slice(..) => "slice".into(),
            Op::ShiftRight(_) => "shift_right".into(),
            Op::Sinusoidal { .. } => "sinusoidal_positions".into(),
            Op::Select { .. } => "select".into(),
            Op::Arange { .. } => "arange".into(),
            Op::Pad { .. } => "pad".into(),
            Op::SliceAxis { .. } => "slice".into(),
            Op::DotProductAttention { .. } => "dot_product_attention".into(),
            Op::Attend(_) => "attend".into(),
            Op::Draw(d) => d.word().into(),
            Op::Table(_) => "table".into(),
            Op::TableLookup => "embed".into(),
            Op::TableAttend => "attend".into(),
        }
    }

    /// A short description for the generated rustdoc.
    pub fn doc(&self) -> Option<String> {
        Some(match self {
            Op::Activation(a) => a.doc(),
            Op::Dropout(r) => format!("`Dropout({r})`"),
            Op::Softmax { log, .. } => (if *log { "`log_softmax`" } else { "`softmax`" }).into(),
            Op::Reduce { mean, axes } => format!(
                "`{}` over {} axis(es)",
                if *mean { "mean" } else { "sum" },
                axes.len()
            ),
            Op::Concat { .. } => "`concatenate`".into(),
            Op::Pool(p) => p.doc(),
            Op::FlattenImage { .. } => "`flatten`".into(),
            Op::Reshape => "`reshape`".into(),
            Op::Resize(r) => r.doc(),
            Op::Permute(_) => "`transpose`".into(),
            Op::Take(i) => format!("`[{i}]`"),
            Op::Mask(m) => m.doc().into(),
            Op::Broadcast(from) => format!("broadcast from `{}`", crate::shape::show(from)),
            Op::Slice(a, b, _) => format!("`[{a}..{b}]`"),
            Op::ShiftRight(_) => "`shift_right`".into(),
            Op::Sinusoidal { .. } => "`sinusoidal_positions`".into(),
            Op::Select { .. } => "`select`".into(),
            Op::Arange { start } => format!("`arange` from {start}"),
            Op::Pad { .. } => "`pad`".into(),
            Op::SliceAxis { start, stop, .. } => format!("`slice({start}, {stop})`"),
            Op::DotProductAttention { .. } => "`dot_product_attention`".into(),
            Op::Attend(f) => format!("`{f}.attend`"),
            Op::Draw(d) => format!("`random.{}`", d.word()),
            Op::Table(f) => format!("`{f}`'s table"),
            Op::TableLookup => "an `Embed` passed in".into(),
            Op::TableAttend => "`.attend` of an `Embed` passed in".into(),
        })
    }
}

/// An axis written `-1` on an image where Flax (NHWC) means the channels:
/// under NCHW it would silently mean the width. The reason, for messages;
/// `None` when fine.
pub fn nhwc_axis(rank: usize, axis: usize) -> Option<&'static str> {
    (rank == 3 && axis == 2).then_some(
        "on a [channels, height, width] value, axis -1 is the width; Flax's channel axis `-1` (NHWC) is axis -3 in flaxen's NCHW layout",
    )
}
