//! Layers, models and activations with some arguments fixed, Python's
//! `functools.partial` as Flax code passes them to blocks (the ImageNet
//! ResNet's `conv = partial(nn.Conv, use_bias=False)`, `norm =
//! partial(nn.BatchNorm, momentum=0.9)`, `act = nn.relu`):
//! `partial(Conv, use_bias = false)`, a bare `Conv` or `relu`, and the
//! call that supplies the rest, `conv(64, (3, 3))(x)`.

use super::Checker;
use crate::ast::{Arg, Expr};
use crate::symbol::{LayerKind, OpKind};
use crate::value::{Partial, Target, Val};
use proc_macro2::TokenStream;

/// A bare vocabulary word as a value: a layer (`Conv`) or an activation
/// (`relu`) with nothing fixed.
pub fn bare(word: &str) -> Option<Val> {
    let target = match (LayerKind::from_name(word), OpKind::from_name(word)) {
        (Some(k), _) => Target::Layer(k),
        (_, Some(k)) if crate::ops::is_activation(k) => Target::Op(k),
        _ => return None,
    };
    Some(Val::Partial(Box::new(Partial {
        target,
        args: Vec::new(),
    })))
}

impl Checker<'_> {
    /// `partial(f, args..)`: `f` a layer, a nested model, an activation or
    /// another partial; the arguments are fixed, not checked until the
    /// call, as Python's.
    pub(super) fn partial(&mut self, args: &[Arg], tokens: &TokenStream) -> Val {
        let Some((first, rest)) = args.split_first().filter(|(f, _)| f.key.is_none()) else {
            self.cx.error_at(tokens, "`partial` takes the layer, model or activation first, then the arguments it fixes: `partial(Conv, use_bias = false)`");
            return Val::Poison;
        };
        let base = match &first.value {
            // A model of the crate: its name is not a value of its own.
            Expr::Var(v)
                if self.lookup(&v.to_string()).is_none()
                    && bare(&v.to_string()).is_none()
                    && v.to_string().starts_with(|c: char| c.is_ascii_uppercase()) =>
            {
                Partial {
                    target: Target::Nested(v.clone().into()),
                    args: Vec::new(),
                }
            }
            e => match self.expr(e) {
                Val::Partial(p) => *p,
                Val::Poison => return Val::Poison,
                other => {
                    self.cx.error_at(e.tokens(), format!("`partial` fixes arguments of a layer, a model or an activation (`partial(Conv, use_bias = false)`), not of {}", other.kind()));
                    return Val::Poison;
                }
            },
        };
        let vals = self.eval_args(rest);
        if vals.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        if let Some(a) = vals.iter().find(|a| matches!(a.val, Val::Tensor(_))) {
            self.cx.error_at(a, "`partial` fixes arguments known when the macro expands; a tensor is the input of the call, `conv(64, (3, 3))(x)`");
            return Val::Poison;
        }
        let args = base.merge(vals);
        Val::Partial(Box::new(Partial {
            target: base.target,
            args,
        }))
    }

    /// `conv(64, (3, 3))(x)` (applied), `conv(64, (3, 3))` (bound, shared
    /// where it is applied), `act(x)`: the fixed arguments merged with the
    /// call's.
    pub(super) fn call_partial(
        &mut self,
        ident: &syn::Ident,
        p: &Partial,
        args: &[Arg],
        inputs: Option<&[Arg]>,
        tokens: &TokenStream,
    ) -> Val {
        let vals = self.eval_args(args);
        match (&p.target, inputs) {
            (Target::Layer(kind), Some(inputs)) => self.layer(*kind, p.merge(vals), inputs, tokens),
            (Target::Layer(kind), None) if vals.iter().any(|a| matches!(a.val, Val::Tensor(_))) => {
                self.cx.error_at(tokens, format!("`{ident}` is a `{}` not built yet: build it with the arguments it lacks, then apply it to its input: `{ident}(..)(x)`", kind.name()));
                Val::Poison
            }
            (Target::Layer(kind), None) => self.bind_layer(*kind, p.merge(vals), tokens),
            (Target::Nested(path), Some(inputs)) => {
                self.nested(path, p.merge(vals), inputs, tokens)
            }
            (Target::Nested(_), None) => {
                self.cx.error_at(tokens, format!("`{ident}` is a model: build it and apply it to its input, `{ident}(..)(x)`"));
                Val::Poison
            }
            // The op's input comes first, then what `partial` fixed.
            (Target::Op(kind), None) => {
                let mut all = vals;
                all.extend(p.args.iter().cloned());
                self.op(*kind, all, args, tokens)
            }
            (Target::Op(kind), Some(_)) => {
                self.cx.error_at(
                    tokens,
                    format!(
                        "`{ident}` is an activation (`{}`): apply it to its input, `{ident}(x)`",
                        kind.name()
                    ),
                );
                Val::Poison
            }
        }
    }
}
