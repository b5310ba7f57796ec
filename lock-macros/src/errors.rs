//! Collects independent compile errors so one build reports all of them.

/// Zero or more errors, combined into one `syn::Error` (which renders as several).
#[derive(Debug, Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(err),
            None => self.0 = Some(err),
        }
    }

    /// Adds `err` when there is one.
    pub fn extend(&mut self, err: Option<syn::Error>) {
        if let Some(err) = err {
            self.push(err);
        }
    }

    /// Adds a last error after which nothing more can be checked, and returns them all.
    pub fn stop(mut self, err: syn::Error) -> syn::Error {
        self.push(err);
        match self.0 {
            Some(all) => all,
            None => unreachable_none(),
        }
    }

    pub fn finish(self) -> Option<syn::Error> {
        self.0
    }
}

/// `push` always leaves `Some`; kept out of line so `stop` reads plainly.
fn unreachable_none() -> syn::Error {
    syn::Error::new(
        proc_macro2::Span::call_site(),
        "internal error in #[redis_locked]",
    )
}
