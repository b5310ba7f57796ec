//! The value of `ttl`, `wait` and `hold_at_least`: a duration string (`"10s"`), read and
//! range-checked while the macro expands, or any other expression (`TTL`,
//! `Duration::from_secs(10)`, `self.ttl`, a block), which the expansion types as
//! `::core::time::Duration` and lock_core range-checks when the function is called.

use std::time::Duration;

use proc_macro2::Span;
use syn::{Expr, ExprLit, Lit};

/// One duration argument.
#[derive(Debug)]
pub(crate) enum DurationArg {
    /// A string literal, already parsed and in range.
    Literal(Duration),
    /// An expression, evaluated in the function's scope before the body runs. `name` is
    /// where the argument's name was written: a value of another type is reported on the
    /// expression, "expected due to" the name.
    Expr { name: Span, expr: Expr },
}

impl DurationArg {
    /// The duration when it was given as a literal.
    #[cfg(test)]
    pub fn literal(&self) -> Option<Duration> {
        match self {
            DurationArg::Literal(duration) => Some(*duration),
            DurationArg::Expr { .. } => None,
        }
    }
}

/// Reads the (ungrouped) value of the argument `name` written at `name_span`: a string
/// literal is checked by `check`; a number or another literal is an error that says how to
/// write it; anything else is an expression for the compiler to type.
pub(crate) fn parse(
    value: Expr,
    name: &str,
    name_span: Span,
    check: fn(&str) -> Result<Duration, String>,
) -> syn::Result<DurationArg> {
    let lit = match value {
        Expr::Lit(ExprLit { lit, .. }) => lit,
        expr => {
            return Ok(DurationArg::Expr {
                name: name_span,
                expr,
            })
        }
    };
    let example = example(name);
    match lit {
        Lit::Str(text) => check(&text.value())
            .map(DurationArg::Literal)
            .map_err(|msg| syn::Error::new(text.span(), msg)),
        Lit::Int(int) => {
            let n = int.base10_digits();
            Err(syn::Error::new(
                int.span(),
                format!(
                    "`{name}` takes a string with a unit or a `Duration`, not a bare number: \
                     write `{name} = \"{n}s\"` or `{name} = \"{n}ms\"` (units: h, m, s, ms), \
                     or `{name} = Duration::from_secs({n})`"
                ),
            ))
        }
        Lit::Float(float) => {
            let n = float.base10_digits();
            // `1.5` as `"1500ms"`: the string grammar has no fractions.
            let millis = float
                .base10_parse::<f64>()
                .ok()
                .map(|secs| secs * 1000.0)
                .filter(|ms| ms.is_finite() && *ms >= 0.0 && ms.fract() == 0.0 && *ms < 1e15)
                .map_or_else(|| "1500".to_owned(), |ms| format!("{ms:.0}"));
            Err(syn::Error::new(
                float.span(),
                format!(
                    "`{name}` takes a string with a unit or a `Duration`, not a bare number \
                     (a string has no fractions): write `{name} = \"{millis}ms\"`, or \
                     `{name} = Duration::from_secs_f64({n})`"
                ),
            ))
        }
        other => Err(syn::Error::new(
            other.span(),
            format!(
                "`{name}` takes a string with a unit (`{name} = \"{example}\"`; units: h, m, \
                 s, ms) or a `std::time::Duration` expression (`{name} = \
                 Duration::from_secs(10)`, a constant, a field)"
            ),
        )),
    }
}

/// A literal of each argument, for messages.
fn example(name: &str) -> &'static str {
    match name {
        "wait" => "5s",
        "hold_at_least" => "5m",
        _ => "10s",
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn read(tokens: proc_macro2::TokenStream) -> syn::Result<DurationArg> {
        let value: Expr = syn::parse2(tokens).unwrap();
        parse(value, "ttl", Span::call_site(), crate::duration::ttl)
    }

    #[test]
    fn literals_are_read_now() {
        let arg = read(quote!("1m30s")).unwrap();
        assert_eq!(arg.literal(), Some(Duration::from_secs(90)));
        let msg = read(quote!("0s")).unwrap_err().to_string();
        assert!(msg.contains("more than zero"), "{msg}");
    }

    #[test]
    fn expressions_are_left_to_the_compiler() {
        for tokens in [
            quote!(TTL),
            quote!(Duration::from_secs(10)),
            quote!(self.ttl),
            quote!({ TTL * 2 }),
            quote!(ttl!()),
        ] {
            let arg = read(tokens.clone()).unwrap();
            assert!(arg.literal().is_none(), "{tokens}");
        }
    }

    #[test]
    fn other_literals_say_how_to_write_them() {
        let msg = read(quote!(10)).unwrap_err().to_string();
        assert!(msg.contains("`ttl = \"10s\"`"), "{msg}");
        assert!(msg.contains("`ttl = Duration::from_secs(10)`"), "{msg}");
        let msg = read(quote!(1.5)).unwrap_err().to_string();
        assert!(msg.contains("\"1500ms\""), "{msg}");
        let msg = read(quote!(true)).unwrap_err().to_string();
        assert!(msg.contains("a `std::time::Duration` expression"), "{msg}");
    }
}
