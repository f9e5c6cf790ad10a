//! `scan!(K, step, state, batches)`: parse, check and expand in one small
//! module (the input is four expressions; there is no shape inference).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Expr, Token};

/// Unrolling writes out one call per step; past this the generated code
/// (and compile time) grows for no gain, so larger K must be a `const` item.
const MAX_UNROLL: u64 = 256;

/// How many steps, as the user wrote it.
enum Steps {
    /// An integer literal: the macro writes out exactly this many calls.
    Literal(u64, Span),
    /// A path to a `const` item: its value is unknown to the macro.
    Const(syn::Path),
}

struct ScanInput {
    steps: Steps,
    step: Expr,
    state: Expr,
    batches: Expr,
}

impl Parse for ScanInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let call_span = input.span();
        let args = input.parse_terminated(Expr::parse, Token![,])?;
        if args.len() != 4 {
            let span = if args.is_empty() {
                call_span
            } else {
                args.span()
            };
            return Err(syn::Error::new(
                span,
                format!(
                    "`scan!` takes 4 arguments `scan!(K, step, state, batches)`, found {}",
                    args.len()
                ),
            ));
        }
        let mut args = args.into_iter();
        let k = args.next().unwrap_or_else(|| unreachable!("len checked"));
        let steps = parse_steps(k)?;
        let mut rest = args;
        let step = rest.next().unwrap_or_else(|| unreachable!("len checked"));
        let state = rest.next().unwrap_or_else(|| unreachable!("len checked"));
        let batches = rest.next().unwrap_or_else(|| unreachable!("len checked"));
        Ok(ScanInput {
            steps,
            step,
            state,
            batches,
        })
    }
}

fn parse_steps(k: Expr) -> syn::Result<Steps> {
    match k {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(lit),
            ..
        }) => {
            let span = lit.span();
            let n: u64 = lit.base10_parse().map_err(|_| {
                syn::Error::new(span, "`scan!` needs K to be a non-negative integer")
            })?;
            if n == 0 {
                return Err(syn::Error::new(
                    span,
                    "`scan!` needs at least one step, but K = 0",
                ));
            }
            if n > MAX_UNROLL {
                return Err(syn::Error::new(
                    span,
                    format!(
                        "`scan!` unrolls K = {n} calls; at most {MAX_UNROLL} are written out \
                         \n= help: put a larger K in a `const` item: `const K: usize = {n};`"
                    ),
                ));
            }
            Ok(Steps::Literal(n, span))
        }
        Expr::Path(p) if p.qself.is_none() => Ok(Steps::Const(p.path)),
        Expr::Paren(p) => parse_steps(*p.expr),
        Expr::Group(g) => parse_steps(*g.expr),
        other => Err(syn::Error::new(
            other.span(),
            "`scan!` needs K to be an integer literal or a `const` item, known at compile time",
        )),
    }
}

pub(crate) fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let ScanInput {
        steps,
        step,
        state,
        batches,
    } = syn::parse2(input)?;
    let rt = quote!(::flaxen::__private::flaxen_runtime::scan);
    match steps {
        Steps::Literal(k, k_span) => {
            let k_lit = syn::LitInt::new(&k.to_string(), k_span);
            let check = quote_spanned! {batches.span()=>
                #rt::assert_stacked::<#k_lit, _>(__batches);
            };
            // Spanned like the check, so that batches of the wrong shape
            // are one error, not one per use.
            let awake = quote_spanned! {batches.span()=>
                #rt::awake_for::<#k_lit, _>(__batches)
            };
            let losses: Vec<_> = (0..k).map(|i| format_ident!("__loss_{}", i)).collect();
            let slices = quote_spanned! {batches.span()=>
                ::core::iter::IntoIterator::into_iter(
                    <_ as #rt::Stacked<#k_lit>>::steps(__batches),
                )
            };
            let calls = losses.iter().map(|loss| {
                quote_spanned! {step.span()=>
                    let (__state, #loss) = #rt::call_step(
                        &mut __step,
                        __state,
                        ::core::iter::Iterator::next(&mut __slices)
                            .expect("`Stacked::steps` gives K slices"),
                    );
                }
            });
            Ok(quote! {{
                let __batches = &(#batches);
                #check
                #[allow(unused_mut)]
                let mut __step = #step;
                let __state = #state;
                // On the CPU, rayon's threads stay awake for the K steps.
                let __awake = #awake;
                // Every slice at once: a CPU stack is read once, not K times.
                let mut __slices = #slices;
                #(#calls)*
                ::core::mem::drop(__awake);
                (__state, #rt::stack_losses([#(#losses),*]))
            }})
        }
        Steps::Const(path) => {
            // `{ K }` accepts a `const` item and a const generic parameter;
            // a runtime value fails here with rustc's "non-constant value".
            let k = quote_spanned! {path.span()=> { #path }};
            Ok(quote! {
                #rt::scan_const::<#k, _, _, _, _, _>(#step, #state, &(#batches))
            })
        }
    }
}
