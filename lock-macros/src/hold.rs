//! What the body runs under besides a plain lock: `permits = N` (a semaphore, with `weight
//! = W` permits per call), `mode = "read"|"write"` (a read-write lock) or `keys = [..]`
//! (several locks taken together), and the rules on combining them.

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprArray, ExprLit, Ident, Lit, LitStr};

use crate::template::Template;

/// The most permits a semaphore may have (`lock_core::MAX_PERMITS`).
pub(crate) const MAX_PERMITS: u64 = 1_000_000;

/// What the body runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// An exclusive lock on `key` (the default).
    Lock,
    /// One of N permits of a semaphore on `key`.
    Permits(u64),
    /// The shared side of a read-write lock on `key`.
    Read,
    /// The exclusive side of a read-write lock on `key`.
    Write,
    /// Every lock of `keys`, taken together.
    All,
}

/// The value of `permits`: an integer literal from 1 to [`MAX_PERMITS`].
pub(crate) fn permits(value: &Expr) -> syn::Result<u64> {
    let int = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int,
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => {
            return Err(syn::Error::new(
                text.span(),
                format!(
                    "`permits` takes an integer without quotes: `permits = {}`",
                    text.value()
                ),
            ))
        }
        other => {
            return Err(syn::Error::new(
                other.span(),
                "`permits` takes an integer literal, checked at compile time: `permits = 5` \
                 (at most 5 holders of the key at once)",
            ))
        }
    };
    let n = int.base10_parse::<u64>().map_err(|_| {
        syn::Error::new(
            int.span(),
            format!("`permits` must be between 1 and {MAX_PERMITS}"),
        )
    })?;
    if !(1..=MAX_PERMITS).contains(&n) {
        let why = if n == 0 {
            "a semaphore of 0 permits would never let anyone in"
        } else {
            "more would not be a limit"
        };
        return Err(syn::Error::new(
            int.span(),
            format!("`permits` must be between 1 and {MAX_PERMITS}: {why}"),
        ));
    }
    Ok(n)
}

/// How many permits one call takes (`weight = ..`): a literal, checked against `permits`
/// at compile time, or an expression of the function's scope, checked when the call runs.
#[derive(Debug, Clone)]
pub(crate) enum Weight {
    /// `weight = 2`, with the literal's span.
    Literal(u64, Span),
    /// `weight = job.gpus`: a `u64` evaluated when the function is called.
    Expr(Expr),
}

/// The value of `weight`: an integer literal from 1 to [`MAX_PERMITS`], or an expression.
pub(crate) fn weight(value: &Expr) -> syn::Result<Weight> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            let out_of_range = || {
                syn::Error::new(
                    int.span(),
                    "`weight` is the number of permits each call takes: at least 1 and at most \
                     `permits` (a call of 0 permits would hold nothing)",
                )
            };
            let n = int.base10_parse::<u64>().map_err(|_| out_of_range())?;
            if !(1..=MAX_PERMITS).contains(&n) {
                return Err(out_of_range());
            }
            Ok(Weight::Literal(n, int.span()))
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Err(syn::Error::new(
            text.span(),
            format!(
                "`weight` takes an integer without quotes: `weight = {}`",
                text.value()
            ),
        )),
        Expr::Lit(other) => Err(syn::Error::new(
            other.span(),
            "`weight` takes the number of permits each call takes: an integer literal \
             (`weight = 2`) or a `u64` expression of the function's parameters \
             (`weight = job.gpus`)",
        )),
        other => Ok(Weight::Expr(other.clone())),
    }
}

/// `weight` goes with `permits`, and a literal weight fits in them.
pub(crate) fn check_weight(
    permits: Option<(Span, u64)>,
    weight: Option<&(Span, Weight)>,
) -> Option<syn::Error> {
    let (span, weight) = weight?;
    let Some((_, permits)) = permits else {
        return Some(syn::Error::new(
            *span,
            "`weight` is how many permits of a semaphore each call takes, and there is no \
             semaphore here: add `permits = N` (the semaphore's size), e.g. `permits = 8, \
             weight = 2`, or remove `weight`",
        ));
    };
    match weight {
        Weight::Literal(n, at) if *n > permits => Some(syn::Error::new(
            *at,
            format!(
                "`weight = {n}` is more than `permits = {permits}`: a call taking {n} permits \
                 of a semaphore of {permits} could never run; take at most {permits}, or \
                 raise `permits`"
            ),
        )),
        _ => None,
    }
}

/// The value of `mode`: `"read"` or `"write"`.
pub(crate) fn mode(lit: &LitStr) -> syn::Result<Hold> {
    match lit.value().as_str() {
        "read" => Ok(Hold::Read),
        "write" => Ok(Hold::Write),
        other => Err(syn::Error::new(
            lit.span(),
            format!(
                "unknown `mode` {other:?}: write `mode = \"read\"` (shared: many readers at \
                 once) or `mode = \"write\"` (exclusive: one writer, no readers)"
            ),
        )),
    }
}

/// The value of `keys`: a non-empty array of key templates, each checked like `key`.
pub(crate) fn keys(value: &Expr, names: Option<&[Ident]>) -> syn::Result<Vec<Template>> {
    let Expr::Array(ExprArray { elems, .. }) = value else {
        return Err(syn::Error::new(
            value.span(),
            "`keys` takes an array of key templates, taken together all-or-nothing: \
             `keys = [\"buyer:{buyer_id}\", \"item:{item_id}\"]`",
        ));
    };
    if elems.is_empty() {
        return Err(syn::Error::new(
            value.span(),
            "`keys` needs at least one key template: `keys = [\"buyer:{buyer_id}\", \"item:{item_id}\"]`",
        ));
    }
    let mut templates = Vec::with_capacity(elems.len());
    let mut errors: Option<syn::Error> = None;
    for elem in elems {
        let elem = crate::ungroup::ungroup(elem.clone());
        let template = match &elem {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => Template::scan(lit).and_then(|mut template| {
                match names.and_then(|names| template.check_names(names)) {
                    Some(err) => Err(err),
                    None => {
                        if let Some(names) = names {
                            template.bind(names);
                        }
                        Ok(template)
                    }
                }
            }),
            other => Err(syn::Error::new(
                other.span(),
                "each of `keys` is a string literal template: `keys = [\"a:{x}\", \"b:{y}\"]`",
            )),
        };
        match template {
            Ok(template) => templates.push(template),
            Err(err) => match errors.as_mut() {
                Some(all) => all.combine(err),
                None => errors = Some(err),
            },
        }
    }
    match errors {
        Some(err) => Err(err),
        None => Ok(templates),
    }
}

/// Checks the combination once every argument is read: `permits` and `mode` exclude each
/// other, and `keys` takes neither (nor `key`). Errors point at the later argument.
pub(crate) fn combine(
    key: Option<Span>,
    keys: Option<Span>,
    permits: Option<(Span, u64)>,
    mode: Option<(Span, Hold)>,
) -> Result<Hold, Vec<syn::Error>> {
    let mut errors = Vec::new();
    if let (Some(_), Some(second)) = (key, keys) {
        errors.push(syn::Error::new(
            second,
            "give either `key` (one lock) or `keys` (several locks taken together), not both",
        ));
    }
    if let (Some(_), Some((second, _))) = (permits, mode) {
        errors.push(syn::Error::new(
            second,
            "`mode` (a read-write lock) and `permits` (a semaphore) cannot be combined: \
             choose one",
        ));
    }
    if keys.is_some() {
        for span in [permits.map(|p| p.0), mode.map(|m| m.0)]
            .into_iter()
            .flatten()
        {
            errors.push(syn::Error::new(
                span,
                "`keys` takes exclusive locks only: `permits` and `mode` go with a single `key`",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(match (keys, permits, mode) {
        (Some(_), _, _) => Hold::All,
        (None, Some((_, n)), _) => Hold::Permits(n),
        (None, None, Some((_, mode))) => mode,
        (None, None, None) => Hold::Lock,
    })
}
