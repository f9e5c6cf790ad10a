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
    params: &["features"],
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
    let ((cell, features), return_carry, reverse, keep_order) =
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
    let rnn = Rnn {
        cell,
        inputs: site.shape[1],
        features,
        return_carry,
        reverse,
        keep_order,
    };
    Some((rnn, out))
}

/// The field name's stem: the cell's, as in Flax, where the cell owns the
/// parameters (`LSTMCell_0`) and `RNN` adds no level.
pub fn base_name(b: &Bound) -> Option<String> {
    class(b).map(crate::symbol::snake)
}

/// The Flax class that holds the parameters: the cell's (`LSTMCell`).
pub fn class(b: &Bound) -> Option<&'static str> {
    match b.get("cell").map(|a| &a.val) {
        Some(crate::value::Val::Cell(k, _)) => Some(k.name()),
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
