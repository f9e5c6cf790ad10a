//! Random draws in the body: `random.normal(shape)`,
//! `random.uniform(shape, minval, maxval)`, `random.bernoulli(p, shape)`,
//! `jax.random`'s without the key.

use super::{Checker, Kind};
use crate::args::{self, Sig};
use crate::ast::{Arg, Expr};
use crate::ops::random::Draw;
use crate::ops::Op;
use crate::symbol::DrawKind;
use crate::value::{ArgVal, Val};
use proc_macro2::TokenStream;

fn sig(kind: DrawKind) -> Sig {
    match kind {
        DrawKind::Normal => Sig {
            params: &["shape"],
            required: &["shape"],
            example: "random.normal(x.shape)",
        },
        DrawKind::Uniform => Sig {
            params: &["shape", "minval", "maxval"],
            required: &["shape"],
            example: "random.uniform(x.shape, minval = 0.0, maxval = 1.0)",
        },
        DrawKind::Bernoulli => Sig {
            params: &["p", "shape"],
            required: &["shape"],
            example: "random.bernoulli(0.9, x.shape)",
        },
    }
}

impl Checker<'_> {
    pub(super) fn draw(&mut self, kind: DrawKind, args: &[Arg], tokens: &TokenStream) -> Val {
        let what = format!("random.{}", kind.name());
        // JAX's key first (`random.normal(rng, logvar.shape)`): a name the
        // model does not know, before the arguments the draw takes.
        if let Some(Arg {
            key: None,
            value: Expr::Var(v),
        }) = args.first()
        {
            let positional = args.iter().filter(|a| a.key.is_none()).count();
            let takes = if kind == DrawKind::Bernoulli { 2 } else { 1 };
            if self.lookup(&v.to_string()).is_none() && positional > takes {
                self.cx.error_at(v, format!("drop the key `{v}`: flaxen draws from the device's seeded generator (`Cpu::seed_from_u64(..)`), so `{what}` takes no key: `{}`", sig(kind).example));
                return Val::Poison;
            }
        }
        let vals: Vec<ArgVal> = self.eval_args(args);
        if vals.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        let bound = args::bind(&what, &sig(kind), &vals, tokens, &mut self.cx);
        let shape = bound.req(&mut self.cx, "shape", |a| {
            let dims: Option<Vec<usize>> = match a.val.elems() {
                Some(e) => e
                    .iter()
                    .map(|v| match v {
                        Val::Int(n) if *n >= 1 => usize::try_from(*n).ok(),
                        _ => None,
                    })
                    .collect(),
                None => match a.val {
                    Val::Int(n) if n >= 1 => usize::try_from(n).ok().map(|n| vec![n]),
                    _ => None,
                },
            };
            match (dims, &a.val) {
                (Some(d), _) if (1..=4).contains(&d.len()) => Ok(d),
                (_, Val::Tensor(_)) => Err(syn::Error::new_spanned(&a.tokens, format!("`{what}` takes a shape, not a tensor: `{what}({}.shape, ..)`", crate::ast::compact_text(&a.tokens)))),
                _ => Err(syn::Error::new_spanned(&a.tokens, format!("the shape of `{what}` is a per-example shape of 1 to 4 sizes known when the macro expands (`x.shape`, `(16, 8)`); the batch axis is added"))),
            }
        });
        let cx = &mut self.cx;
        let draw = match kind {
            DrawKind::Normal => Some(Draw::Normal),
            DrawKind::Uniform => {
                let lo = bound.or(cx, "minval", 0.0, |a| a.float("`minval`"));
                let hi = bound.or(cx, "maxval", 1.0, |a| a.float("`maxval`"));
                match (lo, hi) {
                    (Some(lo), Some(hi)) if lo < hi => Some(Draw::Uniform(lo, hi)),
                    (Some(_), Some(_)) => {
                        cx.error_at(tokens, "`random.uniform` needs `minval < maxval`");
                        None
                    }
                    _ => None,
                }
            }
            DrawKind::Bernoulli => match bound.or(cx, "p", 0.5, |a| a.float("`p`")) {
                Some(p) if (0.0..=1.0).contains(&p) => Some(Draw::Bernoulli(p)),
                Some(p) => {
                    cx.error_at(tokens, format!("`random.bernoulli` draws true with probability `p`, between 0 and 1, not {p}"));
                    None
                }
                None => None,
            },
        };
        match (draw, shape) {
            (Some(d), Some(shape)) => {
                let op = Op::Draw(d);
                let elem = op.output_elem();
                self.push_elem(
                    Kind::Op {
                        op,
                        inputs: Vec::new(),
                    },
                    shape,
                    elem,
                )
            }
            _ => Val::Poison,
        }
    }
}
