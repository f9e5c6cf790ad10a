//! One context that collects every error of an expansion (serde's `Ctxt`):
//! checks push errors and go on, and the driver turns them into one
//! `syn::Error` at the end, so a user sees each independent mistake once.

use quote::ToTokens;
use std::fmt::Display;
use syn::Error;

/// The errors found so far.
#[derive(Default)]
pub struct Ctxt {
    errors: Option<Error>,
}

impl Ctxt {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an error.
    pub fn push(&mut self, e: Error) {
        match &mut self.errors {
            Some(a) => a.combine(e),
            None => self.errors = Some(e),
        }
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
