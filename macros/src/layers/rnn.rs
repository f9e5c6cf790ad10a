//! `RNN(cell, return_carry = false, reverse = false, keep_order = false)`
//! with `cell` one of `LSTMCell(features)`, `GRUCell(features)`,
//! `SimpleCell(features)`: Flax's `nn.RNN` over `[seq, f]`.

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::shape;
use crate::symbol::CellKind;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["cell", "return_carry", "reverse", "keep_order", "name"],
    required: &["cell"],
    example: "RNN(LSTMCell(features = 64))(x)",
};

/// The signature of a cell: `LSTMCell(features)`.
pub const CELL: Sig = Sig {
    params: &[
        "features",
        "name",
        "kernel_init",
        "recurrent_kernel_init",
        "bias_init",
    ],
    required: &["features"],
    example: "LSTMCell(features = 64)",
};

/// A checked `RNN`.
pub struct Rnn {
    cell: CellKind,
    inputs: usize,
    features: usize,
    return_carry: bool,
    reverse: bool,
    keep_order: bool,
    /// The cell's `kernel_init`, `recurrent_kernel_init`, `bias_init`.
    pub fills: Vec<crate::init::Fill>,
}

/// `[seq, f]` → `[seq, features]`, or `[features]` with `return_carry`
/// (the final hidden state; Flax returns it with the outputs).
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Rnn, Vec<usize>)> {
    let cell = b.req(cx, "cell", |a| a.cell());
    let return_carry = b.or(cx, "return_carry", false, |a| a.boolean("`return_carry`"));
    let reverse = b.or(cx, "reverse", false, |a| a.boolean("`reverse`"));
    let keep_order = b.or(cx, "keep_order", false, |a| a.boolean("`keep_order`"));
    if site.shape.len() != 2 {
        site.wrong_input(cx, "RNN", "[seq, features]", "");
        return None;
    }
    let ((cell, features, inits), return_carry, reverse, keep_order) =
        (cell?, return_carry?, reverse?, keep_order?);
    if keep_order && !reverse {
        if let Some(a) = b.get("keep_order") {
            cx.error_at(a, "`keep_order` puts the outputs of a `reverse = true` RNN back in the inputs' order; without `reverse` it changes nothing");
        }
        return None;
    }
    let out = if return_carry {
        vec![features]
    } else {
        vec![site.shape[0], features]
    };
    let fills = fills(cell, site.shape[1], features, inits);
    let rnn = Rnn {
        cell,
        inputs: site.shape[1],
        features,
        return_carry,
        reverse,
        keep_order,
        fills,
    };
    Some((rnn, out))
}

/// Where Flax's cells use each of their initialisers: `kernel_init` on
/// the input kernels, `recurrent_kernel_init` on the hidden ones,
/// `bias_init` on every bias (the LSTM's hidden gates, the GRU's input
/// gates and `hn`, the simple cell's input).
fn fills(
    cell: CellKind,
    inputs: usize,
    features: usize,
    [kernel, recurrent, bias]: [Option<crate::init::Init>; 3],
) -> Vec<crate::init::Fill> {
    use crate::init::{Fill, Target};
    let (i, h) = (inputs, features);
    let (input, hidden, biased): (&[&str], &[&str], &[&str]) = match cell {
        CellKind::Lstm => (
            &["ii", "if_", "ig", "io"],
            &["hi", "hf", "hg", "ho"],
            &["hi", "hf", "hg", "ho"],
        ),
        CellKind::Gru => (
            &["ir", "iz", "in_"],
            &["hr", "hz", "hn"],
            &["ir", "iz", "in_", "hn"],
        ),
        CellKind::Simple => (&["i"], &["h"], &["i"]),
    };
    let mut out = Vec::new();
    let mut add = |init: &Option<crate::init::Init>, gates: &[&str], target, tensor: &str| {
        let Some(init) = init else { return };
        for g in gates {
            let (g, t) = (
                quote::format_ident!("{g}"),
                quote::format_ident!("{tensor}"),
            );
            let path = quote!(cell.#g.#t);
            out.push(Fill {
                path,
                init: init.clone(),
                target,
            });
        }
    };
    let kernel_of = |fan_in| Target::Kernel {
        fan_in,
        fan_out: h,
        out_first: true,
    };
    add(&kernel, input, kernel_of(i), "weight");
    add(&recurrent, hidden, kernel_of(h), "weight");
    add(&bias, biased, Target::Vector, "bias");
    out
}

/// The field name's stem: the cell's, as in Flax, where the cell owns the
/// parameters (`LSTMCell_0`) and `RNN` adds no level.
pub fn base_name(b: &Bound) -> Option<String> {
    class(b).map(crate::symbol::snake)
}

/// The Flax class that holds the parameters: the cell's (`LSTMCell`).
pub fn class(b: &Bound) -> Option<&'static str> {
    match b.get("cell").map(|a| &a.val) {
        Some(crate::value::Val::Cell(k, ..)) => Some(k.name()),
        _ => None,
    }
}

impl Rnn {
    /// Its cell's `FlaxKind`.
    pub fn flax_kind(&self) -> TokenStream {
        let fl = paths::flax();
        match self.cell {
            CellKind::Lstm => quote!(#fl::FlaxKind::LstmCell),
            CellKind::Gru => quote!(#fl::FlaxKind::GruCell),
            CellKind::Simple => quote!(#fl::FlaxKind::SimpleCell),
        }
    }

    pub fn ty(&self) -> TokenStream {
        let l = paths::layers();
        let (i, h) = (lit(self.inputs), lit(self.features));
        let cell = match self.cell {
            CellKind::Lstm => quote!(#l::LstmCell<#i, #h, E, D>),
            CellKind::Gru => quote!(#l::GruCell<#i, #h, E, D>),
            CellKind::Simple => quote!(#l::SimpleCell<#i, #h, E, D>),
        };
        let (r, k, c) = (self.reverse, self.keep_order, self.return_carry);
        quote!(#l::Rnn<#cell, #r, #k, #c>)
    }

    pub fn params(&self) -> usize {
        let (f, h) = (self.inputs, self.features);
        let (fh, hh) = (shape::params(&[f, h]), shape::params(&[h, h]));
        match self.cell {
            // Input kernels without bias, recurrent ones with.
            CellKind::Lstm => fh.saturating_add(hh).saturating_add(h).saturating_mul(4),
            // `ir`, `iz`, `in` with bias, `hr`, `hz` without, `hn` with.
            CellKind::Gru => fh
                .saturating_mul(3)
                .saturating_add(hh.saturating_mul(3))
                .saturating_add(h.saturating_mul(4)),
            CellKind::Simple => fh.saturating_add(hh).saturating_add(h),
        }
    }

    pub fn doc(&self) -> String {
        let carry = if self.return_carry {
            ", return_carry"
        } else {
            ""
        };
        let reverse = if self.reverse { ", reverse" } else { "" };
        format!(
            "`RNN({}({}){reverse}{carry})`",
            self.cell.name(),
            self.features
        )
    }
}
