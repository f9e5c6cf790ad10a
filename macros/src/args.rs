//! Binding a call's arguments to a signature: keyword and positional (in
//! Flax's order), with every mistake reported at its argument.

use crate::ctxt::Ctxt;
use crate::symbol;
use crate::value::ArgVal;
use proc_macro2::TokenStream;
use std::collections::BTreeMap;
use syn::Error;

/// The arguments a layer or op takes.
pub struct Sig {
    /// Argument names in Flax's positional order; `name`, and any after
    /// it, are keyword-only.
    pub params: &'static [&'static str],
    /// The required ones.
    pub required: &'static [&'static str],
    /// A complete call, shown when a required argument is missing (`NAME`
    /// stands for the word, for signatures several words share).
    pub example: &'static str,
}

/// Keywords of Flax's modules that flaxen does without, and why.
pub fn flax_only(key: &str) -> Option<&'static str> {
    Some(match key {
        "deterministic" | "use_running_average" | "train" | "training" => "modes come from the call, not from a flag: `model.forward(x)` runs inference (Dropout off, BatchNorm on its running statistics), `model.forward_mut(x)` with a tape trains (Dropout on, BatchNorm on batch statistics)",
        "dtype" | "param_dtype" | "precision" => "the dtype is the one the module is built with (`dev.build_module::<Model, f32>()`)",
        "rngs" | "rng_collection" => "Dropout draws from the device's seeded generator",
        "initial_carry" => "an `RNN` starts from Flax's default zero carry; a given initial carry is not supported yet",
        _ => return None,
    })
}

/// The values bound to a signature's names.
pub struct Bound<'a> {
    map: BTreeMap<&'static str, &'a ArgVal>,
}

impl<'a> Bound<'a> {
    /// The argument bound to `name`.
    pub fn get(&self, name: &str) -> Option<&'a ArgVal> {
        self.map.get(name).copied()
    }

    /// Whether `name` was given.
    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// The value of `name` read by `read`, or `default` when not given;
    /// `None` (with the error recorded) when it is invalid.
    pub fn or<T>(
        &self,
        cx: &mut Ctxt,
        name: &str,
        default: T,
        read: impl FnOnce(&ArgVal) -> syn::Result<T>,
    ) -> Option<T> {
        match self.get(name) {
            Some(a) => cx.take(read(a)),
            None => Some(default),
        }
    }

    /// The value of a required `name` (its absence is reported by `bind`).
    pub fn req<T>(
        &self,
        cx: &mut Ctxt,
        name: &str,
        read: impl FnOnce(&ArgVal) -> syn::Result<T>,
    ) -> Option<T> {
        self.get(name).and_then(|a| cx.take(read(a)))
    }
}

/// Matches arguments to `sig`, reporting unknown keywords (with the valid
/// ones), too many positionals, duplicates and missing required arguments.
pub fn bind<'a>(
    what: &str,
    sig: &Sig,
    args: &'a [ArgVal],
    call: &TokenStream,
    cx: &mut Ctxt,
) -> Bound<'a> {
    let names = sig.params;
    let positional: Vec<&'static str> =
        names.iter().copied().take_while(|n| *n != "name").collect();
    let mut map: BTreeMap<&'static str, &'a ArgVal> = BTreeMap::new();
    let mut seen_keyword = false;
    let mut misplaced = false;
    let mut pos = 0;
    for a in args {
        let slot = match &a.key {
            Some(k) => {
                seen_keyword = true;
                let key = k.to_string();
                match names.iter().find(|n| **n == key) {
                    Some(n) => Some(*n),
                    None => {
                        let msg = match flax_only(&key) {
                            Some(why) => format!("drop `{key}`: {why}"),
                            None => {
                                let mut msg = if names.is_empty() {
                                    format!("`{what}` takes no arguments besides its input, but got `{key}`")
                                } else {
                                    format!("`{what}` has no argument `{key}`")
                                };
                                if let Some(s) = symbol::nearest(&key, names) {
                                    msg.push_str(&format!("; did you mean `{s}`?"));
                                }
                                if !names.is_empty() {
                                    msg.push_str(&format!(
                                        "\nhelp: the arguments of `{what}` are: {}",
                                        names.join(", ")
                                    ));
                                }
                                msg
                            }
                        };
                        cx.push(Error::new(k.span(), msg));
                        misplaced = true;
                        None
                    }
                }
            }
            None if seen_keyword => {
                cx.error_at(a, "positional arguments must come before keyword arguments");
                misplaced = true;
                None
            }
            None => {
                let n = positional.get(pos).copied();
                pos += 1;
                if n.is_none() {
                    let msg = if positional.is_empty() {
                        format!("`{what}` takes no positional arguments besides its input")
                    } else {
                        format!(
                            "`{what}` takes at most {} positional argument(s): {}",
                            positional.len(),
                            positional.join(", ")
                        )
                    };
                    cx.error_at(a, msg);
                    misplaced = true;
                }
                n
            }
        };
        if let Some(n) = slot {
            if map.insert(n, a).is_some() {
                cx.push(Error::new(a.span(), format!("`{n}` is given twice")));
            }
        }
    }
    // A misplaced or misspelt argument usually is the missing one: report
    // only that.
    if !misplaced {
        for r in sig.required {
            if !map.contains_key(r) {
                cx.error_at(
                    call,
                    format!(
                        "missing required argument: `{what}` needs `{r}`, e.g. `{}`",
                        sig.example.replace("NAME", what)
                    ),
                );
            }
        }
    }
    Bound { map }
}
