//! The builtin functions: `maximum(a, b)` and `minimum(a, b)` (on tensors
//! with NumPy broadcasting, or on numbers at expansion), `select(mask, a,
//! b)` (`jnp.where`), `arange(n)` / `arange(start, stop)`, `len(t)`;
//! `enumerate(t)` belongs to `for` loops.

use super::{Checker, Kind};
use crate::ast::{Arg, Arith, Elem};
use crate::ops::Op;
use crate::shape::show;
use crate::symbol::BuiltinKind;
use crate::value::{ArgVal, Val};
use proc_macro2::TokenStream;

impl Checker<'_> {
    pub(super) fn builtin(&mut self, kind: BuiltinKind, args: &[Arg], tokens: &TokenStream) -> Val {
        if kind == BuiltinKind::Partial {
            return self.partial(args, tokens);
        }
        let vals: Vec<ArgVal> = args
            .iter()
            .map(|a| {
                let v = self.expr(&a.value);
                ArgVal::new(a, v)
            })
            .collect();
        let what = kind.name();
        if let Some(a) = vals.iter().find(|a| a.key.is_some()) {
            self.cx
                .error_at(a, format!("`{what}` takes its arguments by position"));
            return Val::Poison;
        }
        if vals.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        let want = match kind {
            BuiltinKind::Maximum | BuiltinKind::Minimum => 2..=2,
            BuiltinKind::Select => 3..=3,
            BuiltinKind::Arange => 1..=2,
            BuiltinKind::Len | BuiltinKind::Enumerate => 1..=1,
            BuiltinKind::Partial => 1..=usize::MAX,
        };
        if !want.contains(&vals.len()) {
            let form = match kind {
                BuiltinKind::Maximum | BuiltinKind::Minimum => format!("`{what}(a, b)`"),
                BuiltinKind::Select => "`select(mask, a, b)`".into(),
                BuiltinKind::Arange => "`arange(n)` or `arange(start, stop)`".into(),
                BuiltinKind::Len => "`len(t)`".into(),
                BuiltinKind::Enumerate => "`for (i, m) in enumerate(t)`".into(),
                BuiltinKind::Partial => "`partial(Conv, use_bias = false)`".into(),
            };
            self.cx
                .error_at(tokens, format!("`{what}` is called as {form}"));
            return Val::Poison;
        }
        match kind {
            BuiltinKind::Maximum | BuiltinKind::Minimum => {
                let arith = if kind == BuiltinKind::Maximum {
                    Arith::Max
                } else {
                    Arith::Min
                };
                self.extremum(arith, &vals, tokens)
            }
            BuiltinKind::Select => self.select(&vals, tokens),
            BuiltinKind::Arange => self.arange(&vals),
            BuiltinKind::Len => match vals[0].val.elems() {
                Some(e) => Val::Int(e.len() as i64),
                None => {
                    self.cx.error_at(
                        &vals[0],
                        format!(
                            "`len` counts a tuple's items (or a shape's axes), not {}",
                            vals[0].val.describe()
                        ),
                    );
                    Val::Poison
                }
            },
            // Answered before the arguments are read.
            BuiltinKind::Partial => Val::Poison,
            BuiltinKind::Enumerate => {
                self.cx.error_at(
                    tokens,
                    "`enumerate` numbers a loop's items: `for (i, m) in enumerate(t) { .. }`",
                );
                Val::Poison
            }
        }
    }

    fn extremum(&mut self, arith: Arith, vals: &[ArgVal], tokens: &TokenStream) -> Val {
        let (l, r) = (vals[0].val.clone(), vals[1].val.clone());
        let number = |v: &Val| matches!(v, Val::Int(_) | Val::Float(_));
        let tensor = |v: &Val| matches!(v, Val::Tensor(_));
        match (&l, &r) {
            (Val::Int(a), Val::Int(b)) => Val::Int(if arith == Arith::Max {
                *a.max(b)
            } else {
                *a.min(b)
            }),
            (a, b) if number(a) && number(b) => {
                let (x, y) = (as_f64(a), as_f64(b));
                Val::Float(if arith == Arith::Max {
                    x.max(y)
                } else {
                    x.min(y)
                })
            }
            (a, b) if (tensor(a) || number(a)) && (tensor(b) || number(b)) => {
                for (v, arg) in [(a, &vals[0]), (b, &vals[1])] {
                    if let Val::Tensor(i) = v {
                        if self.elem(*i) != Elem::Float {
                            self.cx.error_at(
                                arg,
                                format!("`{}` works on float tensors and numbers", arith.symbol()),
                            );
                            return Val::Poison;
                        }
                    }
                }
                let names = (vals[0].tokens.to_string(), vals[1].tokens.to_string());
                let names = (format!("`{}`", names.0), format!("`{}`", names.1));
                self.arith(arith, l, r, (&names.0, &names.1), tokens)
            }
            _ => {
                let bad = if tensor(&l) || number(&l) {
                    &vals[1]
                } else {
                    &vals[0]
                };
                self.cx.error_at(
                    bad,
                    format!(
                        "`{}` takes tensors and numbers, not {}",
                        arith.symbol(),
                        bad.val.describe()
                    ),
                );
                Val::Poison
            }
        }
    }

    /// `select(mask, a, b)`: `a` where the mask holds, else `b`; `a` and
    /// `b` float tensors of the mask's shape, or numbers (not both).
    fn select(&mut self, vals: &[ArgVal], tokens: &TokenStream) -> Val {
        let mask = match &vals[0].val {
            Val::Tensor(m) if self.elem(*m) == Elem::Bool => *m,
            other => {
                self.cx.error_at(&vals[0], format!("the first argument of `select` is a mask (a `Mask` input, `make_causal_mask(..)`, ..), where `jnp.where` takes a condition; here it is {}", other.describe()));
                return Val::Poison;
            }
        };
        let shape = self.shape(mask).to_vec();
        let mut inputs = vec![mask];
        let mut constants = [None, None];
        for (k, a) in vals[1..].iter().enumerate() {
            match &a.val {
                Val::Tensor(t) if self.elem(*t) == Elem::Float => {
                    if self.shape(*t) != shape {
                        self.cx.error_at(a, format!("`select` picks between values of the mask's shape {}, but this one has shape {}", show(&shape), show(self.shape(*t))));
                        return Val::Poison;
                    }
                    inputs.push(*t);
                }
                Val::Int(_) | Val::Float(_) => constants[k] = Some(as_f64(&a.val)),
                other => {
                    self.cx.error_at(
                        a,
                        format!(
                            "`select` picks between float tensors or numbers, not {}",
                            other.describe()
                        ),
                    );
                    return Val::Poison;
                }
            }
        }
        if inputs.len() == 1 {
            self.cx.error_at(tokens, "`select` between two numbers has no tensor to take its type from: make one of them a tensor");
            return Val::Poison;
        }
        let op = Op::Select {
            on_true: constants[0],
            on_false: constants[1],
        };
        // The first float tensor carries the tape (`choose`'s first
        // operand); with a number first, the mask is negated in the code.
        self.push(Kind::Op { op, inputs }, shape)
    }

    /// `arange(n)` / `arange(start, stop)`: a `[stop - start]` row of
    /// floats known at expansion.
    fn arange(&mut self, vals: &[ArgVal]) -> Val {
        let ints: Vec<Option<i64>> = vals
            .iter()
            .map(|a| self.cx.take(a.int("an `arange` bound")))
            .collect();
        let Some(ints) = ints.into_iter().collect::<Option<Vec<i64>>>() else {
            return Val::Poison;
        };
        let (start, stop) = match ints[..] {
            [n] => (0, n),
            [a, b] => (a, b),
            _ => return Val::Poison,
        };
        if stop <= start {
            self.cx.error_at(
                &vals[vals.len() - 1],
                format!("`arange({start}, {stop})` is empty: a row needs `stop` above `start`"),
            );
            return Val::Poison;
        }
        let n = usize::try_from(stop - start).unwrap_or(usize::MAX);
        self.push(
            Kind::Op {
                op: Op::Arange { start },
                inputs: Vec::new(),
            },
            vec![n],
        )
    }
}

fn as_f64(v: &Val) -> f64 {
    match v {
        Val::Int(n) => *n as f64,
        Val::Float(f) => *f,
        _ => 0.0,
    }
}
