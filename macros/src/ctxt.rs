//! One context that collects every error of an expansion (serde's `Ctxt`):
//! checks push errors and go on, and the driver turns them into one
//! `syn::Error` at the end, so a user sees each independent mistake once.

use quote::ToTokens;
use std::collections::HashSet;
use std::fmt::Display;
use syn::Error;

/// The errors found so far.
#[derive(Default)]
pub struct Ctxt {
    errors: Option<Error>,
    /// Each recorded error's place and message: a nested model's mistake
    /// comes back from every instance of it, and is reported once.
    seen: HashSet<String>,
}

impl Ctxt {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the errors of `e` not recorded yet (the same message at the
    /// same place is one mistake).
    pub fn push(&mut self, e: Error) {
        self.push_new(e);
    }

    /// [`push`](Self::push), telling whether any error of `e` was new.
    pub fn push_new(&mut self, e: Error) -> bool {
        let mut new = false;
        for one in e {
            if !self.seen.insert(format!("{:?} {one}", one.span())) {
                continue;
            }
            new = true;
            match &mut self.errors {
                Some(a) => a.combine(one),
                None => self.errors = Some(one),
            }
        }
        new
    }

    /// Adds an error at the tokens `at`.
    pub fn error_at<T: ToTokens, M: Display>(&mut self, at: T, msg: M) {
        self.push(Error::new_spanned(at, msg));
    }

    /// Records the error of a result and returns its value.
    pub fn take<T>(&mut self, r: syn::Result<T>) -> Option<T> {
        r.map_err(|e| self.push(e)).ok()
    }

    /// Whether an error was recorded.
    pub fn has_errors(&self) -> bool {
        self.errors.is_some()
    }

    /// `Err` with every error, or `Ok(())`.
    pub fn check(self) -> syn::Result<()> {
        match self.errors {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
