//! `param("cls", zeros, (1, 1, c))`: Flax's `self.param(name, init,
//! shape)`, a trainable tensor of exactly Flax's shape, saved under its
//! name. In the body its value is per example: a leading axis of size 1
//! (of two or more) is Flax's batch axis, which the batch fills (ViT's
//! `(1, 1, c)` class token is a `[1, c]` value, a `(1, s, c)` position
//! table a `[s, c]` one); any other shape is the value of every example.

use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::init::{Init, Target};
use crate::paths;
use crate::shape::{self, show};
use crate::value::{ArgVal, Val};
use proc_macro2::TokenStream;
use quote::quote;

/// How a `param` call is written, for messages.
pub const EXAMPLE: &str = "param(\"cls\", zeros, (1, 1, 64))";

/// A checked declared parameter.
pub struct Param {
    /// Flax's shape, the stored tensor's.
    pub shape: Vec<usize>,
    pub init: Init,
}

/// The initialiser and shape of `param(name, init, shape)`; the name is
/// read by the caller, with the layers' names.
pub fn check(init: &ArgVal, shape: &ArgVal, cx: &mut Ctxt) -> Option<Param> {
    let dims = match shape.val.elems() {
        Some(items) => items
            .iter()
            .map(|v| match v {
                Val::Int(n) if *n >= 1 => usize::try_from(*n).ok(),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>(),
        None => None,
    };
    let init = match &init.val {
        Val::Init(i) => Some(i.clone()),
        Val::Poison => None,
        other => {
            cx.error_at(init, format!("the second argument of `param` is its initialiser, such as `zeros` or `normal(stddev = 0.02)`, but is {}", other.describe()));
            None
        }
    };
    let Some(dims) = dims.filter(|d| (1..=5).contains(&d.len())) else {
        if !shape.val.is_poison() {
            cx.error_at(shape, format!("the third argument of `param` is its shape, a tuple of 1 to 5 sizes of at least 1 as Flax writes it (batch axis of 1 included), e.g. `{EXAMPLE}`"));
        }
        return None;
    };
    let init = init?;
    if dims.len() == 1 && matches!(init, Init::Scaling(..) | Init::Orthogonal(_)) {
        cx.error_at(shape, format!("a parameter of shape {} is a vector, which has no fan-in or fan-out for this initialiser (Flax refuses it too)\nhelp: a vector takes `zeros`, `ones`, `constant(v)`, `normal(..)`, `uniform(..)` or `truncated_normal(..)`", show(&dims)));
        return None;
    }
    Some(Param { shape: dims, init })
}

impl Param {
    /// The per-example shape of its value.
    pub fn value_shape(&self) -> Vec<usize> {
        match self.shape.as_slice() {
            [1, rest @ ..] if !rest.is_empty() => rest.to_vec(),
            all => all.to_vec(),
        }
    }

    /// Flax's fans of its shape (`in_axis = -2`, `out_axis = -1`, the rest
    /// a receptive field).
    fn target(&self) -> Target {
        match self.shape.as_slice() {
            [.., i, o] => {
                let field: usize = self.shape[..self.shape.len() - 2].iter().product();
                Target::Kernel {
                    fan_in: i * field,
                    fan_out: o * field,
                    out_first: false,
                }
            }
            _ => Target::Vector,
        }
    }

    fn dims(shape: &[usize]) -> Vec<TokenStream> {
        let dfdx = paths::dfdx();
        shape
            .iter()
            .map(|d| {
                let d = lit(*d);
                quote!(#dfdx::shapes::Const<#d>)
            })
            .collect()
    }

    pub fn ty(&self) -> TokenStream {
        let (dfdx, dims) = (paths::dfdx(), Self::dims(&self.shape));
        quote!(#dfdx::tensor::Tensor<(#(#dims,)*), E, D>)
    }

    /// Its `TensorCollection` visit as the tensor `key`, (re)drawn with
    /// its initialiser.
    pub fn visit(&self, key: &str, field: &syn::Ident) -> TokenStream {
        let dfdx = paths::dfdx();
        let fill = self.init.fill(quote!(__t), self.target());
        quote!(Self::tensor(
            #key,
            |s| &s.#field,
            |s| &mut s.#field,
            #dfdx::nn::TensorOptions::reset_with(|__t| { #fill ::core::result::Result::Ok(()) }),
        ))
    }

    /// Its value in a forward pass: the tensor on the tape `T`, broadcast
    /// over the batch `__batch`, as a tensor of its own (whose gradient
    /// the broadcast sums back into the parameter's).
    pub fn value(&self, field: &syn::Ident) -> TokenStream {
        let (dfdx, rt) = (paths::dfdx(), paths::compact());
        let value = Self::dims(&self.value_shape());
        quote!({
            let __p = self.#field.retaped::<T>();
            let __p = #dfdx::tensor_ops::ReshapeTo::try_reshape_like(__p, &(#(<#value>::default(),)*))?;
            let __p = #dfdx::tensor_ops::BroadcastTo::try_broadcast_like::<_, #dfdx::shapes::Axis<0>>(__p, &(__batch, #(<#value>::default(),)*))?;
            #dfdx::tensor_ops::TryMul::try_mul(__p, #rt::scalar::<E>(1.0))?
        })
    }

    pub fn params(&self) -> usize {
        shape::params(&self.shape)
    }

    pub fn doc(&self) -> String {
        format!("`param{}`", show(&self.shape))
    }
}
