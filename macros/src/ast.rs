//! The parsed model: an AST that keeps the user's tokens, so that later
//! phases report every error at the exact call (`syn::Error::new_spanned`
//! underlines a whole range on stable Rust, where one joined `Span` is not
//! available).

use crate::symbol::{CellKind, LayerKind, OpKind, TransformKind};
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;

/// A parsed `#[compact] impl Name { fn forward(x: Input<..>, ..) { .. } }`.
pub struct Model {
    /// The type the impl is for (`Cnn`).
    pub name: syn::Ident,
    /// The inputs, in declaration order (the module takes a tuple when
    /// there are several; the tape rides on the first).
    pub inputs: Vec<InputDecl>,
    /// Block parameters (`features: Param<64>`), in declaration order.
    pub params: Vec<ParamDecl>,
    /// The body of `fn forward`.
    pub body: Block,
    /// Doc attributes of `fn forward`, copied onto the generated module.
    pub docs: Vec<syn::Attribute>,
    /// `fn setup() { let encoder = Encoder(..); .. }`: layers and models
    /// bound once (Flax's `setup`), named by their variables, which every
    /// method reaches as `self.encoder`.
    pub setup: Option<Block>,
    /// Methods beside `fn forward` (`fn generate(z: Input<20>) { .. }`),
    /// over the same parameters.
    pub methods: Vec<Method>,
    /// Other items of the impl block, passed through unchanged.
    pub passthrough: Vec<syn::ImplItem>,
    /// The errors of statements of the body that did not parse; each
    /// such statement is in `body` as a poisoned `let` (or left out), so
    /// that the checker still reports independent mistakes after it.
    pub errors: Option<syn::Error>,
}

/// A method beside `fn forward`: Flax's `encode`, `decode`, `generate`.
pub struct Method {
    /// Its name.
    pub name: syn::Ident,
    /// Its inputs, as `fn forward`'s.
    pub inputs: Vec<InputDecl>,
    /// Its body.
    pub body: Block,
    /// Its doc attributes.
    pub docs: Vec<syn::Attribute>,
}

/// `x: Input<1, 28, 28>`, `tokens: Tokens<16>`, `mask: Mask<16, 16>`.
pub struct InputDecl {
    /// The variable name.
    pub var: syn::Ident,
    /// What the tensor holds.
    pub elem: Elem,
    /// The declared per-example sizes.
    pub dims: Vec<usize>,
}

/// What a tensor of the model holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// Numbers of the model's dtype (`Input<..>`, every layer's output).
    Float,
    /// Token ids, `usize` (`Tokens<..>`).
    Index,
    /// A mask, `bool`, true where attention may look (`Mask<..>`).
    Bool,
}

impl Elem {
    /// The declaration's type name.
    pub fn decl(self) -> &'static str {
        match self {
            Elem::Float => "Input",
            Elem::Index => "Tokens",
            Elem::Bool => "Mask",
        }
    }
}

/// `features: Param<64>`: a block parameter and its default.
pub struct ParamDecl {
    /// The parameter's name.
    pub name: syn::Ident,
    /// Its default, a constant expression.
    pub default: Expr,
}

/// `{ stmts; value }`.
pub struct Block {
    /// Statements, in order.
    pub stmts: Vec<Stmt>,
    /// The final expression (without `;`), if any.
    pub value: Option<Box<Expr>>,
    /// The closing brace, where a missing value is reported.
    pub close: Span,
}

/// A statement of a block.
pub enum Stmt {
    /// `let x = ..;` / `let mut x = ..;`
    Let {
        /// The bound name.
        var: syn::Ident,
        /// Whether it was declared `mut`.
        mutable: bool,
        /// Its value.
        value: Expr,
    },
    /// `let (c, h, w) = x.shape;`: a tuple's elements bound to names
    /// (Python's `c, h, w = ...`), `_` skipping one.
    LetTuple {
        /// The bound names (`None` for `_`), each with its `mut`.
        vars: Vec<Option<(syn::Ident, bool)>>,
        /// The tuple.
        value: Expr,
        /// The pattern, for messages.
        pat: TokenStream,
    },
    /// `x = ..;` (also `x += ..;`, desugared).
    Assign {
        /// The assigned variable.
        var: syn::Ident,
        /// The new value.
        value: Expr,
    },
    /// `for i in a..b { .. }`, unrolled when the macro expands.
    For {
        /// The loop variable (`None` for `_`).
        var: Option<syn::Ident>,
        /// The start of the range.
        start: Box<Expr>,
        /// The end of the range.
        end: Box<Expr>,
        /// `a..=b` rather than `a..b`.
        inclusive: bool,
        /// The body.
        body: Block,
        /// The whole loop, for messages.
        tokens: TokenStream,
    },
    /// `for x in t { .. }` or `for (i, x) in enumerate(t) { .. }` over a
    /// tuple known at expansion, unrolled.
    ForEach {
        /// The index variable of `enumerate`.
        index: Option<syn::Ident>,
        /// `enumerate(t, start)`'s first index (0 when left out).
        start: Option<Box<Expr>>,
        /// The element variable (`None` for `_`).
        var: Option<syn::Ident>,
        /// The tuple.
        items: Box<Expr>,
        /// The body.
        body: Block,
        /// The whole loop, for messages.
        tokens: TokenStream,
    },
    /// An expression evaluated for its effects (`if c { x = f(x); }`).
    Expr(Expr),
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `!b`
    Not,
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
    /// `**` (Python's power; Rust reads it as `* *`)
    Pow,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&&`
    And,
    /// `||`
    Or,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Pow => "**",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// `+ - * /`, the operators that also work on tensors.
    pub fn arith(self) -> Option<Arith> {
        match self {
            BinOp::Add => Some(Arith::Add),
            BinOp::Sub => Some(Arith::Sub),
            BinOp::Mul => Some(Arith::Mul),
            BinOp::Div => Some(Arith::Div),
            BinOp::Rem
            | BinOp::Pow
            | BinOp::Eq
            | BinOp::Ne
            | BinOp::Lt
            | BinOp::Le
            | BinOp::Gt
            | BinOp::Ge
            | BinOp::And
            | BinOp::Or => None,
        }
    }

    /// Whether it is one of `+ - * /`.
    pub fn is_arithmetic(self) -> bool {
        self.arith().is_some()
    }
}

/// The operators on tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `maximum(a, b)`
    Max,
    /// `minimum(a, b)`
    Min,
}

impl Arith {
    /// The operator or function as written.
    pub fn symbol(self) -> &'static str {
        match self {
            Arith::Add => "+",
            Arith::Sub => "-",
            Arith::Mul => "*",
            Arith::Div => "/",
            Arith::Max => "maximum",
            Arith::Min => "minimum",
        }
    }
}

/// A literal.
#[derive(Clone, Debug)]
pub enum Lit {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// `true` / `false`.
    Bool(bool),
    /// A string (`name = "head"`, `padding = "SAME"`).
    Str(String),
}

/// What a call calls, decided once by name when parsing.
pub enum Callee {
    /// A built-in layer.
    Layer(LayerKind),
    /// A built-in op.
    Op(OpKind),
    /// Another `#[compact]` model (`Block(features = 64)(x)`).
    Nested(syn::Path),
    /// A recurrent cell, the argument of `RNN(..)` (`LSTMCell(64)`).
    Cell(CellKind),
    /// One of Flax's initialisers (`xavier_uniform()`).
    Init(crate::symbol::InitKind),
    /// `param(name, init, shape)`: a declared parameter.
    Param,
    /// A builtin function of values and tensors (`maximum`, `len`).
    Builtin(crate::symbol::BuiltinKind),
    /// A name that is not a vocabulary word, called: a layer bound to a
    /// variable (`dense(x)`) if there is one, else the message.
    Local(syn::Ident, String),
    /// `embed.attend(x)`: the embedding table of the `Embed` bound to this
    /// variable, as the output layer.
    Attend(syn::Ident),
    /// `self.encoder(x)` / `self.encode(x)`: a layer bound in `fn setup`,
    /// or another method of the model, inlined.
    SelfCall(syn::Ident),
    /// `random.normal(shape)`: a draw from the device's generator.
    Draw(crate::symbol::DrawKind),
    /// A word that is neither; the message says what to write instead.
    Unknown(String),
}

/// An argument: `features = 10` or `10`.
pub struct Arg {
    /// The keyword, for keyword arguments.
    pub key: Option<syn::Ident>,
    /// The value.
    pub value: Expr,
}

/// A `match` arm.
pub struct Arm {
    /// The patterns (several for `a | b`); empty for `_` or a name.
    pub pats: Vec<Expr>,
    /// `n => ..`, `n if .. => ..`: the value bound to a name.
    pub bind: Option<syn::Ident>,
    /// `Some(n) => ..`: matches any value but `None`, bound to `n`.
    pub some: bool,
    /// An `if` guard.
    pub guard: Option<Expr>,
    /// The arm's value.
    pub body: Expr,
}

/// A part of a `format!` string.
pub enum Piece {
    /// Text as written.
    Text(String),
    /// A value, written as Rust's `Display` writes it.
    Value(Expr),
}

/// An expression of the model language.
pub enum Expr {
    /// An expression that did not parse (its error is in
    /// [`Model::errors`]): a value nothing more is said about.
    Poison(TokenStream),
    /// `format!("block_{i}")`: a string built at expansion.
    Format(Vec<Piece>, TokenStream),
    /// `a..b`, `a..`, `..b` inside an index: `x[1..]`.
    Range(Option<Box<Expr>>, Option<Box<Expr>>, TokenStream),
    /// A variable (`x`), or a bare word (`SAME`).
    Var(syn::Ident),
    /// `self.features`: a block parameter, Flax's spelling.
    SelfField(syn::Ident, TokenStream),
    /// A literal.
    Lit(Lit, TokenStream),
    /// `(a, b)` or `[a, b]`.
    Tuple(Vec<Expr>, TokenStream),
    /// `-x`, `!b`.
    Unary {
        /// The operator.
        op: UnOp,
        /// The operand.
        input: Box<Expr>,
        /// The whole expression.
        tokens: TokenStream,
    },
    /// `lhs op rhs`.
    Binary {
        /// The operator.
        op: BinOp,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
        /// The whole expression.
        tokens: TokenStream,
    },
    /// `x.shape`.
    Field {
        /// The value whose field is read.
        base: Box<Expr>,
        /// The field.
        member: syn::Ident,
        /// The whole expression.
        tokens: TokenStream,
    },
    /// `x.shape[-1]`, `t[0]`.
    Index {
        /// The indexed value.
        base: Box<Expr>,
        /// The index.
        index: Box<Expr>,
        /// The whole expression.
        tokens: TokenStream,
    },
    /// `Layer(args)(inputs)` (with `inputs`) or `op(args)` (without).
    Call {
        /// What is called.
        callee: Callee,
        /// The callee's name as written, for messages.
        name: TokenStream,
        /// Construction arguments (for an op: its input first).
        args: Vec<Arg>,
        /// For `Layer(..)(inputs)`: the inputs.
        inputs: Option<Vec<Arg>>,
        /// The whole call.
        tokens: TokenStream,
    },
    /// `remat(Block(..))(x)`: a transform of a layer call.
    Transform {
        /// The transform.
        kind: TransformKind,
        /// The transformed call, an [`Expr::Call`] with its inputs
        /// (`Block(..)(x)`).
        call: Box<Expr>,
        /// `remat(Block(..))`, for messages about the transform.
        word: TokenStream,
        /// The whole expression.
        tokens: TokenStream,
    },
    /// `if cond { .. } else { .. }`, decided when the macro expands.
    If {
        /// The condition.
        cond: Box<Expr>,
        /// The branch taken when it holds.
        then: Block,
        /// The `else` branch (a block or another `if`).
        els: Option<Box<Expr>>,
        /// The whole expression.
        tokens: TokenStream,
    },
    /// `match v { 1 => .., _ => .. }`, decided when the macro expands.
    Match {
        /// The matched value.
        scrutinee: Box<Expr>,
        /// The arms, in order.
        arms: Vec<Arm>,
        /// The whole expression.
        tokens: TokenStream,
    },
    /// `{ .. }`.
    Block(Block, TokenStream),
    /// `hs.push(h)` (a statement) or `hs.pop()`: a list (a tuple known at
    /// expansion, in a `let mut`) grown or shrunk in place.
    List {
        /// The list's variable.
        var: syn::Ident,
        /// The pushed value; `None` for `pop`.
        push: Option<Box<Expr>>,
        /// The whole call.
        tokens: TokenStream,
    },
}

impl Expr {
    /// The tokens of the expression, for messages.
    pub fn tokens(&self) -> TokenStream {
        match self {
            Expr::Var(v) => v.to_token_stream(),
            Expr::Poison(t)
            | Expr::Format(_, t)
            | Expr::Range(_, _, t)
            | Expr::SelfField(_, t)
            | Expr::Lit(_, t)
            | Expr::Tuple(_, t)
            | Expr::Unary { tokens: t, .. }
            | Expr::Binary { tokens: t, .. }
            | Expr::Field { tokens: t, .. }
            | Expr::Index { tokens: t, .. }
            | Expr::Call { tokens: t, .. }
            | Expr::Transform { tokens: t, .. }
            | Expr::If { tokens: t, .. }
            | Expr::Match { tokens: t, .. }
            | Expr::Block(_, t)
            | Expr::List { tokens: t, .. } => t.clone(),
        }
    }

    /// How messages name the value: `` `x` `` for a variable or a short
    /// expression, else "its input".
    pub fn describe(&self) -> String {
        let text = compact_text(&self.tokens());
        if text.len() <= 40 {
            format!("`{text}`")
        } else {
            "its input".to_string()
        }
    }
}

/// Source-like text of tokens: `Block()(x)` rather than `Block () (x)`.
pub fn compact_text(tokens: &TokenStream) -> String {
    let raw = tokens.to_string();
    let chars: Vec<char> = raw.chars().collect();
    let mut out = String::with_capacity(raw.len());
    for (i, c) in chars.iter().enumerate() {
        if *c == ' ' {
            let prev = if i > 0 { chars[i - 1] } else { ' ' };
            let next = chars.get(i + 1).copied().unwrap_or(' ');
            // A sign glues to its number: `(- 1)` is `(-1)`, `a - b` stays.
            let sign =
                matches!(prev, '-' | '!') && (i < 2 || matches!(chars[i - 2], '(' | '[' | ','));
            if sign
                || matches!(next, '(' | ')' | ',' | '.' | ']' | '[')
                || matches!(prev, '(' | '[' | '.')
            {
                continue;
            }
        }
        out.push(*c);
    }
    out
}
