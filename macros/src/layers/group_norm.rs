//! `GroupNorm(num_groups = 32, group_size, epsilon = 1e-6)`: Flax's
//! `nn.GroupNorm` per example and group of channels of `[c, h, w]`.

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &[
        "num_groups",
        "group_size",
        "epsilon",
        "name",
        "scale_init",
        "bias_init",
    ],
    required: &[],
    example: "GroupNorm(num_groups = 8)(x)",
};

/// A checked `GroupNorm`.
pub struct GroupNorm {
    channels: usize,
    groups: usize,
    epsilon: f64,
    /// `scale_init`, `bias_init`.
    pub fills: Vec<crate::init::Fill>,
}

/// How the channels are split: Flax takes one or the other.
enum Split {
    Groups(usize),
    Size(usize),
}

/// Unchanged shape; the channels must split into equal groups.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(GroupNorm, Vec<usize>)> {
    let epsilon = super::epsilon(b, cx, 1e-6);
    let split = match (b.get("num_groups"), b.get("group_size")) {
        (Some(a), Some(_)) => {
            cx.error_at(
                a,
                "`GroupNorm` takes `num_groups` or `group_size`, not both",
            );
            None
        }
        (Some(a), None) => cx.take(a.positive("`num_groups`")).map(Split::Groups),
        (None, Some(a)) => cx.take(a.positive("`group_size`")).map(Split::Size),
        (None, None) => Some(Split::Groups(32)),
    };
    if site.shape.len() != 3 {
        site.needs_image(cx, "GroupNorm");
        return None;
    }
    let c = site.shape[0];
    let defaulted = !b.has("num_groups") && !b.has("group_size");
    let (groups, per_group, rule) = match split? {
        Split::Groups(g) if defaulted => (g, c / g, format!("Flax's default `num_groups = {g}`")),
        Split::Groups(g) => (g, c / g, format!("`num_groups = {g}`")),
        Split::Size(n) => (c / n, n, format!("`group_size = {n}`")),
    };
    if groups == 0 || groups * per_group != c {
        cx.error_at(site.call, format!("`GroupNorm` with {rule} needs channels that split into equal groups, but {} has {c} channels", site.input));
        return None;
    }
    Some((
        GroupNorm {
            channels: c,
            groups,
            epsilon: epsilon?,
            fills: crate::init::norm(b, cx, quote!(scale), Some(quote!(bias))),
        },
        site.shape.to_vec(),
    ))
}

impl GroupNorm {
    pub fn ty(&self) -> TokenStream {
        let (l, c, g) = (paths::layers(), lit(self.channels), lit(self.groups));
        quote!(#l::GroupNorm<#c, #g, E, D>)
    }

    pub fn init(&self) -> Vec<TokenStream> {
        let e = self.epsilon;
        vec![quote!(__f.epsilon = #e;)]
    }

    pub fn params(&self) -> usize {
        self.channels.saturating_mul(2)
    }

    pub fn doc(&self) -> String {
        format!("`GroupNorm({} groups)`", self.groups)
    }
}
