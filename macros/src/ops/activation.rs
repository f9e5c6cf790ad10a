//! Elementwise activations, Flax's `nn.relu`, `nn.gelu`, ..., and the
//! elementwise maths of `jnp` (`exp`, `log`, `sqrt`, `pow`, `clip`, ...)
//! and `jax.lax.stop_gradient`. Each is a dfdx tensor method, flaxen's
//! parallel `Relu` module, or a function of the runtime's `activations`
//! (the ops dfdx lacks or gets wrong).

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::paths;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

const PLAIN: Sig = Sig {
    params: &[],
    required: &[],
    example: "NAME(x)",
};
const GELU: Sig = Sig {
    params: &["approximate"],
    required: &[],
    example: "gelu(x, approximate = false)",
};
const LEAKY: Sig = Sig {
    params: &["negative_slope"],
    required: &[],
    example: "leaky_relu(x, negative_slope = 0.2)",
};
const POW: Sig = Sig {
    params: &["p"],
    required: &["p"],
    example: "pow(x, 2.0)",
};
const CLIP: Sig = Sig {
    params: &["min", "max"],
    required: &["min", "max"],
    example: "clip(x, -1.0, 1.0)",
};
const ELU: Sig = Sig {
    params: &["alpha"],
    required: &[],
    example: "elu(x, alpha = 1.0)",
};

/// The activations: the ops the checker maps here.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Relu,
    Gelu,
    Sigmoid,
    Tanh,
    Silu,
    Swish,
    LeakyRelu,
    Elu,
    Selu,
    Softplus,
    LogSigmoid,
    Relu6,
    HardTanh,
    HardSigmoid,
    /// Also Flax's `hard_swish`, the same function.
    HardSilu,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Abs,
    Square,
    Pow,
    Clip,
    StopGradient,
}

pub fn sig(act: Act) -> &'static Sig {
    match act {
        Act::Gelu => &GELU,
        Act::LeakyRelu => &LEAKY,
        Act::Elu => &ELU,
        Act::Pow => &POW,
        Act::Clip => &CLIP,
        Act::Exp
        | Act::Log
        | Act::Sqrt
        | Act::Rsqrt
        | Act::Sin
        | Act::Cos
        | Act::Abs
        | Act::Square
        | Act::StopGradient
        | Act::Relu
        | Act::Sigmoid
        | Act::Tanh
        | Act::Silu
        | Act::Swish
        | Act::Selu
        | Act::Softplus
        | Act::LogSigmoid
        | Act::Relu6
        | Act::HardTanh
        | Act::HardSigmoid
        | Act::HardSilu => &PLAIN,
    }
}

/// A checked activation.
pub enum Activation {
    /// flaxen's `Relu` module (a parallel CPU kernel; dfdx's op on Cuda).
    Relu,
    /// flaxen's `Gelu` module, the tanh form (a parallel CPU kernel;
    /// dfdx's `fast_gelu` on Cuda).
    Gelu,
    /// A dfdx tensor method without arguments (`try_sigmoid`).
    Method(&'static str, &'static str),
    /// A function of the runtime's activations, with these numbers.
    Function(&'static str, Vec<f64>, String),
}

/// `name` is the word as written (`hard_swish` or `hard_silu`).
pub fn check(act: Act, name: &str, b: &Bound, cx: &mut Ctxt) -> Option<Activation> {
    let f = |func: &'static str| Some(Activation::Function(func, Vec::new(), format!("`{name}`")));
    match act {
        Act::Relu => Some(Activation::Relu),
        Act::Sigmoid => Some(Activation::Method("try_sigmoid", "`sigmoid`")),
        Act::Tanh => Some(Activation::Method("try_tanh", "`tanh`")),
        // Flax's `nn.gelu` defaults to the tanh approximation (the runtime's
        // `Gelu` kernel, dfdx's `fast_gelu` elsewhere); `approximate =
        // false` is the erf form, the runtime's fix of dfdx's
        // `accurate_gelu` gradient.
        Act::Gelu => match b.or(cx, "approximate", true, |a| a.boolean("`approximate`"))? {
            true => Some(Activation::Gelu),
            false => Some(Activation::Function(
                "try_gelu_exact",
                Vec::new(),
                "`gelu(approximate = false)`".into(),
            )),
        },
        Act::Silu => f("try_silu"),
        Act::Swish => f("try_swish"),
        Act::Selu => f("try_selu"),
        Act::Softplus => f("try_softplus"),
        Act::LogSigmoid => f("try_log_sigmoid"),
        Act::Relu6 => f("try_relu6"),
        Act::HardTanh => f("try_hard_tanh"),
        Act::HardSigmoid => f("try_hard_sigmoid"),
        Act::HardSilu => f("try_hard_silu"),
        Act::Exp => Some(Activation::Method("try_exp", "`exp`")),
        Act::Log => Some(Activation::Method("try_ln", "`log`")),
        Act::Sqrt => Some(Activation::Method("try_sqrt", "`sqrt`")),
        Act::Sin => Some(Activation::Method("try_sin", "`sin`")),
        Act::Cos => Some(Activation::Method("try_cos", "`cos`")),
        Act::Abs => Some(Activation::Method("try_abs", "`abs`")),
        Act::Square => Some(Activation::Method("try_square", "`square`")),
        Act::Rsqrt => f("try_rsqrt"),
        Act::StopGradient => f("try_stop_gradient"),
        Act::Pow => {
            let p = b.req(cx, "p", |a| a.float("the exponent `p`"))?;
            Some(Activation::Function(
                "try_pow",
                vec![p],
                format!("`pow(p = {p})`"),
            ))
        }
        Act::Clip => {
            let lo = b.req(cx, "min", |a| a.float("`min`"));
            let hi = b.req(cx, "max", |a| a.float("`max`"));
            let (lo, hi) = (lo?, hi?);
            if lo > hi {
                if let Some(a) = b.get("min") {
                    cx.error_at(
                        a,
                        format!(
                            "`clip` keeps values in [min, max], but min {lo} is above max {hi}"
                        ),
                    );
                }
                return None;
            }
            Some(Activation::Function(
                "try_clip",
                vec![lo, hi],
                format!("`clip({lo}, {hi})`"),
            ))
        }
        // Flax's defaults: negative_slope 0.01, alpha 1.0.
        Act::LeakyRelu => {
            let v = b.or(cx, "negative_slope", 0.01, |a| a.float("`negative_slope`"))?;
            Some(Activation::Function(
                "try_leaky_relu",
                vec![v],
                format!("`leaky_relu(negative_slope = {v})`"),
            ))
        }
        Act::Elu => {
            let v = b.or(cx, "alpha", 1.0, |a| a.float("`alpha`"))?;
            Some(Activation::Function(
                "try_elu",
                vec![v],
                format!("`elu(alpha = {v})`"),
            ))
        }
    }
}

impl Activation {
    /// The module type, for activations that are modules.
    pub fn module(&self) -> Option<TokenStream> {
        let l = paths::layers();
        match self {
            Activation::Relu => Some(quote!(#l::Relu)),
            Activation::Gelu => Some(quote!(#l::Gelu)),
            Activation::Method(..) | Activation::Function(..) => None,
        }
    }

    /// The call on `x`, for activations that are not modules.
    pub fn call(&self, x: TokenStream) -> TokenStream {
        match self {
            Activation::Relu | Activation::Gelu => TokenStream::new(),
            Activation::Method(m, _) => {
                let m = format_ident!("{}", m);
                quote!(#x.#m()?)
            }
            Activation::Function(f, numbers, _) => {
                let (act, f) = (paths::activations(), format_ident!("{}", f));
                quote!(#act::#f(#x #(, #numbers)*)?)
            }
        }
    }

    /// The word as written (`gelu`, `hard_swish`), from the description.
    pub fn word(&self) -> String {
        let doc = self.doc();
        let word = doc.trim_start_matches('`');
        word.split(['(', '`']).next().unwrap_or(word).to_string()
    }

    pub fn doc(&self) -> String {
        match self {
            Activation::Relu => "`relu`".into(),
            Activation::Gelu => "`gelu`".into(),
            Activation::Method(_, d) => (*d).into(),
            Activation::Function(_, _, d) => d.clone(),
        }
    }
}
