//! Robustness and behaviour of parse → check → expand on token streams,
//! without a compiler in the loop: the macro must never panic, and must
//! produce either code or errors (as `compile_error!`s, beside stubs).

use proc_macro2::{TokenStream, TokenTree};
use quote::quote;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The expansion, or its text when it holds errors.
fn run(attr: TokenStream, item: TokenStream) -> Result<TokenStream, String> {
    match crate::compact::compact(attr, item) {
        Ok(ts) if ts.to_string().contains("compile_error") => Err(ts.to_string()),
        Ok(ts) => Ok(ts),
        Err(e) => Err(e.to_compile_error().to_string()),
    }
}

/// `resume` with `Block`'s source delivered for `item`.
fn resume(block: &TokenStream, item: TokenStream) -> Result<String, String> {
    let out = crate::compact::resume(quote!({ #block } "Block" { #item } { }))
        .map_err(|e| e.to_compile_error().to_string())?
        .to_string();
    if out.contains("compile_error") {
        Err(out)
    } else {
        Ok(out)
    }
}

fn seed() -> TokenStream {
    quote! {
        impl Cnn {
            fn forward(x: Input<1, 28, 28>, width: Param<64>) {
                let x = Conv(features = 32, kernel_size = (3, 3))(x);
                let x = relu(x);
                let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
                let mut x = Conv(width, (3, 3), strides = 1, padding = ((1, 1), (1, 1)))(x);
                for i in 0..2 {
                    if i == 0 { x = relu(x); } else { x = BatchNorm()(x); }
                }
                let y = max_pool(x, (2, 2), (2, 2), SAME);
                let y = x * 0.5 - 1.0;
                let y = match width { 64 => BatchNorm()(y) + Block(name = "b")(y), _ => y };
                let x = flatten(y);
                let x = Dropout(0.5)(gelu(Dense(features = 256)(x)));
                log_softmax(Dense(features = 10, use_bias = false)(-x))
            }
        }
    }
}

#[test]
fn seed_expands() {
    let block = quote!(impl Block { fn forward(x: Input<64, 14, 14>) { relu(x) } });
    let text = resume(&block, seed()).expect("the seed model is valid");
    assert!(text.contains("CnnModule"));
    assert!(text.contains("Conv2D < 32 , 64 , 3 , 3 , 1 , 1 , 1 , 1 , 1 , 1 , 14 , 14 , 14 , 14"));
    assert!(
        text.contains("batch_norm_1"),
        "loop and match both add a BatchNorm"
    );
}

#[test]
fn collecting_asks_for_nested_sources() {
    let out = crate::compact::compact(TokenStream::new(), seed())
        .unwrap()
        .to_string();
    assert!(out.starts_with("Block ! { @ source"), "{out}");
}

#[test]
fn errors_are_collected() {
    let item = quote! {
        impl M {
            fn forward(x: Input<1, 8, 8>) {
                let a = Dense(0)(x);
                let b = Conv(8, (9, 9), padding = VALID)(x);
                let c = rleu(x);
                x
            }
        }
    };
    let err = run(TokenStream::new(), item).unwrap_err();
    assert_eq!(err.matches("compile_error").count(), 4, "{err}");
    assert!(err.contains("MModule"), "stubs are emitted: {err}");
}

/// A small deterministic generator (no dependency on `rand`).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// Flattens a token stream to leaves, so mutations can break groups too.
fn leaves(ts: TokenStream, out: &mut Vec<String>) {
    for t in ts {
        match t {
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    proc_macro2::Delimiter::Parenthesis => ("(", ")"),
                    proc_macro2::Delimiter::Brace => ("{", "}"),
                    proc_macro2::Delimiter::Bracket => ("[", "]"),
                    proc_macro2::Delimiter::None => ("", ""),
                };
                out.push(open.into());
                leaves(g.stream(), out);
                out.push(close.into());
            }
            other => out.push(other.to_string()),
        }
    }
}

#[test]
fn mutated_token_streams_never_panic() {
    let mut base = Vec::new();
    leaves(seed(), &mut base);
    let extra = [
        "0",
        "-",
        "(",
        ")",
        ",",
        "=",
        "Input",
        "x",
        "Dense",
        "relu",
        "let",
        ";",
        "18446744073709551616",
        "1e400",
        "\"\"",
        "SAME",
        "&",
        "self",
        "<",
        ">",
        "0.0",
        "Block",
        "::",
        "remat",
    ];
    let mut rng = Lcg(7);
    let mut parsed = 0;
    for _ in 0..3000 {
        let mut toks = base.clone();
        for _ in 0..1 + rng.next(3) {
            let i = rng.next(toks.len());
            match rng.next(3) {
                0 => {
                    toks.remove(i);
                }
                1 => toks.insert(i, extra[rng.next(extra.len())].to_string()),
                _ => toks[i] = extra[rng.next(extra.len())].to_string(),
            }
        }
        let src = toks.join(" ");
        // Unbalanced delimiters do not even lex; a proc macro never sees them.
        let Ok(ts) = src.parse::<TokenStream>() else {
            continue;
        };
        parsed += 1;
        let r = catch_unwind(AssertUnwindSafe(|| run(TokenStream::new(), ts)));
        assert!(r.is_ok(), "panicked on: {src}");
    }
    assert!(parsed > 1000);
}

/// Lines of `malformed_inputs_give_errors` that are not errors of the
/// macro: a CamelCase name is the user's own model, whose source is asked
/// for (rustc reports a model that does not exist).
const NESTED: &[&str] = &[
    "impl S { fn forward(x: Input<3>) { Conv2()(x) } }",
    "impl S { fn forward(x: Input<3>) { Relu()(x) } }",
];

#[test]
fn malformed_inputs_give_errors() {
    assert!(run(quote!(foo), seed()).is_err(), "attribute arguments");
    // One impl block per line; every one is a mistake.
    let cases = r#"
        struct S;
        impl Tr for S { fn forward(x: Input<1>) { x } }
        impl<T> S<T> { fn forward(x: Input<1>) { x } }
        impl S {}
        impl S { fn forward() { 1 } }
        impl S { fn forward(x: Input<>) { x } }
        impl S { fn forward(x: Input<1, 2, 3, 4>) { x } }
        impl S { fn forward(x: Input<99999999999999999999999>) { x } }
        impl S { fn forward(m: Mask<2, 2>, x: Input<1>) { x } }
        impl S { fn forward(t: Tokens<2, 2>) { Embed(4, 2)(t) } }
        impl S { fn forward(x: Input<2>, k: Param<1>, y: Input<1>) { x } }
        impl S { fn forward(t: Tokens<3>) { t } }
        impl S { fn forward(t: Tokens<3>) { relu(t) } }
        impl S { fn forward(x: Input<3, 4>) { Embed(4, 2)(x) } }
        impl S { fn forward(x: Input<3, 4>, m: Mask<3, 4>) { SelfAttention(2)(x, mask = m) } }
        impl S { fn forward(x: Input<3, 4>, m: Mask<3, 3>) { SelfAttention(2)(x, m) } }
        impl S { fn forward(x: Input<3, 4>, m: Mask<3, 3>) { SelfAttention(2)(x, mask = x) } }
        impl S { fn forward(x: Input<3, 4>) { make_attention_mask(x, x) } }
        impl S { fn forward(x: Input<3, 4>) { x[3] } }
        impl S { fn forward(x: Input<4>) { x[0] } }
        impl S { fn forward(x: Input<3, 4>) { swapaxes(x, -1, -3) } }
        impl S { fn forward(x: Input<1>) -> u8 { x } }
        impl S { fn forward(&mut self, x: Input<1>) { x } }
        impl S { fn forward(x: Input<1>) { let y; x } }
        impl S { fn forward(x: Input<1>) { let (a, b) = x; x } }
        impl S { fn forward(x: Input<1>) { x.relu() } }
        impl S { fn forward(x: Input<1>) { 1.0 } }
        impl S { fn forward(x: Input<1>) { 1.0 / x } }
        impl S { fn forward(x: Input<1>) { x % x } }
        impl S { fn forward(x: Input<1>) { Dense(10)() } }
        impl S { fn forward(x: Input<1>) { Dense(10)(x, x) } }
        impl S { fn forward(x: Input<1>) { relu() } }
        impl S { fn forward(x: Input<1>) { relu(k = x) } }
        impl S { fn forward(x: Input<1>) { Dense(18446744073709551615)(x) } }
        impl S { fn forward(x: Input<18446744073709551615, 2, 2>) { flatten(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, (1, 2, 3))(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, 3, padding = ((1, 2, 3), 1))(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, 3, padding = -1)(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, 3, use_bias = 2)(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { LayerNorm()(x) } }
        impl S { fn forward(x: Input<3, 4>) { BatchNorm()(x) } }
        impl S { fn forward(x: Input<3>) { Dropout(rate = x)(x) } }
        impl S { fn forward(x: Input<3>) { Dense(2, name = "a b")(x) } }
        impl S { fn forward(x: Input<3>) { Dense(2, name = 3)(x) } }
        impl S { fn forward(x: Input<3>) { a::b(x) } }
        impl S { fn forward(x: Input<3>) { Relu()(x) } }
        impl S { fn forward(x: Input<3>) { relu(2.0) } }
        impl S { fn forward(x: Input<3>) { x; x } }
        impl S { fn forward(x: Input<3>) { fn f() {} x } }
        impl S { fn forward(x: Input<3>) { x * 1e400 } }
        impl S { fn forward(x: Input<3>) { x * (1e300 * 1e300) } }
        impl S { fn forward(x: Input<3>) { x * (1.0 / 0.0) } }
        impl S { fn forward(x: Input<3>) { LayerNorm(epsilon = 1e999)(x) } }
        impl S { fn forward(x: Input<3>) { Conv2()(x) } }
        impl S { fn forward(x: Input<3>, k: usize) { x } }
        impl S { fn forward(x: Input<3>, k: Param<1, 2>) { x } }
        impl S { fn forward(x: Input<3>) { $x } }
        impl S { fn forward(x: Input<3>) { Dense(2, name = "d")(Dense(2, name = "d")(x)) } }
        impl S { fn forward(x: Input<3>) { let x = x; x = relu(x); x } }
        impl S { fn forward(x: Input<3>) { for i in 0..x { } x } }
        impl S { fn forward(x: Input<3>) { for i in 0.. { } x } }
        impl S { fn forward(x: Input<3>) { for i in 0..100000 { } x } }
        impl S { fn forward(x: Input<3>) { while true { } x } }
        impl S { fn forward(x: Input<3>) { if x { x } else { x } } }
        impl S { fn forward(x: Input<3>) { if 1 { x } else { x } } }
        impl S { fn forward(x: Input<3>) { if true { Dense(2)(x) } } }
        impl S { fn forward(x: Input<3>) { match 3 { 1 => x } } }
        impl S { fn forward(x: Input<3>) { match x { _ => x } } }
        impl S { fn forward(x: Input<3>) { Dense(x.shape[0])(x) } }
        impl S { fn forward(x: Input<3>) { Dense(x.shape[-2])(x) } }
        impl S { fn forward(x: Input<3>) { Dense(x.shape)(x) } }
        impl S { fn forward(x: Input<3>) { Dense(1 / 0)(x) } }
        impl S { fn forward(x: Input<3>) { Dense(9223372036854775807 + 1)(x) } }
        impl S { fn forward(x: Input<3>) { Dense(-3)(x) } }
        impl S { fn forward(x: Input<3>) { Dense(self.k)(x) } }
        impl S { fn forward(x: Input<3>) { x[0] } }
        impl S { fn forward(x: Input<3>) { return x; } }
        impl S { fn forward(x: Input<3>) { nn.Dense(3)(x) } }
        impl S { fn forward(x: Input<3>) { nn::relu(x) } }
        impl S { fn forward(x: Input<3>) { Sequential()(x) } }
        impl S { fn forward(x: Input<3>) { Dropout(0.5, deterministic = true)(x) } }
        impl S { fn forward(x: Input<3>, train: bool) { x } }
        impl S { fn forward(x: Input<28, 28, 1>) { x } }
        impl S { fn forward(x: Input<2, 4, 4>) { concatenate((x, x), axis = -1) } }
        impl S { fn forward(x: Input<2, 4, 4>) { softmax(x) } }
        impl S { fn forward(x: Input<2, 4, 4>) { reshape(x, (5, 5)) } }
        impl S { fn forward(x: Input<2, 4, 4>) { reshape(x, (-1, -1)) } }
        impl S { fn forward(x: Input<3>) { x.reshape(3) } }
        impl S { fn forward(x: Input<3>, f: Param<x>) { x } }
        impl S { fn forward(x: Input<3>) { let x = { Dense(2)(x); }; x } }
        impl S { fn forward(x: Input<3>) { remat(Dense(2)) } }
        impl S { fn forward(x: Input<3>) { remat(x) } }
        impl S { fn forward(x: Input<3>) { remat()(x) } }
        impl S { fn forward(x: Input<3>) { remat(relu)(x) } }
        impl S { fn forward(x: Input<3>) { remat(Dense)(x) } }
        impl S { fn forward(x: Input<3>) { remat(Dense)(2)(x) } }
        impl S { fn forward(x: Input<3>) { remat(Dense(2), policy = 1)(x) } }
        impl S { fn forward(x: Input<3>) { remat(Dense(2), Dense(2))(x) } }
        impl S { fn forward(x: Input<3>) { remat(Dense(2))() } }
        impl S { fn forward(x: Input<3>) { remat(Dense(2)(x))(x) } }
        impl S { fn forward(x: Input<3>) { remat(remat(Dense(2)))(x) } }
        impl S { fn forward(x: Input<3>) { remat(Dropout(0.5))(x) } }
        impl S { fn forward(x: Input<3>) { remat(relu(x))(x) } }
        impl S { fn forward(x: Input<3>) { nn.remat(Dense(2))(x) } }
        impl S { fn forward(t: Tokens<3>) { remat(Embed(4, 2))(t) } }
        impl S { fn forward(x: Input<3, 4>) { remat(SelfAttention(2, dropout_rate = 0.1))(x) } }
    "#;
    for line in cases.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let item: TokenStream = line.parse().expect("lexes");
        match catch_unwind(AssertUnwindSafe(|| run(TokenStream::new(), item))) {
            Ok(Err(e)) => assert!(e.contains("compile_error"), "{line}: {e}"),
            // A CamelCase name applied as a layer asks for that model's
            // source; rustc reports it if there is none.
            Ok(Ok(out)) if NESTED.contains(&line) => {
                assert!(out.to_string().contains("@ source"), "{line}: {out}")
            }
            Ok(Ok(_)) => panic!("should be an error: {line}"),
            Err(_) => panic!("panicked: {line}"),
        }
    }
}

#[test]
fn auto_name_taken_by_explicit_name() {
    let item = quote!(impl S { fn forward(x: Input<3>) { Dense(2)(Dense(2, name = "dense_1")(Dense(2)(x))) } });
    let err = run(TokenStream::new(), item).unwrap_err();
    assert!(err.contains("automatic name `dense_1`"), "{err}");
}

#[test]
fn names_follow_construction_order() {
    // Python constructs the outer `Dense` first: it is `Dense_0`.
    let item = quote!(impl S { fn forward(x: Input<3>) { Dense(2)(Dense(5)(x)) } });
    let out = run(TokenStream::new(), item).unwrap().to_string();
    assert!(
        out.contains(
            "pub dense_0 : :: flaxen :: __private :: flaxen_runtime :: layers :: Dense < 5 , 2"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "pub dense_1 : :: flaxen :: __private :: flaxen_runtime :: layers :: Dense < 3 , 5"
        ),
        "{out}"
    );
}

#[test]
fn nested_models_are_instantiated() {
    let block = quote! {
        impl Block {
            fn forward(x: Input<4>, features: Param<8>, k: Param<{ (3, 3) }>) {
                relu(Dense(features)(x))
            }
        }
    };
    let net = |call: TokenStream| quote!(impl Net { fn forward(x: Input<16>) { let y = #call; Dense(2)(y) } });
    let out = resume(&block, net(quote!(Block(features = 32)(x)))).unwrap();
    assert!(
        out.contains("Dense < 16 , 32"),
        "input shape and parameter used"
    );
    assert!(
        out.contains("Dense < 32 , 2"),
        "the instance's output shape is known"
    );
    let err = resume(&block, net(quote!(Block(featurs = 32)(x)))).unwrap_err();
    assert!(err.contains("no parameter `featurs`"), "{err}");
    assert!(!err.contains("in this instance"), "{err}");
    let err = resume(&block, net(quote!(Block(features = 0)(x)))).unwrap_err();
    assert!(err.contains("in this instance of `Block`"), "{err}");
    // Positional parameters in declaration order; no arguments: defaults,
    // for the caller's shape.
    assert!(resume(&block, net(quote!(Block(4)(x))))
        .unwrap()
        .contains("Dense < 16 , 4"));
    assert!(resume(&block, net(quote!(Block()(x))))
        .unwrap()
        .contains("Dense < 16 , 8"));
    assert!(resume(&block, net(quote!(Block(1, 2, 3)(x)))).is_err());
    // As written, the defaults apply.
    let own = run(TokenStream::new(), block).unwrap().to_string();
    assert!(own.contains("Dense < 4 , 8"));
    assert!(own.contains("macro_rules ! __flaxen_compact_Block"));
}

#[test]
fn remat_wraps_the_field_under_its_own_name() {
    let item = quote!(impl S { fn forward(x: Input<3>) { remat(BatchNorm(momentum = 0.9))(remat(Dense(4))(x)) } });
    let out = run(TokenStream::new(), item).unwrap().to_string();
    assert!(
        out.contains("pub dense_0 : :: flaxen :: __private :: flaxen_runtime :: layers :: Remat < :: flaxen :: __private :: flaxen_runtime :: layers :: Dense < 3 , 4"),
        "{out}"
    );
    // Flax's settings reach the wrapped layer.
    assert!(
        out.contains("let __f = & mut __f . inner ; __f . momentum = 0.9f64"),
        "{out}"
    );
    let block = quote!(impl Block { fn forward(x: Input<4>) { relu(BatchNorm()(Dense(8)(x))) } });
    let net = |call: TokenStream| quote!(impl Net { fn forward(x: Input<16>) { let y = #call; Dense(2)(y) } });
    let out = resume(&block, net(quote!(remat(Block())(x)))).unwrap();
    assert!(out.contains("pub block_0 : :: flaxen :: __private :: flaxen_runtime :: layers :: Remat < < __Net_block_0"), "{out}");
    // The profiler names the block's calls under it, as without `remat`.
    assert!(out.contains("enter_block (\"block_0\")"), "{out}");
    let dropping = quote!(impl Block { fn forward(x: Input<4>) { Dropout(0.1)(Dense(8)(x)) } });
    let err = resume(&dropping, net(quote!(remat(Block())(x)))).unwrap_err();
    assert!(
        err.contains("cannot recompute `Block`: it applies `Dropout(0.1)`"),
        "{err}"
    );
    assert!(resume(&dropping, net(quote!(Block()(x)))).is_ok());
}
