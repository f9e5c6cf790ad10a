//! Elementwise activations, Flax's `nn.relu`, `nn.gelu`, ... Each is a
//! dfdx tensor method, flaxen's parallel `Relu` module, or a function of
//! the runtime's `activations` (the ops dfdx lacks or gets wrong).

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::paths;
use crate::symbol::OpKind;
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
const ELU: Sig = Sig {
    params: &["alpha"],
    required: &[],
    example: "elu(x, alpha = 1.0)",
};

pub fn sig(kind: OpKind) -> &'static Sig {
    match kind {
        OpKind::Gelu => &GELU,
        OpKind::LeakyRelu => &LEAKY,
        OpKind::Elu => &ELU,
        OpKind::Relu
        | OpKind::Sigmoid
        | OpKind::Tanh
        | OpKind::Silu
        | OpKind::Swish
        | OpKind::Selu
        | OpKind::Softplus
        | OpKind::LogSigmoid
        | OpKind::Relu6
        | OpKind::HardTanh
        | OpKind::HardSigmoid
        | OpKind::HardSilu
        | OpKind::HardSwish => &PLAIN,
        // Not activations: `ops::sig` gives theirs.
        OpKind::Softmax
        | OpKind::LogSoftmax
        | OpKind::Mean
        | OpKind::Sum
        | OpKind::Concatenate
        | OpKind::AvgPool
        | OpKind::MaxPool
        | OpKind::Flatten
        | OpKind::Resize
        | OpKind::Reshape
        | OpKind::SwapAxes
        | OpKind::MakeCausalMask
        | OpKind::MakeAttentionMask
        | OpKind::CombineMasks => &PLAIN,
    }
}

/// A checked activation.
pub enum Activation {
    /// flaxen's `Relu` module (a parallel CPU kernel; dfdx's op on Cuda).
    Relu,
    /// A dfdx tensor method without arguments (`try_sigmoid`).
    Method(&'static str, &'static str),
    /// A function of the runtime's activations, with these numbers.
    Function(&'static str, Vec<f64>, String),
}

pub fn check(kind: OpKind, b: &Bound, cx: &mut Ctxt) -> Option<Activation> {
    let f = |name: &'static str| {
        Some(Activation::Function(
            name,
            Vec::new(),
            format!("`{}`", kind.name()),
        ))
    };
    match kind {
        OpKind::Relu => Some(Activation::Relu),
        OpKind::Sigmoid => Some(Activation::Method("try_sigmoid", "`sigmoid`")),
        OpKind::Tanh => Some(Activation::Method("try_tanh", "`tanh`")),
        // Flax's `nn.gelu` defaults to the tanh approximation, dfdx's
        // `fast_gelu`; `approximate = false` is the erf form, the runtime's
        // fix of dfdx's `accurate_gelu` gradient.
        OpKind::Gelu => match b.or(cx, "approximate", true, |a| a.boolean("`approximate`"))? {
            true => Some(Activation::Method("try_fast_gelu", "`gelu`")),
            false => Some(Activation::Function(
                "try_gelu_exact",
                Vec::new(),
                "`gelu(approximate = false)`".into(),
            )),
        },
        OpKind::Silu => f("try_silu"),
        OpKind::Swish => f("try_swish"),
        OpKind::Selu => f("try_selu"),
        OpKind::Softplus => f("try_softplus"),
        OpKind::LogSigmoid => f("try_log_sigmoid"),
        OpKind::Relu6 => f("try_relu6"),
        OpKind::HardTanh => f("try_hard_tanh"),
        OpKind::HardSigmoid => f("try_hard_sigmoid"),
        OpKind::HardSilu | OpKind::HardSwish => f("try_hard_silu"),
        // Flax's defaults: negative_slope 0.01, alpha 1.0.
        OpKind::LeakyRelu => {
            let v = b.or(cx, "negative_slope", 0.01, |a| a.float("`negative_slope`"))?;
            Some(Activation::Function(
                "try_leaky_relu",
                vec![v],
                format!("`leaky_relu(negative_slope = {v})`"),
            ))
        }
        OpKind::Elu => {
            let v = b.or(cx, "alpha", 1.0, |a| a.float("`alpha`"))?;
            Some(Activation::Function(
                "try_elu",
                vec![v],
                format!("`elu(alpha = {v})`"),
            ))
        }
        OpKind::Softmax
        | OpKind::LogSoftmax
        | OpKind::Mean
        | OpKind::Sum
        | OpKind::Concatenate
        | OpKind::AvgPool
        | OpKind::MaxPool
        | OpKind::Flatten
        | OpKind::Resize
        | OpKind::Reshape
        | OpKind::SwapAxes
        | OpKind::MakeCausalMask
        | OpKind::MakeAttentionMask
        | OpKind::CombineMasks => None,
    }
}

impl Activation {
    /// The module type, for activations that are modules.
    pub fn module(&self) -> Option<TokenStream> {
        let l = paths::layers();
        match self {
            Activation::Relu => Some(quote!(#l::Relu)),
            Activation::Method(..) | Activation::Function(..) => None,
        }
    }

    /// The call on `x`, for activations that are not modules.
    pub fn call(&self, x: TokenStream) -> TokenStream {
        match self {
            Activation::Relu => TokenStream::new(),
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

    pub fn doc(&self) -> String {
        match self {
            Activation::Relu => "`relu`".into(),
            Activation::Method(_, d) => (*d).into(),
            Activation::Function(_, _, d) => d.clone(),
        }
    }
}
