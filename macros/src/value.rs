//! Values the checker computes while it expands a model: tensors (steps of
//! the forward pass) and everything known at expansion (numbers, booleans,
//! tuples, shapes, words), and how a call's arguments are read from them.

use crate::ast::Arg;
use crate::shape::AxisPad;
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Error, Result};

/// A value of the model language.
#[derive(Clone, Debug)]
pub enum Val {
    /// A tensor: the index of its step.
    Tensor(usize),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(String),
    /// A bare word (`SAME`, `VALID`).
    Word(String),
    /// A tuple or list.
    Tuple(Vec<Val>),
    /// `x.shape`: a per-example shape, indexed from the end.
    Shape(Vec<usize>),
    /// A recurrent cell, its features and initialisers (`kernel_init`,
    /// `recurrent_kernel_init`, `bias_init`), for `RNN`.
    Cell(
        crate::symbol::CellKind,
        usize,
        Box<[Option<crate::init::Init>; 3]>,
    ),
    /// One of Flax's initialisers (`xavier_uniform()`), for `kernel_init`
    /// and the like.
    Init(crate::init::Init),
    /// A layer bound to a name before it is applied (`let dense =
    /// Dense(64);`): the checker's index of it.
    Layer(usize),
    /// A layer, model or activation with some arguments fixed
    /// (`partial(Conv, use_bias = false)`, Python's `functools.partial`;
    /// a bare `Conv` has none fixed), called with the rest:
    /// `conv(64, (3, 3))(x)`.
    Partial(Box<Partial>),
    /// An `Embed` of a calling model, passed in as a block parameter
    /// (wmt's `Encoder(shared_embedding = self.shared_embedding)`): the
    /// step holding its table (in the caller's call, the index among the
    /// tables passed).
    Table(usize),
    /// `None`: an optional block parameter without a value (Python's
    /// `None`); a given value is the value itself (`Some(64)` is `64`).
    None,
    /// `a..b` in an index: the ends, counted from the end when negative.
    Range(Option<i64>, Option<i64>),
    /// The value of an expression that failed (already reported).
    Poison,
}

impl Val {
    /// What kind of value it is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Val::Tensor(_) => "a tensor",
            Val::Int(_) => "an integer",
            Val::Float(_) => "a number",
            Val::Bool(_) => "a boolean",
            Val::Str(_) => "a string",
            Val::Word(_) => "a bare name",
            Val::Tuple(_) | Val::Shape(_) => "a tuple",
            Val::Cell(..) => "a cell",
            Val::Init(_) => "an initialiser",
            Val::Layer(_) => "a layer (apply it to its input, `layer(x)`)",
            Val::Table(_) => "an `Embed` passed in (apply it to token ids, `embed(tokens)`, or use `embed.attend(x)`)",
            Val::Partial(p) => match p.target {
                Target::Op(_) => "an activation (apply it to its input, `act(x)`)",
                Target::Layer(_) | Target::Nested(_) => {
                    "a layer not built yet (build it with its arguments, then apply it: `conv(64, (3, 3))(x)`)"
                }
            },
            Val::None => "`None`",
            Val::Range(..) => "a range",
            Val::Poison => "an invalid value",
        }
    }

    /// What kind of value it is, for messages; a word says that the model
    /// cannot see constants outside it.
    pub fn describe(&self) -> String {
        match self {
            Val::Word(w) => format!(
                "`{w}`, a name the model cannot see: the macro reads every value when it expands, so write the value itself, or declare a block parameter (`{}: Param<..>`)",
                w.to_lowercase()
            ),
            Val::None => "`None` (an optional block parameter not given): give it a value for this case with `.unwrap_or(..)`, or branch with `if let Some(d) = ..`".into(),
            Val::Tuple(items) if !items.is_empty() && items.iter().all(|v| matches!(v, Val::Tensor(_))) => {
                let names: Vec<String> = (0..items.len()).map(|k| ["a", "b", "c", "d", "e", "f"].get(k).map(|s| s.to_string()).unwrap_or(format!("t{k}"))).collect();
                format!("a tuple of {} tensors (the outputs of a model that returns several): bind each, `let ({}) = ..;`", items.len(), names.join(", "))
            }
            other => other.kind().to_string(),
        }
    }

    /// The elements of a tuple or shape.
    pub fn elems(&self) -> Option<Vec<Val>> {
        match self {
            Val::Tuple(v) => Some(v.clone()),
            Val::Shape(s) => Some(s.iter().map(|d| Val::Int(*d as i64)).collect()),
            _ => None,
        }
    }

    /// Whether it is known at expansion (not a tensor, not poisoned).
    pub fn is_constant(&self) -> bool {
        match self {
            Val::Tensor(_) | Val::Poison => false,
            Val::Tuple(v) => v.iter().all(Val::is_constant),
            _ => true,
        }
    }

    /// Whether it, or a part of it, is poisoned.
    pub fn is_poison(&self) -> bool {
        match self {
            Val::Poison => true,
            Val::Tuple(v) => v.iter().any(Val::is_poison),
            _ => false,
        }
    }
}

/// What a [`Val::Partial`] builds when called.
#[derive(Clone, Debug)]
pub enum Target {
    /// A built-in layer.
    Layer(crate::symbol::LayerKind),
    /// Another `#[compact]` model.
    Nested(syn::Path),
    /// An activation (`partial(leaky_relu, negative_slope = 0.2)`).
    Op(crate::symbol::OpKind),
}

/// A callable with some arguments fixed, as `functools.partial` keeps
/// them: positional ones go before the call's, keyword ones are
/// overridden by the call's.
#[derive(Clone)]
pub struct Partial {
    /// What it builds.
    pub target: Target,
    /// The fixed arguments.
    pub args: Vec<ArgVal>,
}

impl std::fmt::Debug for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "partial({:?}, {} fixed)", self.target, self.args.len())
    }
}

impl Partial {
    /// The fixed arguments merged with a call's.
    pub fn merge(&self, call: Vec<ArgVal>) -> Vec<ArgVal> {
        let (mut pos, mut kw): (Vec<ArgVal>, Vec<ArgVal>) =
            self.args.iter().cloned().partition(|a| a.key.is_none());
        let (call_pos, call_kw): (Vec<ArgVal>, Vec<ArgVal>) =
            call.into_iter().partition(|a| a.key.is_none());
        kw.retain(|a| !call_kw.iter().any(|c| c.key == a.key));
        pos.extend(call_pos);
        pos.extend(kw);
        pos.extend(call_kw);
        pos
    }
}

/// An evaluated argument of a call.
#[derive(Clone)]
pub struct ArgVal {
    /// The keyword, for keyword arguments.
    pub key: Option<syn::Ident>,
    /// Its value.
    pub val: Val,
    /// The value as written (where errors point).
    pub tokens: TokenStream,
    /// For a tuple written out, `(a, b)`: each element as written.
    parts: Vec<TokenStream>,
}

impl ArgVal {
    /// From a parsed argument and its value.
    pub fn new(arg: &Arg, val: Val) -> Self {
        let parts = match &arg.value {
            crate::ast::Expr::Tuple(items, _) => items.iter().map(|i| i.tokens()).collect(),
            _ => Vec::new(),
        };
        Self {
            key: arg.key.clone(),
            val,
            tokens: arg.value.tokens(),
            parts,
        }
    }

    /// The argument with another value.
    pub fn with_val(&self, val: Val) -> ArgVal {
        ArgVal {
            val,
            ..self.clone()
        }
    }

    /// Where an error about the argument as a whole points.
    pub fn span(&self) -> Span {
        self.key
            .as_ref()
            .map(|k| k.span())
            .unwrap_or_else(|| self.tokens.span())
    }

    fn err(&self, msg: impl std::fmt::Display) -> Error {
        Error::new_spanned(&self.tokens, msg)
    }

    /// Element `k` of a tuple argument, with its own tokens when written
    /// out.
    fn part(&self, k: usize, val: Val) -> ArgVal {
        let tokens = self
            .parts
            .get(k)
            .cloned()
            .unwrap_or_else(|| self.tokens.clone());
        ArgVal {
            key: self.key.clone(),
            val,
            tokens,
            parts: Vec::new(),
        }
    }

    /// A recurrent cell (`LSTMCell(64)`).
    pub fn cell(
        &self,
    ) -> Result<(
        crate::symbol::CellKind,
        usize,
        [Option<crate::init::Init>; 3],
    )> {
        match &self.val {
            Val::Cell(k, f, inits) => Ok((*k, *f, (**inits).clone())),
            other => Err(self.err(format!(
                "`RNN` runs a cell, `RNN(LSTMCell(features = 64))`, `GRUCell` or `SimpleCell`, not {}",
                other.describe()
            ))),
        }
    }

    /// An integer.
    pub fn int(&self, what: &str) -> Result<i64> {
        match &self.val {
            Val::Int(n) => Ok(*n),
            Val::Tensor(_) => Err(self.err(format!("{what} must be known when the macro expands (a number or a block parameter), not a tensor"))),
            other => Err(self.err(format!("{what} must be an integer, but is {}", other.describe()))),
        }
    }

    /// A size that must be at least 1.
    pub fn positive(&self, what: &str) -> Result<usize> {
        match self.int(what)? {
            n if n < 0 => Err(self.err(format!("{what} cannot be negative, but is {n}"))),
            0 => Err(self.err(format!("{what} must be at least 1, but is 0"))),
            n => usize::try_from(n).map_err(|_| self.err(format!("{what} must fit in `usize`"))),
        }
    }

    /// A size that may be 0.
    pub fn non_negative(&self, what: &str) -> Result<usize> {
        match self.int(what)? {
            n if n < 0 => Err(self.err(format!("{what} cannot be negative, but is {n}"))),
            n => usize::try_from(n).map_err(|_| self.err(format!("{what} must fit in `usize`"))),
        }
    }

    /// `(h, w)`, `[h, w]` or one number for both, each at least 1.
    pub fn pair(&self, what: &str) -> Result<(usize, usize)> {
        match self.val.elems() {
            Some(v) if v.len() == 2 => {
                let (a, b) = (self.part(0, v[0].clone()), self.part(1, v[1].clone()));
                Ok((a.positive(what)?, b.positive(what)?))
            }
            Some(v) => Err(self.err(format!(
                "{what} needs 2 numbers (height, width), but {} are given",
                v.len()
            ))),
            None => {
                let n = self.positive(what)?;
                Ok((n, n))
            }
        }
    }

    /// A Flax padding: `SAME`, `VALID` (also as strings), `p`, `(ph, pw)`
    /// or `((pt, pb), (pl, pr))`; one [`AxisPad`] per spatial axis.
    pub fn padding(&self) -> Result<(AxisPad, AxisPad)> {
        const HELP: &str = "padding is `SAME`, `VALID`, a number `p`, `(ph, pw)`, or `((top, bottom), (left, right))`";
        if let Val::Word(w) | Val::Str(w) = &self.val {
            return match w.as_str() {
                "SAME" => Ok((AxisPad::Same, AxisPad::Same)),
                "VALID" => Ok((AxisPad::Valid, AxisPad::Valid)),
                other => Err(self.err(format!("unknown padding `{other}`; {HELP}"))),
            };
        }
        let amount = |k: usize, v: &Val| self.part(k, v.clone()).non_negative("a padding");
        match self.val.elems() {
            None => {
                let p = self.non_negative("a padding")?;
                Ok((AxisPad::Explicit(p, p), AxisPad::Explicit(p, p)))
            }
            Some(v) if v.len() == 2 => {
                let axis = |k: usize, x: &Val| match x.elems() {
                    Some(w) if w.len() == 2 => {
                        Ok(AxisPad::Explicit(amount(k, &w[0])?, amount(k, &w[1])?))
                    }
                    Some(_) => Err(self.err(HELP)),
                    None => amount(k, x).map(|p| AxisPad::Explicit(p, p)),
                };
                Ok((axis(0, &v[0])?, axis(1, &v[1])?))
            }
            Some(_) => Err(self.err(HELP)),
        }
    }

    /// A finite number (an integer is accepted too).
    pub fn float(&self, what: &str) -> Result<f64> {
        match &self.val {
            Val::Float(f) if f.is_finite() => Ok(*f),
            Val::Float(_) => Err(self.err(format!("{what} must be a finite number"))),
            Val::Int(n) => Ok(*n as f64),
            other => Err(self.err(format!(
                "{what} must be a number such as `0.5`, known when the macro expands, but is {}",
                other.describe()
            ))),
        }
    }

    /// `true` / `false` (Python's `True` / `False` too).
    pub fn boolean(&self, what: &str) -> Result<bool> {
        match &self.val {
            Val::Bool(b) => Ok(*b),
            other => Err(self.err(format!(
                "{what} must be `true` or `false`, but is {}",
                other.describe()
            ))),
        }
    }

    /// An axis of a per-example shape of `rank` axes, counted from the end
    /// as Flax code does (`-1` is the last). Counting from the front is
    /// refused: Flax's arrays include the batch axis and flaxen's shapes do
    /// not, so `axis = 1` would mean different axes to a reader of either.
    pub fn axis_from_end(&self, rank: usize) -> Result<usize> {
        let n = self.int("`axis`")?;
        if n >= 0 {
            return Err(self.err("write `axis` from the end (`-1` is the last axis): flaxen's shapes leave out the batch axis that Flax's arrays have, so an axis counted from the front would be ambiguous"));
        }
        let from_end = n.unsigned_abs() as usize;
        if (1..=rank).contains(&from_end) {
            Ok(rank - from_end)
        } else {
            Err(self.err(format!("`axis` must be between -{rank} and -1 for an input of {rank} axes (the batch axis is not one of them), but is {n}")))
        }
    }

    /// A tuple of distinct axes, each as in
    /// [`axis_from_end`](Self::axis_from_end), in the order given.
    pub fn axes_in_order(&self, rank: usize) -> Result<Vec<usize>> {
        let Some(items) = self.val.elems() else {
            return Err(self.err("`axes` is a tuple of axes, e.g. `(-1, -2)`"));
        };
        let mut axes = Vec::new();
        for (k, item) in items.into_iter().enumerate() {
            let part = self.part(k, item);
            let a = part.axis_from_end(rank)?;
            if axes.contains(&a) {
                return Err(part.err("this axis is listed twice"));
            }
            axes.push(a);
        }
        Ok(axes)
    }

    /// One axis or a tuple of distinct axes, each as in
    /// [`axis_from_end`](Self::axis_from_end); sorted.
    pub fn axes_from_end(&self, rank: usize) -> Result<Vec<usize>> {
        if self.val.elems().is_none() {
            return Ok(vec![self.axis_from_end(rank)?]);
        }
        let mut axes = self.axes_in_order(rank)?;
        axes.sort_unstable();
        Ok(axes)
    }

    /// A `name = "..."` value: a snake_case identifier, which becomes the
    /// field name and the checkpoint key prefix.
    /// The name as written (Flax's name of the module, `Transformer`),
    /// and the field it becomes, snake-cased (`transformer`).
    pub fn layer_name(&self) -> Result<(String, String)> {
        let Val::Str(v) = &self.val else {
            return Err(self.err("a layer name is a string, e.g. `name = \"head\"` or `name = format!(\"block_{i}\")`"));
        };
        let field = crate::symbol::snake(v);
        let ok = !v.starts_with("__")
            && v.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && syn::parse_str::<syn::Ident>(&field).is_ok();
        if ok {
            Ok((v.clone(), field))
        } else {
            Err(self.err(format!("`{v}` cannot be a layer name: names are identifiers such as `head`, `conv_out` or `Transformer` (the field and checkpoint key is the name snake-cased; Flax's path is the name as written)")))
        }
    }
}

impl ToTokens for ArgVal {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        self.tokens.to_tokens(tokens);
    }
}
