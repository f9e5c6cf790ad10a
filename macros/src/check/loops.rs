//! `for` loops, unrolled when the macro expands: over a range
//! (`for i in 0..n`), over a tuple (`for m in mults`) and with its index
//! (`for (i, m) in enumerate(mults)`).

use super::Checker;
use crate::ast::{Block, Expr};
use crate::value::Val;
use proc_macro2::TokenStream;
use std::collections::HashMap;

/// The most iterations a loop may unroll to.
const MAX_UNROLL: i64 = 1024;

impl Checker<'_> {
    pub(super) fn for_loop(
        &mut self,
        var: Option<&syn::Ident>,
        start: &Expr,
        end: &Expr,
        inclusive: bool,
        body: &Block,
        tokens: &TokenStream,
    ) {
        let bound = |c: &mut Self, e: &Expr| match c.expr(e) {
            Val::Int(n) => Some(n),
            Val::Poison => None,
            other => {
                c.cx.error_at(e.tokens(), format!("a loop bound must be an integer known when the macro expands (a number or a block parameter), not {}", other.kind()));
                None
            }
        };
        let (Some(a), Some(b)) = (bound(self, start), bound(self, end)) else {
            return;
        };
        let b = if inclusive { b.saturating_add(1) } else { b };
        if b.saturating_sub(a) > MAX_UNROLL {
            self.cx.error_at(
                tokens,
                format!(
                    "this loop unrolls to {} iterations; the macro unrolls at most {MAX_UNROLL}",
                    b.saturating_sub(a)
                ),
            );
            return;
        }
        let iters = (a..b).map(|i| {
            var.map(|v| vec![(v.clone(), Val::Int(i))])
                .unwrap_or_default()
        });
        self.unroll(iters, body);
    }

    /// `for m in t` / `for (i, m) in enumerate(t)`: `t` a tuple (or a
    /// shape) known at expansion.
    pub(super) fn for_each(
        &mut self,
        (index, start): (Option<&syn::Ident>, Option<&Expr>),
        var: Option<&syn::Ident>,
        items: &Expr,
        body: &Block,
        tokens: &TokenStream,
    ) {
        let first = match start.map(|s| (s, self.expr(s))) {
            None => 0,
            Some((_, Val::Int(n))) => n,
            Some((_, Val::Poison)) => return,
            Some((s, other)) => {
                self.cx.error_at(
                    s.tokens(),
                    format!("`enumerate`'s start is an integer, not {}", other.kind()),
                );
                return;
            }
        };
        let elems = match self.expr(items) {
            Val::Poison => return,
            v => match v.elems() {
                Some(e) => e,
                None => {
                    self.cx.error_at(items.tokens(), format!("a `for` loop runs over a range (`0..n`) or a tuple known when the macro expands (`for m in (1, 2, 4)`, a block parameter), not {}", v.describe()));
                    return;
                }
            },
        };
        let _ = tokens;
        let iters = elems.into_iter().enumerate().map(|(k, v)| {
            let mut b = Vec::new();
            if let Some(i) = index {
                b.push((i.clone(), Val::Int(first + k as i64)));
            }
            if let Some(m) = var {
                b.push((m.clone(), v));
            }
            b
        });
        self.unroll(iters, body);
    }

    /// `hs.push(h)` (its value `()`) or `hs.pop()` (the last item): the
    /// list bound to `var`, a `let mut` tuple, changed in place.
    pub(super) fn list(
        &mut self,
        var: &syn::Ident,
        push: Option<&Expr>,
        tokens: &TokenStream,
    ) -> Val {
        let pushed = push.map(|e| self.expr(e));
        let name = var.to_string();
        let items = match self.lookup(&name) {
            None => {
                let msg = self.unknown_variable(var);
                self.cx.error_at(var, msg);
                return Val::Poison;
            }
            Some(b) if b.val.is_poison() => return Val::Poison,
            Some(b) if !b.mutable => {
                self.cx.error_at(
                    var,
                    format!(
                        "`{name}` is changed in place: declare it `let mut {name} = vec![..];`"
                    ),
                );
                return Val::Poison;
            }
            Some(b) => match &b.val {
                Val::Tuple(items) => items.clone(),
                other => {
                    self.cx.error_at(tokens, format!("`.push` and `.pop` change a list (`let mut {name} = vec![x];`), not {}", other.kind()));
                    return Val::Poison;
                }
            },
        };
        let mut items = items;
        let out = match pushed {
            Some(v) => {
                items.push(v);
                Val::Tuple(Vec::new())
            }
            None => match items.pop() {
                Some(v) => v,
                None => {
                    self.cx
                        .error_at(tokens, format!("`{name}.pop()` of an empty list"));
                    return Val::Poison;
                }
            },
        };
        if let Some(b) = self.scopes.iter_mut().rev().find_map(|s| s.get_mut(&name)) {
            b.val = Val::Tuple(items);
        }
        out
    }

    /// The body once per iteration, with that iteration's bindings.
    fn unroll(&mut self, iters: impl Iterator<Item = Vec<(syn::Ident, Val)>>, body: &Block) {
        for binds in iters {
            self.scopes.push(HashMap::new());
            for (v, val) in binds {
                self.declare(&v, val, false);
            }
            let before = self.cx.has_errors();
            let v = self.block(body, false);
            self.scopes.pop();
            if !matches!(&v, Val::Poison) && !matches!(&v, Val::Tuple(t) if t.is_empty()) {
                if let Some(value) = &body.value {
                    self.cx.error_at(
                        value.tokens(),
                        "a loop body's last expression is not used: assign it (`x = ..;`)",
                    );
                }
                return;
            }
            // One iteration's mistakes are every iteration's: report once.
            if !before && self.cx.has_errors() {
                return;
            }
        }
    }
}
