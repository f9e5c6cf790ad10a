//! Flax's initialisers in the model language: `kernel_init =
//! xavier_uniform()`, `bias_init = constant(0.1)`, `param("cls", zeros,
//! (1, 1, c))`. An initialiser is a value known at expansion ([`Init`]);
//! a layer reads it with [`read`] for one of its tensors, and the
//! expansion fills that tensor with it once the module is built
//! ([`Fill`]), through the runtime's `init::Init` with the fans Flax
//! computes for that tensor.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::paths;
use crate::symbol::InitKind;
use crate::value::ArgVal;
use proc_macro2::TokenStream;
use quote::quote;

/// Which fan `variance_scaling` divides by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    In,
    Out,
    Avg,
    GeoAvg,
}

/// What `variance_scaling` draws from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    Truncated,
    Normal,
    Uniform,
}

/// A checked initialiser.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    Constant(f64),
    Normal(f64),
    Uniform(f64),
    Truncated { stddev: f64, lower: f64, upper: f64 },
    Scaling(f64, Mode, Dist),
    Orthogonal(f64),
}

/// The arguments of each initialiser, in Flax's order.
pub fn sig(kind: InitKind) -> &'static Sig {
    const NONE: Sig = Sig {
        params: &[],
        required: &[],
        example: "NAME()",
    };
    const CONSTANT: Sig = Sig {
        params: &["value"],
        required: &["value"],
        example: "constant(0.1)",
    };
    const NORMAL: Sig = Sig {
        params: &["stddev"],
        required: &[],
        example: "normal(stddev = 0.02)",
    };
    const UNIFORM: Sig = Sig {
        params: &["scale"],
        required: &[],
        example: "uniform(scale = 0.01)",
    };
    const TRUNCATED: Sig = Sig {
        params: &["stddev", "lower", "upper"],
        required: &[],
        example: "truncated_normal(stddev = 0.02)",
    };
    const SCALING: Sig = Sig {
        params: &["scale", "mode", "distribution"],
        required: &["scale", "mode", "distribution"],
        example: "variance_scaling(1.0, \"fan_in\", \"truncated_normal\")",
    };
    const ORTHOGONAL: Sig = Sig {
        params: &["scale"],
        required: &[],
        example: "orthogonal(scale = 1.0)",
    };
    match kind {
        InitKind::Constant => &CONSTANT,
        InitKind::Normal => &NORMAL,
        InitKind::Uniform => &UNIFORM,
        InitKind::TruncatedNormal => &TRUNCATED,
        InitKind::VarianceScaling => &SCALING,
        InitKind::Orthogonal => &ORTHOGONAL,
        InitKind::Zeros
        | InitKind::Ones
        | InitKind::ZerosInit
        | InitKind::OnesInit
        | InitKind::LecunNormal
        | InitKind::LecunUniform
        | InitKind::XavierNormal
        | InitKind::XavierUniform
        | InitKind::GlorotNormal
        | InitKind::GlorotUniform
        | InitKind::HeNormal
        | InitKind::HeUniform
        | InitKind::KaimingNormal
        | InitKind::KaimingUniform => &NONE,
    }
}

/// `zeros` and `ones` are initialisers themselves, as in Flax; every other
/// word makes one when called.
pub fn bare(kind: InitKind) -> Result<Init, String> {
    match kind {
        InitKind::Zeros => Ok(Init::Constant(0.0)),
        InitKind::Ones => Ok(Init::Constant(1.0)),
        other => {
            let args = if sig(other).params.is_empty() {
                "()"
            } else {
                "(..)"
            };
            Err(format!(
                "`{0}` makes an initialiser when called, as in Flax: write `{0}{args}`",
                other.name()
            ))
        }
    }
}

/// An initialiser call, `xavier_uniform()` or `normal(stddev = 0.02)`,
/// from its bound arguments; `None` when an argument was invalid (the
/// errors are in `cx`).
pub fn call(kind: InitKind, b: &Bound, call: &TokenStream, cx: &mut Ctxt) -> Option<Init> {
    let pos = |v: f64, what: &str, a: Option<&ArgVal>, cx: &mut Ctxt| {
        if v > 0.0 {
            Some(v)
        } else {
            if let Some(a) = a {
                cx.error_at(a, format!("{what} must be greater than 0, but is {v}"));
            }
            None
        }
    };
    let scaling = |scale: f64, mode, dist| Some(Init::Scaling(scale, mode, dist));
    match kind {
        InitKind::Zeros | InitKind::Ones => {
            let which = kind.name();
            cx.error_at(call, format!("`{which}` is an initialiser itself, as in Flax: write `{which}` (or `{which}_init()`)"));
            None
        }
        InitKind::ZerosInit => Some(Init::Constant(0.0)),
        InitKind::OnesInit => Some(Init::Constant(1.0)),
        InitKind::Constant => b
            .req(cx, "value", |a| a.float("`value`"))
            .map(Init::Constant),
        InitKind::Normal => {
            let s = b.or(cx, "stddev", 1e-2, |a| a.float("`stddev`"))?;
            pos(s, "`stddev`", b.get("stddev"), cx).map(Init::Normal)
        }
        InitKind::Uniform => {
            let s = b.or(cx, "scale", 1e-2, |a| a.float("`scale`"))?;
            pos(s, "`scale`", b.get("scale"), cx).map(Init::Uniform)
        }
        InitKind::TruncatedNormal => {
            let stddev = b.or(cx, "stddev", 1e-2, |a| a.float("`stddev`"));
            let lower = b.or(cx, "lower", -2.0, |a| a.float("`lower`"));
            let upper = b.or(cx, "upper", 2.0, |a| a.float("`upper`"));
            let (stddev, lower, upper) = (stddev?, lower?, upper?);
            let stddev = pos(stddev, "`stddev`", b.get("stddev"), cx)?;
            if lower >= upper {
                let at = b.get("upper").or(b.get("lower")).map(|a| a.tokens.clone());
                cx.error_at(at.unwrap_or_else(|| call.clone()), format!("`truncated_normal` draws from `[lower, upper]` (in standard deviations), so `lower` must be below `upper`, but they are {lower} and {upper}"));
                return None;
            }
            Some(Init::Truncated {
                stddev,
                lower,
                upper,
            })
        }
        InitKind::VarianceScaling => {
            let scale = b.req(cx, "scale", |a| a.float("`scale`"));
            let mode = b.req(cx, "mode", |a| word(a, "mode", MODES));
            let dist = b.req(cx, "distribution", |a| word(a, "distribution", DISTS));
            let scale = pos(scale?, "`scale`", b.get("scale"), cx)?;
            let mode = match mode? {
                "fan_in" => Mode::In,
                "fan_out" => Mode::Out,
                "fan_avg" => Mode::Avg,
                _ => Mode::GeoAvg,
            };
            let dist = match dist? {
                "truncated_normal" => Dist::Truncated,
                "uniform" => Dist::Uniform,
                _ => Dist::Normal,
            };
            scaling(scale, mode, dist)
        }
        InitKind::LecunNormal => scaling(1.0, Mode::In, Dist::Truncated),
        InitKind::LecunUniform => scaling(1.0, Mode::In, Dist::Uniform),
        InitKind::XavierNormal | InitKind::GlorotNormal => scaling(1.0, Mode::Avg, Dist::Truncated),
        InitKind::XavierUniform | InitKind::GlorotUniform => scaling(1.0, Mode::Avg, Dist::Uniform),
        InitKind::HeNormal | InitKind::KaimingNormal => scaling(2.0, Mode::In, Dist::Truncated),
        InitKind::HeUniform | InitKind::KaimingUniform => scaling(2.0, Mode::In, Dist::Uniform),
        InitKind::Orthogonal => {
            let s = b.or(cx, "scale", 1.0, |a| a.float("`scale`"))?;
            Some(Init::Orthogonal(s))
        }
    }
}

const MODES: &[&str] = &["fan_in", "fan_out", "fan_avg", "fan_geo_avg"];
const DISTS: &[&str] = &["truncated_normal", "normal", "uniform"];

/// One of `choices`, written as a string (`"fan_in"`).
fn word(a: &ArgVal, what: &str, choices: &'static [&'static str]) -> syn::Result<&'static str> {
    let text = match &a.val {
        crate::value::Val::Str(s) | crate::value::Val::Word(s) => Some(s.as_str()),
        _ => None,
    };
    match text.and_then(|t| choices.iter().find(|c| **c == t)) {
        Some(c) => Ok(c),
        None => Err(syn::Error::new_spanned(
            &a.tokens,
            format!(
                "`{what}` is one of {}",
                choices
                    .iter()
                    .map(|c| format!("\"{c}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// The tensor an initialiser fills: a kernel with Flax's fans (and its
/// output axis first, as dfdx stores kernels, or last, as Flax does), or a
/// vector (a bias or a scale), which has no fans.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    Kernel {
        fan_in: usize,
        fan_out: usize,
        out_first: bool,
    },
    Vector,
}

/// A tensor of a layer's module and what fills it.
#[derive(Clone, Debug)]
pub struct Fill {
    /// The path from the field to the tensor (`weight`, `cell.ii.weight`).
    pub path: TokenStream,
    pub init: Init,
    pub target: Target,
}

/// Reads the initialiser given for `key` (`kernel_init`) of a tensor that
/// is a `target`, into `fills` at `path`; an initialiser that needs fans
/// on a vector is refused, as Flax refuses it.
pub fn read(
    b: &Bound,
    cx: &mut Ctxt,
    key: &str,
    target: Target,
    path: TokenStream,
    fills: &mut Vec<Fill>,
) {
    let vector = matches!(target, Target::Vector);
    if let Some(init) = get(b, cx, key, vector) {
        fills.push(Fill { path, init, target });
    }
}

/// The initialiser given for `key`, for tensors that are vectors or
/// kernels; `None` when not given or invalid (the error is in `cx`).
pub fn get(b: &Bound, cx: &mut Ctxt, key: &str, vector: bool) -> Option<Init> {
    let a = b.get(key)?;
    let init = match &a.val {
        crate::value::Val::Init(i) => i.clone(),
        crate::value::Val::Poison => return None,
        other => {
            cx.error_at(a, format!("`{key}` is one of Flax's initialisers, such as `zeros`, `normal(stddev = 0.02)` or `xavier_uniform()`, but is {}", other.describe()));
            return None;
        }
    };
    if vector && matches!(init, Init::Scaling(..) | Init::Orthogonal(_)) {
        cx.error_at(a, format!("`{key}` fills a vector, which has no fan-in or fan-out for this initialiser (Flax refuses it too)\nhelp: a bias or a scale takes `zeros`, `ones`, `constant(v)`, `normal(..)`, `uniform(..)` or `truncated_normal(..)`"));
        return None;
    }
    Some(init)
}

impl Init {
    /// The runtime's `Init` for it.
    fn expr(&self) -> TokenStream {
        let i = paths::init();
        match self {
            Init::Constant(v) => quote!(#i::Init::Constant(#v)),
            Init::Normal(s) => quote!(#i::Init::Normal { stddev: #s }),
            Init::Uniform(s) => quote!(#i::Init::Uniform { scale: #s }),
            Init::Truncated {
                stddev,
                lower,
                upper,
            } => {
                quote!(#i::Init::TruncatedNormal { stddev: #stddev, lower: #lower, upper: #upper })
            }
            Init::Scaling(scale, mode, dist) => {
                let mode = match mode {
                    Mode::In => quote!(In),
                    Mode::Out => quote!(Out),
                    Mode::Avg => quote!(Avg),
                    Mode::GeoAvg => quote!(GeoAvg),
                };
                let dist = match dist {
                    Dist::Truncated => quote!(TruncatedNormal),
                    Dist::Normal => quote!(Normal),
                    Dist::Uniform => quote!(Uniform),
                };
                quote!(#i::Init::VarianceScaling { scale: #scale, mode: #i::FanMode::#mode, distribution: #i::FanDistribution::#dist })
            }
            Init::Orthogonal(s) => quote!(#i::Init::Orthogonal { scale: #s }),
        }
    }

    /// A call that fills `tensor` (a place of type `Tensor<..>`), with `?`.
    pub fn fill(&self, tensor: TokenStream, target: Target) -> TokenStream {
        let (i, init) = (paths::init(), self.expr());
        let fans = match target {
            Target::Kernel {
                fan_in,
                fan_out,
                out_first: true,
            } => quote!(#i::Fans::out_first(#fan_in, #fan_out)),
            Target::Kernel {
                fan_in, fan_out, ..
            } => quote!(#i::Fans::new(#fan_in, #fan_out)),
            // Unread: only the fan-free initialisers reach a vector.
            Target::Vector => quote!(#i::Fans::new(1, 1)),
        };
        quote!(#init.try_fill(#tensor, #fans)?;)
    }
}

impl Fill {
    /// The statement on the field `__f` (a `&mut` of the layer's module).
    pub fn stmt(&self) -> TokenStream {
        let path = &self.path;
        self.init.fill(quote!(&mut __f.#path), self.target)
    }
}

/// Reads `kernel_init` and `bias_init` of a layer whose module stores a
/// `weight` output axis first (dfdx's layout) and maybe a `bias`, with
/// Flax's `fans` of its kernel.
pub fn weight_and_bias(
    b: &Bound,
    cx: &mut Ctxt,
    (fan_in, fan_out): (usize, usize),
    use_bias: bool,
) -> Vec<Fill> {
    let mut fills = Vec::new();
    let kernel = Target::Kernel {
        fan_in,
        fan_out,
        out_first: true,
    };
    read(b, cx, "kernel_init", kernel, quote!(weight), &mut fills);
    read_bias(b, cx, use_bias, &mut fills);
    fills
}

/// Reads `bias_init` for a layer's `bias` vector. Given for a layer
/// without bias (`use_bias = false`), it is checked and then unused, as
/// in Flax (lm1b passes its `bias_init` to attention without biases).
pub fn read_bias(b: &Bound, cx: &mut Ctxt, use_bias: bool, fills: &mut Vec<Fill>) {
    let mut unused = Vec::new();
    let into = if use_bias { fills } else { &mut unused };
    read(b, cx, "bias_init", Target::Vector, quote!(bias), into);
}

/// Reads `scale_init` and (where the norm has a bias) `bias_init` of a
/// norm's vectors, stored at `scale` and `bias`.
pub fn norm(b: &Bound, cx: &mut Ctxt, scale: TokenStream, bias: Option<TokenStream>) -> Vec<Fill> {
    let mut fills = Vec::new();
    read(b, cx, "scale_init", Target::Vector, scale, &mut fills);
    if let Some(bias) = bias {
        read(b, cx, "bias_init", Target::Vector, bias, &mut fills);
    }
    fills
}
