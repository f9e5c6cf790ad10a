//! Robustness and behaviour of parse → check → expand on token streams,
//! without a compiler in the loop: the macro must never panic, and must
//! produce either code or errors.

use proc_macro2::{TokenStream, TokenTree};
use quote::quote;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn run(attr: TokenStream, item: TokenStream) -> Result<TokenStream, String> {
    let r = parse_and_expand(attr, item);
    r.map_err(|e| e.to_compile_error().to_string())
}

fn parse_and_expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    crate::nest::compact(attr, item)
}

fn seed() -> TokenStream {
    quote! {
        impl Cnn {
            fn forward(x: Input<1, 28, 28>) {
                let x = Conv(features = 32, kernel_size = (3, 3))(x);
                let x = relu(x);
                let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
                let x = Conv(64, (3, 3), strides = 1, padding = ((1, 1), (1, 1)))(x);
                let y = max_pool(x, (2, 2), (2, 2), SAME);
                let y = x * 0.5 - 1.0;
                let y = BatchNorm()(y) + Block(name = "b")(y);
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
    let item = seed();
    let out = crate::nest::resume(quote!({ #block } "Block" { #item } { }))
        .expect("the seed model is valid");
    let text = out.to_string();
    assert!(text.contains("CnnModule"));
    assert!(text.contains("Conv2D < 32 , 64 , 3 , 3 , 1 , 1 , 1 , 1 , 1 , 1 , 14 , 14 , 14 , 14"));
}

#[test]
fn path_escapes_the_typo_check() {
    let item = quote!(impl S { fn forward(x: Input<3>) { self::Conv2()(x) } });
    assert!(run(TokenStream::new(), item).is_ok());
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
        impl S { fn forward(x: Input<1>, y: Input<1>) { x } }
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
        impl S { fn forward(x: Input<1>) { Dense(usize::MAX)(x) } }
        impl S { fn forward(x: Input<18446744073709551615, 2, 2>) { flatten(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, (1, 2, 3))(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, 3, padding = ((1, 2, 3), 1))(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, 3, padding = -1)(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, 3, use_bias = 2)(x) } }
        impl S { fn forward(x: Input<3, 4, 4>) { Conv(8, 3, use_bias = false)(x) } }
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
    "#;
    for line in cases.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let item: TokenStream = line.parse().expect("lexes");
        match catch_unwind(AssertUnwindSafe(|| run(TokenStream::new(), item))) {
            Ok(Err(e)) => assert!(e.contains("compile_error"), "{line}: {e}"),
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
fn nested_models_are_instantiated() {
    let block = quote! {
        impl Block {
            fn forward(x: Input<4>, features: Param<8>, k: Param<{ (3, 3) }>) {
                relu(Dense(features)(x))
            }
        }
    };
    let net = |call: TokenStream| quote!(impl Net { fn forward(x: Input<16>) { let y = #call; Dense(2)(y) } });
    // First the outer model asks `Block` for its source ...
    let first =
        crate::nest::compact(TokenStream::new(), net(quote!(Block(features = 32)(x)))).unwrap();
    assert!(first.to_string().starts_with("Block ! { @ source"));
    // ... which comes back through `compact_resume!`.
    let resume = |call: TokenStream| {
        let item = net(call);
        crate::nest::resume(quote!({ #block } "Block" { #item } { }))
    };
    let out = resume(quote!(Block(features = 32)(x))).unwrap().to_string();
    assert!(
        out.contains("Dense < 16 , 32"),
        "input shape and parameter substituted"
    );
    assert!(
        out.contains("Dense < 32 , 2"),
        "the instance's output shape is known"
    );
    let err = resume(quote!(Block(featurs = 32)(x)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no parameter `featurs`"), "{err}");
    assert!(resume(quote!(Block(features = 0)(x))).is_err());
    assert!(resume(quote!(Block(4)(x)))
        .unwrap_err()
        .to_string()
        .contains("by name"));
    let err = resume(quote!(Block()(x))).unwrap_err().to_string();
    assert!(err.contains("takes input of shape [4]"), "{err}");
    // As written, the defaults apply.
    let own = crate::nest::compact(TokenStream::new(), block)
        .unwrap()
        .to_string();
    assert!(own.contains("Dense < 4 , 8"));
    assert!(own.contains("macro_rules ! __flaxen_compact_Block"));
}
