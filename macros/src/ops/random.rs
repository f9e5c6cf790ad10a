//! `random.normal(shape)`, `random.uniform(shape, minval, maxval)`,
//! `random.bernoulli(p, shape)`: `jax.random`'s draws, from the device's
//! seeded generator, of the per-example `shape` for every example.

use crate::gen::lit;
use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

/// A checked draw.
#[derive(Clone, Debug, PartialEq)]
pub enum Draw {
    /// Standard normal floats.
    Normal,
    /// Uniform floats in `[minval, maxval)`.
    Uniform(f64, f64),
    /// A mask, true with probability `p`.
    Bernoulli(f64),
}

impl Draw {
    /// The `jax.random` function's name.
    pub fn word(&self) -> &'static str {
        match self {
            Draw::Normal => "normal",
            Draw::Uniform(..) => "uniform",
            Draw::Bernoulli(_) => "bernoulli",
        }
    }

    /// The draw of the batched `out` shape (`__batch` examples): floats on
    /// the tape `T` without gradient, or a mask.
    pub fn expand(&self, out: &[usize]) -> TokenStream {
        let (dfdx, rt) = (paths::dfdx(), paths::compact());
        let dims = out.iter().map(|d| {
            let d = lit(*d);
            quote!(#dfdx::shapes::Const::<#d>)
        });
        let shape = quote!((__batch, #(#dims,)*));
        match self {
            Draw::Normal => quote!(#rt::draw_normal::<_, E, D, T>(&__device, #shape)?),
            Draw::Uniform(lo, hi) => {
                quote!(#rt::draw_uniform::<_, E, D, T>(&__device, #shape, #lo, #hi)?)
            }
            Draw::Bernoulli(p) => quote!(#rt::draw_bernoulli::<_, E, D>(&__device, #shape, #p)?),
        }
    }
}
