//! The layers of the model language, one file each: its signature (names,
//! positions, defaults), its validation and shape rule (`check`), and the
//! code that names its runtime module (`ty`, `init`).
//!
//! The checker calls `check` and records the returned [`Layer`]; the
//! expansion calls its codegen methods. A layer with parameters becomes a
//! field of the generated module; `Dropout` has none and becomes an
//! [`Op`](crate::ops::Op).

mod batch_norm;
mod conv;
mod conv_transpose;
mod dense;
mod dropout;
mod embed;
mod group_norm;
mod layer_norm;
mod multi_head_attention;
mod nested;
pub mod param;
mod rms_norm;
mod rnn;
mod self_attention;

use crate::args::{Bound, Sig};
use crate::ast::Elem;
use crate::ctxt::Ctxt;
use crate::ops::Op;
use crate::paths;
use crate::symbol::LayerKind;
use proc_macro2::TokenStream;
use quote::quote;

pub use crate::rules::Site;
pub use nested::Nested;

/// A checked layer with parameters: a field of the generated module.
pub enum Layer {
    /// `Dense`
    Dense(dense::Dense),
    /// `Conv`
    Conv(conv::Conv),
    /// `StdConv`: a `Conv` whose kernel is standardised before use.
    StdConv(conv::Conv),
    /// `ConvTranspose`
    ConvTranspose(conv_transpose::ConvTranspose),
    /// `BatchNorm`
    BatchNorm(batch_norm::BatchNorm),
    /// `LayerNorm`
    LayerNorm(layer_norm::LayerNorm),
    /// `RMSNorm`
    RmsNorm(rms_norm::RmsNorm),
    /// `GroupNorm`
    GroupNorm(group_norm::GroupNorm),
    /// `SelfAttention`
    SelfAttention(multi_head_attention::Attention),
    /// `MultiHeadDotProductAttention`
    MultiHeadAttention(multi_head_attention::Attention),
    /// `Embed`
    Embed(embed::Embed),
    /// `RNN`
    Rnn(rnn::Rnn),
    /// Another `#[compact]` model, instantiated for this call.
    Nested(Nested),
    /// `param("cls", zeros, (1, 1, c))`: a declared tensor.
    Param(param::Param),
    /// `remat(..)` of a layer or nested model: the runtime's `Remat`.
    Remat(Box<Layer>),
}

/// What checking a layer call gives.
pub enum Checked {
    /// A layer with parameters and its output shape.
    Field(Layer, Vec<usize>),
    /// A layer without parameters (`Dropout`).
    Op(Op),
}

/// The tensors a layer is applied to.
pub struct InputSpec {
    /// The fewest positional inputs.
    pub min: usize,
    /// The most positional inputs.
    pub max: usize,
    /// Whether it takes `mask = ..`.
    pub mask: bool,
    /// Whether it takes `seq_lengths = ..` (`RNN`).
    pub lengths: bool,
    /// What each positional input holds (float where not listed).
    pub elems: Vec<Elem>,
}

/// What a built-in layer is applied to.
pub fn inputs(kind: LayerKind) -> InputSpec {
    let one = |elem| InputSpec {
        min: 1,
        max: 1,
        mask: false,
        lengths: false,
        elems: vec![elem],
    };
    match kind {
        LayerKind::SelfAttention => InputSpec {
            min: 1,
            max: 1,
            mask: true,
            lengths: false,
            elems: vec![Elem::Float],
        },
        LayerKind::MultiHeadDotProductAttention => InputSpec {
            min: 1,
            max: 2,
            mask: true,
            lengths: false,
            elems: vec![Elem::Float, Elem::Float],
        },
        LayerKind::Embed => one(Elem::Index),
        LayerKind::Rnn => InputSpec {
            lengths: true,
            ..one(Elem::Float)
        },
        LayerKind::Dense
        | LayerKind::Conv
        | LayerKind::StdConv
        | LayerKind::ConvTranspose
        | LayerKind::Dropout
        | LayerKind::BatchNorm
        | LayerKind::LayerNorm
        | LayerKind::RmsNorm
        | LayerKind::GroupNorm => one(Elem::Float),
    }
}

/// The steps a layer's module reads, in its input's order: attention with
/// a mask but one input reads it twice, `(x, x, mask)`.
pub fn arrange(kind: LayerKind, pos: &[usize], mask: Option<usize>) -> Vec<usize> {
    match (kind, pos, mask) {
        (LayerKind::SelfAttention | LayerKind::MultiHeadDotProductAttention, [x], Some(m)) => {
            vec![*x, *x, m]
        }
        _ => pos.iter().copied().chain(mask).collect(),
    }
}

/// The stem of a layer's automatic field name: Flax's class name,
/// snake-cased (`dense`), or for `RNN` its cell's (`lstm_cell`).
pub fn base_name(kind: LayerKind, b: &Bound) -> String {
    match kind {
        LayerKind::Rnn => rnn::base_name(b).unwrap_or_else(|| crate::symbol::snake(kind.name())),
        _ => crate::symbol::snake(kind.name()),
    }
}

/// The Flax module that holds a layer's parameters: its class name, the
/// cell's for `RNN` (Flax builds the cell in the caller's scope, so it is
/// the caller's `LSTMCell_0` whatever the `RNN` is named), and whether an
/// explicit `name = ".."` names it in Flax too.
pub fn flax_class(kind: LayerKind, b: &Bound) -> (&'static str, bool) {
    match kind {
        LayerKind::Rnn => (rnn::class(b).unwrap_or(kind.name()), false),
        _ => (kind.name(), true),
    }
}

/// The signature of a recurrent cell.
pub fn cell_sig() -> &'static Sig {
    &rnn::CELL
}

/// The signature of a built-in layer.
pub fn sig(kind: LayerKind) -> &'static Sig {
    match kind {
        LayerKind::Dense => &dense::SIG,
        LayerKind::Conv | LayerKind::StdConv => &conv::SIG,
        LayerKind::ConvTranspose => &conv_transpose::SIG,
        LayerKind::Dropout => &dropout::SIG,
        LayerKind::BatchNorm => &batch_norm::SIG,
        LayerKind::LayerNorm => &layer_norm::SIG,
        LayerKind::RmsNorm => &rms_norm::SIG,
        LayerKind::GroupNorm => &group_norm::SIG,
        LayerKind::SelfAttention => &self_attention::SIG,
        LayerKind::MultiHeadDotProductAttention => &multi_head_attention::SIG,
        LayerKind::Embed => &embed::SIG,
        LayerKind::Rnn => &rnn::SIG,
    }
}

/// Checks a built-in layer's arguments and input; `None` when it failed
/// (the errors are in `cx`).
pub fn check(kind: LayerKind, b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<Checked> {
    let field = |(l, s)| Checked::Field(l, s);
    match kind {
        LayerKind::Dense => dense::check(b, site, cx).map(|(l, s)| field((Layer::Dense(l), s))),
        LayerKind::Conv => conv::check(b, site, cx).map(|(l, s)| field((Layer::Conv(l), s))),
        LayerKind::StdConv => conv::check(b, site, cx).map(|(l, s)| field((Layer::StdConv(l), s))),
        LayerKind::ConvTranspose => {
            conv_transpose::check(b, site, cx).map(|(l, s)| field((Layer::ConvTranspose(l), s)))
        }
        LayerKind::Dropout => dropout::check(b, site, cx).map(Checked::Op),
        LayerKind::BatchNorm => {
            batch_norm::check(b, site, cx).map(|(l, s)| field((Layer::BatchNorm(l), s)))
        }
        LayerKind::LayerNorm => {
            layer_norm::check(b, site, cx).map(|(l, s)| field((Layer::LayerNorm(l), s)))
        }
        LayerKind::RmsNorm => {
            rms_norm::check(b, site, cx).map(|(l, s)| field((Layer::RmsNorm(l), s)))
        }
        LayerKind::GroupNorm => {
            group_norm::check(b, site, cx).map(|(l, s)| field((Layer::GroupNorm(l), s)))
        }
        LayerKind::SelfAttention => {
            self_attention::check(b, site, cx).map(|(l, s)| field((Layer::SelfAttention(l), s)))
        }
        LayerKind::MultiHeadDotProductAttention => {
            multi_head_attention::check(kind.name(), b, site, cx)
                .map(|(l, s)| field((Layer::MultiHeadAttention(l), s)))
        }
        LayerKind::Embed => embed::check(b, site, cx).map(|(l, s)| field((Layer::Embed(l), s))),
        LayerKind::Rnn => rnn::check(b, site, cx).map(|(l, s)| field((Layer::Rnn(l), s))),
    }
}

impl Layer {
    /// The field's type, written with the generic parameters `E` and `D`.
    pub fn ty(&self) -> TokenStream {
        match self {
            Layer::Dense(l) => l.ty(),
            Layer::Conv(l) => l.ty(),
            Layer::StdConv(l) => {
                let (rt, inner) = (paths::layers(), l.ty());
                quote!(#rt::StdConv<#inner>)
            }
            Layer::ConvTranspose(l) => l.ty(),
            Layer::BatchNorm(l) => l.ty(),
            Layer::LayerNorm(l) => l.ty(),
            Layer::RmsNorm(l) => l.ty(),
            Layer::GroupNorm(l) => l.ty(),
            Layer::SelfAttention(l) | Layer::MultiHeadAttention(l) => l.ty(),
            Layer::Embed(l) => l.ty(),
            Layer::Rnn(l) => l.ty(),
            Layer::Nested(l) => l.ty(),
            Layer::Param(l) => l.ty(),
            Layer::Remat(l) => {
                let (rt, inner) = (paths::layers(), l.ty());
                quote!(#rt::Remat<#inner>)
            }
        }
    }

    /// Statements run on the freshly built field `__f`: Flax's settings
    /// where dfdx's defaults differ.
    pub fn init(&self) -> Vec<TokenStream> {
        match self {
            Layer::BatchNorm(l) => l.init(),
            Layer::LayerNorm(l) => l.init(),
            Layer::RmsNorm(l) => l.init(),
            Layer::GroupNorm(l) => l.init(),
            Layer::SelfAttention(l) | Layer::MultiHeadAttention(l) => l.init(),
            // The same settings, on the wrapped layer.
            Layer::Remat(l) => on_inner(l.init()),
            Layer::Dense(_)
            | Layer::Conv(_)
            | Layer::StdConv(_)
            | Layer::ConvTranspose(_)
            | Layer::Embed(_)
            | Layer::Rnn(_)
            | Layer::Nested(_)
            | Layer::Param(_) => Vec::new(),
        }
    }

    /// Statements that fill the built field `__f` (a `&mut`) with the
    /// initialisers the call gave (`kernel_init = ..`), each ending in `?`;
    /// a nested model's own, through its `Initialize`.
    pub fn initialize(&self) -> Vec<TokenStream> {
        let fills = match self {
            Layer::Dense(l) => &l.fills,
            Layer::Conv(l) => &l.fills,
            Layer::StdConv(l) => {
                return on_inner(l.fills.iter().map(crate::init::Fill::stmt).collect())
            }
            Layer::ConvTranspose(l) => &l.fills,
            Layer::BatchNorm(l) => &l.fills,
            Layer::LayerNorm(l) => &l.fills,
            Layer::RmsNorm(l) => &l.fills,
            Layer::GroupNorm(l) => &l.fills,
            Layer::SelfAttention(l) | Layer::MultiHeadAttention(l) => &l.fills,
            Layer::Embed(l) => &l.fills,
            Layer::Rnn(l) => &l.fills,
            // Drawn by its `TensorCollection` visit, on build and reset.
            Layer::Param(_) => return Vec::new(),
            Layer::Nested(_) => {
                let rt = paths::compact();
                return vec![quote!(#rt::Initialize::<E, D>::try_initialize(__f)?;)];
            }
            Layer::Remat(l) => return on_inner(l.initialize()),
        };
        fills.iter().map(crate::init::Fill::stmt).collect()
    }

    /// The statement that adds the layer's leaves to the Flax tree `__out`
    /// (a `FlaxLeaves`) under flaxen field `key` and Flax module `flax`;
    /// `flattened` is the `[c, h, w]` map a `Dense` reads through a
    /// `flatten`.
    pub fn flax(&self, key: &str, flax: &str, flattened: Option<[usize; 3]>) -> TokenStream {
        let fl = paths::flax();
        let kind = match self {
            Layer::Dense(l) => l.flax_kind(flattened),
            Layer::Conv(l) | Layer::StdConv(l) => l.flax_kind(),
            Layer::ConvTranspose(l) => l.flax_kind(),
            Layer::BatchNorm(_) => quote!(#fl::FlaxKind::BatchNorm),
            Layer::LayerNorm(_) => quote!(#fl::FlaxKind::LayerNorm),
            Layer::RmsNorm(_) => quote!(#fl::FlaxKind::RmsNorm),
            Layer::GroupNorm(_) => quote!(#fl::FlaxKind::GroupNorm),
            Layer::SelfAttention(l) | Layer::MultiHeadAttention(l) => l.flax_kind(),
            Layer::Embed(_) => quote!(#fl::FlaxKind::Embed),
            Layer::Rnn(l) => l.flax_kind(),
            Layer::Nested(l) => {
                let ty = l.ty();
                return quote!(__out.nested::<#ty>(#key, #flax););
            }
            Layer::Param(_) => return quote!(__out.param(#key, #flax);),
            // `remat` adds no level on either side.
            Layer::Remat(l) => return l.flax(key, flax, flattened),
        };
        quote!(__out.layer(#key, #flax, #kind);)
    }

    /// Trainable parameters.
    pub fn params(&self) -> usize {
        match self {
            Layer::Dense(l) => l.params(),
            Layer::Conv(l) | Layer::StdConv(l) => l.params(),
            Layer::ConvTranspose(l) => l.params(),
            Layer::BatchNorm(l) => l.params(),
            Layer::LayerNorm(l) => l.params(),
            Layer::RmsNorm(l) => l.params(),
            Layer::GroupNorm(l) => l.params(),
            Layer::SelfAttention(l) | Layer::MultiHeadAttention(l) => l.params(),
            Layer::Embed(l) => l.params(),
            Layer::Rnn(l) => l.params(),
            Layer::Nested(l) => l.params,
            Layer::Param(l) => l.params(),
            Layer::Remat(l) => l.params(),
        }
    }

    /// Whether the layer accepts `NoInputGrad(x)` and then skips `x`'s
    /// gradient (the convolutions).
    pub fn skips_input_grad(&self) -> bool {
        matches!(self, Layer::Conv(_))
    }

    /// A short description for the generated rustdoc.
    pub fn doc(&self) -> String {
        match self {
            Layer::Dense(l) => l.doc(),
            Layer::Conv(l) => l.doc(),
            Layer::StdConv(l) => format!("`StdConv` {}", l.doc()),
            Layer::ConvTranspose(l) => l.doc(),
            Layer::BatchNorm(_) => "`BatchNorm`".into(),
            Layer::LayerNorm(_) => "`LayerNorm`".into(),
            Layer::RmsNorm(_) => "`RMSNorm`".into(),
            Layer::GroupNorm(l) => l.doc(),
            Layer::SelfAttention(l) => l.doc("SelfAttention"),
            Layer::MultiHeadAttention(l) => l.doc("MultiHeadDotProductAttention"),
            Layer::Embed(l) => l.doc(),
            Layer::Rnn(l) => l.doc(),
            Layer::Nested(l) => format!("`{}`", l.path),
            Layer::Param(l) => l.doc(),
            Layer::Remat(l) => format!("`remat` of {}", l.doc()),
        }
    }

    /// Whether the profiler names the calls inside it under its name (a
    /// nested model, also under `remat`).
    pub fn is_block(&self) -> bool {
        match self {
            Layer::Nested(_) => true,
            Layer::Remat(l) => l.is_block(),
            _ => false,
        }
    }

    /// What in the layer draws random numbers when training (attention
    /// dropout), for `remat`'s refusal; nested models are searched by the
    /// checker, which holds their plans.
    pub fn stochastic(&self) -> Option<String> {
        match self {
            Layer::SelfAttention(l) | Layer::MultiHeadAttention(l) if l.dropout_rate() > 0.0 => {
                Some(format!(
                    "attention dropout (`dropout_rate = {}`)",
                    l.dropout_rate()
                ))
            }
            Layer::Remat(l) => l.stochastic(),
            _ => None,
        }
    }
}

/// Statements on a field `__f` run on its wrapped layer instead (`remat`'s
/// and `StdConv`'s `inner`).
fn on_inner(stmts: Vec<TokenStream>) -> Vec<TokenStream> {
    match stmts.is_empty() {
        true => stmts,
        false => vec![quote!({ let __f = &mut __f.inner; #(#stmts)* })],
    }
}

/// `epsilon`, which every norm takes: greater than 0.
fn epsilon(b: &Bound, cx: &mut Ctxt, default: f64) -> Option<f64> {
    let e = b.or(cx, "epsilon", default, |a| a.float("`epsilon`"))?;
    if e > 0.0 {
        Some(e)
    } else {
        if let Some(a) = b.get("epsilon") {
            cx.error_at(a, format!("`epsilon` is added to the variance before its square root and must be greater than 0, but is {e}"));
        }
        None
    }
}
