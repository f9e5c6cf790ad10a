//! Transforms of a layer call: `remat(Block(..))(x)`.
//!
//! The call is checked as written without the transform (same field name,
//! same parameters, same keys), then its field is wrapped: `remat` only
//! changes how the backward pass gets the block's activations.

use super::{Checker, Kind, Plan};
use crate::ast::{compact_text, Callee, Elem, Expr};
use crate::layers::Layer;
use crate::ops::Op;
use crate::symbol::{LayerKind, TransformKind};
use crate::value::Val;
use proc_macro2::TokenStream;

impl Checker<'_> {
    pub(super) fn transform(
        &mut self,
        kind: TransformKind,
        call: &Expr,
        word: &TokenStream,
        tokens: &TokenStream,
    ) -> Val {
        match kind {
            TransformKind::Remat => self.remat(call, word, tokens),
        }
    }

    fn remat(&mut self, call: &Expr, word: &TokenStream, tokens: &TokenStream) -> Val {
        let Expr::Call {
            callee,
            name,
            args,
            inputs,
            tokens: call_tokens,
        } = call
        else {
            self.cx
                .error_at(word, "`remat` wraps a layer call: `remat(Block(..))(x)`");
            return Val::Poison;
        };
        let what = compact_text(name);
        if let Callee::Layer(LayerKind::Dropout) = callee {
            self.cx.error_at(word, "`remat` recomputes a layer with parameters in the backward pass; `Dropout` has none, and its mask would be drawn again there\nhelp: call `Dropout(..)(x)` without `remat`");
            return Val::Poison;
        }
        let val = self.call(callee, name, args, inputs.as_deref(), call_tokens);
        let Val::Tensor(step) = val else {
            return val;
        };
        let Kind::Field { field, inputs } = &self.steps[step].kind else {
            self.cx.error_at(
                word,
                format!("`remat` recomputes a layer with parameters or a `#[compact]` model, and `{what}` is neither"),
            );
            return Val::Poison;
        };
        let (field, inputs) = (*field, inputs.clone());
        if inputs.len() > 4 {
            self.cx.error_at(tokens, format!("`remat` recomputes a block from at most 4 inputs (masks included), but `{what}` reads {} here\nhelp: call `{what}` without `remat`", inputs.len()));
            return Val::Poison;
        }
        if inputs[1..].iter().any(|&i| self.elem(i) == Elem::Index) {
            self.cx.error_at(tokens, format!("`remat` recomputes a block from float features and masks, but `{what}` reads token ids after its first input\nhelp: embed the tokens before the block, or call `{what}` without `remat`"));
            return Val::Poison;
        }
        if self.elem(inputs[0]) != Elem::Float {
            self.cx.error_at(tokens, format!("`remat` recomputes a block from float features, but `{what}` reads token ids here\nhelp: apply `remat` to the layers after the `Embed`"));
            return Val::Poison;
        }
        if let Some(why) = layer_stochastic(&self.fields[field].layer, &self.inlined) {
            self.cx.error_at(word, format!("`remat` cannot recompute `{what}`: it applies {why}, whose random mask would be drawn again in the backward pass, so the gradients would not be those of the forward pass\nhelp: apply the dropout outside the `remat` block, or call `{what}` without `remat`"));
            return Val::Poison;
        }
        // The call has just added its field, the last one.
        if field + 1 == self.fields.len() {
            if let Some(mut f) = self.fields.pop() {
                f.layer = Layer::Remat(Box::new(f.layer));
                self.fields.push(f);
            }
        }
        val
    }
}

/// What in `layer` (or the nested model it instantiates, at any depth)
/// draws random numbers when training; `inlined` holds the instances.
fn layer_stochastic(layer: &Layer, inlined: &[Plan]) -> Option<String> {
    match layer {
        Layer::Nested(n) => inlined
            .iter()
            .find(|p| p.name == n.ident)
            .and_then(plan_stochastic),
        Layer::Remat(l) => layer_stochastic(l, inlined),
        other => other.stochastic(),
    }
}

fn plan_stochastic(plan: &Plan) -> Option<String> {
    plan.steps.iter().find_map(|s| match &s.kind {
        Kind::Op {
            op: Op::Dropout(r), ..
        } => Some(format!("`Dropout({r})`")),
        Kind::Field { field, .. } => layer_stochastic(&plan.fields[*field].layer, &plan.inlined),
        _ => None,
    })
}
