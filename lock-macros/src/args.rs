//! The attribute's arguments: `key = "..", ttl = "..", wait = "..", locker = <expr>,
//! renew = <bool>, on_lost = "..", crate = ".."`, parsed into one typed [`Args`].
//!
//! Parsing goes on past a bad argument so that every independent problem is reported in one
//! compile; only a syntax error (a missing `=` or `,`) stops it.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token};

use crate::duration;
use crate::errors::Errors;
use crate::suggest::closest;
use crate::template::Template;

/// The argument keywords. `crate` is a Rust keyword, so it is matched as `Token![crate]`.
mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(locker);
    syn::custom_keyword!(renew);
    syn::custom_keyword!(on_lost);
}

const NAMES: [&str; 7] = ["key", "ttl", "wait", "locker", "renew", "on_lost", "crate"];
const VALID: &str =
    "valid arguments are `key`, `ttl`, `wait`, `locker`, `renew`, `on_lost` and `crate`";

/// What happens when the lease is lost while the body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLost {
    /// The default: the body finishes and its result stands; the loss is reported (a
    /// warning, the lost-lease metric, `current_lease().is_lost()` inside the body).
    Report,
    /// Drop the body at its next `.await` and return `Err(LockError::Lost)` at once.
    Cancel,
    /// The body finishes, and its result becomes `Err(LockError::Lost)`.
    Error,
}

/// Validated arguments. Durations are already in range.
#[derive(Debug)]
pub(crate) struct Args {
    pub key: Template,
    pub ttl: Option<Duration>,
    pub wait: Option<Duration>,
    pub locker: Option<Expr>,
    /// `renew = false` turns auto-renewal off (it is on by default).
    pub renew: Option<bool>,
    pub on_lost: Option<OnLost>,
    /// `crate = ".."`: the path generated code uses instead of `::lock_core`.
    pub krate: Option<Path>,
}

/// What has been read so far; every field may still be missing or wrong.
#[derive(Default)]
struct Partial<'a> {
    /// The names the function's parameters bind, when known.
    names: Option<&'a [Ident]>,
    key: Option<Template>,
    ttl: Option<Duration>,
    wait: Option<Duration>,
    locker: Option<Expr>,
    renew: Option<bool>,
    on_lost: Option<OnLost>,
    krate: Option<Path>,
    /// Names already given, to reject duplicates even when the first value was wrong.
    seen: Vec<String>,
}

impl Parse for Args {
    /// Parses without knowing the function: placeholders are not matched to parameters.
    fn parse(input: ParseStream<'_>) -> syn::Result<Args> {
        Args::parse_for(input, None)
    }
}

impl Args {
    /// Parses and, given the names the function's parameters bind, also checks that every
    /// placeholder starts with one of them, so that those errors join the others.
    pub fn parse_for(input: ParseStream<'_>, names: Option<&[Ident]>) -> syn::Result<Args> {
        let mut partial = Partial {
            names,
            ..Partial::default()
        };
        let mut errors = Errors::default();
        while !input.is_empty() {
            let name = argument_name(input).map_err(|err| take(&mut errors).stop(err))?;
            if !input.peek(Token![=]) {
                let msg = format!("`{name}` needs a value: {}", example(&name.to_string()));
                return Err(errors.stop(syn::Error::new(name.span(), msg)));
            }
            input.parse::<Token![=]>()?;
            let value: Expr = input.parse().map_err(|err| take(&mut errors).stop(err))?;
            if let Err(err) = partial.accept(&name, value) {
                errors.push(err);
            }
            if input.is_empty() {
                break;
            }
            if let Err(err) = input.parse::<Token![,]>() {
                return Err(errors.stop(err));
            }
        }
        let key = partial.key.take();
        if key.is_none() && !partial.seen.iter().any(|seen| seen == "key") {
            errors.push(missing_key());
        }
        match (errors.finish(), key) {
            (Some(err), _) => Err(err),
            (None, None) => Err(missing_key()),
            (None, Some(key)) => Ok(Args {
                key,
                ttl: partial.ttl,
                wait: partial.wait,
                locker: partial.locker,
                renew: partial.renew,
                on_lost: partial.on_lost,
                krate: partial.krate,
            }),
        }
    }
}

fn take(errors: &mut Errors) -> Errors {
    std::mem::take(errors)
}

fn missing_key() -> syn::Error {
    // Without a span of its own, the error points at the whole attribute.
    syn::Error::new(
        Span::call_site(),
        "missing `key`: name the lock, e.g. #[redis_locked(key = \"orders:{order_id}\")]; \
         `{..}` placeholders take the function's parameters",
    )
}

/// Reads an argument name: one of the keywords, or any other word (reported as unknown).
fn argument_name(input: ParseStream<'_>) -> syn::Result<Ident> {
    let name = if input.peek(kw::key) {
        Ident::new("key", input.parse::<kw::key>()?.span)
    } else if input.peek(kw::ttl) {
        Ident::new("ttl", input.parse::<kw::ttl>()?.span)
    } else if input.peek(kw::wait) {
        Ident::new("wait", input.parse::<kw::wait>()?.span)
    } else if input.peek(kw::locker) {
        Ident::new("locker", input.parse::<kw::locker>()?.span)
    } else if input.peek(kw::renew) {
        Ident::new("renew", input.parse::<kw::renew>()?.span)
    } else if input.peek(kw::on_lost) {
        Ident::new("on_lost", input.parse::<kw::on_lost>()?.span)
    } else if input.peek(Token![crate]) {
        Ident::new("crate", input.parse::<Token![crate]>()?.span)
    } else if input.peek(Ident::peek_any) {
        input.call(Ident::parse_any)?
    } else if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        return Err(syn::Error::new(
            lit.span(),
            format!("name the argument: write `key = {}`", quote::quote!(#lit)),
        ));
    } else {
        return Err(input.error(format!("expected an argument name; {VALID}")));
    };
    Ok(name)
}

impl Partial<'_> {
    /// Checks and stores one `name = value`.
    fn accept(&mut self, name: &Ident, value: Expr) -> syn::Result<()> {
        let text = name.to_string();
        if !NAMES.contains(&text.as_str()) {
            let hint = closest(&text, NAMES)
                .map(|close| format!("did you mean `{close}`? "))
                .unwrap_or_default();
            return Err(syn::Error::new(
                name.span(),
                format!("unknown argument `{text}`; {hint}{VALID}"),
            ));
        }
        if self.seen.contains(&text) {
            return Err(syn::Error::new(
                name.span(),
                format!("duplicate argument `{text}`: give each argument once ({VALID})"),
            ));
        }
        self.seen.push(text.clone());
        match text.as_str() {
            "key" => {
                let lit = string_literal(&value, "key")?;
                let template = Template::scan(&lit)?;
                if let Some(err) = self.names.and_then(|names| template.check_names(names)) {
                    return Err(err);
                }
                self.key = Some(template);
            }
            "ttl" => self.ttl = Some(duration_value(&value, "ttl", duration::ttl)?),
            "wait" => self.wait = Some(duration_value(&value, "wait", duration::wait)?),
            "locker" => self.locker = Some(value),
            "renew" => self.renew = Some(bool_literal(&value)?),
            "on_lost" => {
                let lit = string_literal(&value, "on_lost")?;
                self.on_lost = Some(match lit.value().as_str() {
                    "report" => OnLost::Report,
                    "cancel" => OnLost::Cancel,
                    "error" => OnLost::Error,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!("unknown `on_lost` policy {other:?}: write `on_lost = \"report\"` (the default: the body finishes and its result stands; the loss is logged), `on_lost = \"cancel\"` (stop the body as soon as the lease is lost and return `Err(LockError::Lost)`) or `on_lost = \"error\"` (the body finishes, then its result becomes `Err(LockError::Lost)`)"),
                        ))
                    }
                });
            }
            "crate" => {
                let lit = string_literal(&value, "crate")?;
                let path = lit.parse::<Path>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        format!(
                            "{:?} is not a path; write the name lock_core has in your Cargo.toml, e.g. crate = \"my_locks\"",
                            lit.value()
                        ),
                    )
                })?;
                self.krate = Some(path);
            }
            _ => unreachable!("NAMES lists every argument"),
        }
        Ok(())
    }
}

/// How each argument is written, for messages.
fn example(name: &str) -> &'static str {
    match name {
        "key" => "key = \"orders:{order_id}\"",
        "ttl" => "ttl = \"10s\"",
        "wait" => "wait = \"5s\"",
        "locker" => "locker = self.locker",
        "renew" => "renew = false",
        "on_lost" => "on_lost = \"cancel\"",
        "crate" => "crate = \"my_locks\"",
        _ => VALID,
    }
}

/// The value of an argument that only takes a string literal.
fn string_literal(value: &Expr, name: &str) -> syn::Result<LitStr> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Str(lit), ..
    }) = value
    {
        return Ok(lit.clone());
    }
    let why = match name {
        "key" => "a string literal template, checked at compile time; parameters go in `{..}`",
        _ => "a string literal",
    };
    Err(syn::Error::new(
        value.span(),
        format!("`{name}` takes {why}: {}", example(name)),
    ))
}

/// The value of `renew`: `true` or `false`.
fn bool_literal(value: &Expr) -> syn::Result<bool> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Bool(lit),
        ..
    }) = value
    {
        return Ok(lit.value);
    }
    Err(syn::Error::new(
        value.span(),
        "`renew` takes `true` or `false` (without quotes): `renew = false` turns auto-renewal off",
    ))
}

/// The value of `ttl` or `wait`: a duration string, checked by `check`.
fn duration_value(
    value: &Expr,
    name: &str,
    check: fn(&str) -> Result<Duration, String>,
) -> syn::Result<Duration> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    {
        let n = int.base10_digits();
        return Err(syn::Error::new(
            int.span(),
            format!("`{name}` takes a string with a unit: write `{name} = \"{n}s\"` or `{name} = \"{n}ms\"` (units: h, m, s, ms)"),
        ));
    }
    let lit = string_literal(value, name)?;
    check(&lit.value()).map_err(|msg| syn::Error::new(lit.span(), msg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<Args> {
        syn::parse2(tokens)
    }

    fn messages(tokens: proc_macro2::TokenStream) -> Vec<String> {
        parse(tokens)
            .unwrap_err()
            .into_iter()
            .map(|err| err.to_string())
            .collect()
    }

    #[test]
    fn all_arguments() {
        let args = parse(quote!(
            key = "market:{item_id}",
            ttl = "10s",
            wait = "1m30s",
            locker = self.locks,
            crate = "renamed",
        ))
        .unwrap();
        assert_eq!(args.key.format_string().value(), "market:{}");
        assert_eq!(args.ttl, Some(Duration::from_secs(10)));
        assert_eq!(args.wait, Some(Duration::from_secs(90)));
        assert!(args.locker.is_some());
        assert!(args.krate.unwrap().is_ident("renamed"));
        let args = parse(quote!(key = "a", renew = false, on_lost = "cancel")).unwrap();
        assert_eq!(args.renew, Some(false));
        assert_eq!(args.on_lost, Some(OnLost::Cancel));
    }

    #[test]
    fn renew_and_on_lost_values_are_checked() {
        assert!(messages(quote!(key = "a", renew = "false"))[0]
            .contains("`renew` takes `true` or `false`"));
        assert!(
            messages(quote!(key = "a", on_lost = "abort"))[0].contains("unknown `on_lost` policy")
        );
        assert!(messages(quote!(key = "a", on_lost = cancel))[0]
            .contains("`on_lost` takes a string literal"));
    }

    #[test]
    fn only_key_is_required() {
        let args = parse(quote!(key = "jobs:nightly")).unwrap();
        assert!(args.ttl.is_none() && args.wait.is_none() && args.locker.is_none());
        assert_eq!(messages(quote!(ttl = "1s")).len(), 1);
        assert!(messages(quote!())[0].starts_with("missing `key`"));
    }

    #[test]
    fn independent_problems_are_reported_together() {
        let all = messages(quote!(
            key = "{}",
            tll = "1s",
            ttl = "0s",
            wait = 5,
            wait = "1s"
        ));
        assert_eq!(all.len(), 5, "{all:?}");
        assert!(all[0].contains("empty `{}`"));
        assert!(all[1].contains("unknown argument `tll`; did you mean `ttl`?"));
        assert!(all[2].contains("more than zero"));
        assert!(all[3].contains("`wait = \"5s\"`"));
        assert!(all[4].contains("duplicate argument `wait`"));
    }

    #[test]
    fn wrong_value_types() {
        assert!(messages(quote!(key = some_ident))[0].contains("`key` takes a string literal"));
        assert!(messages(quote!(key = "a", crate = lock_core))[0]
            .contains("`crate` takes a string literal"));
        assert!(messages(quote!(key = "a", crate = "not a path"))[0].contains("is not a path"));
        assert!(messages(quote!("a:{b}"))[0].contains("write `key = \"a:{b}\"`"));
        assert!(messages(quote!(key))[0].contains("`key` needs a value"));
    }

    #[test]
    fn unknown_arguments_list_the_valid_ones() {
        let msg = &messages(quote!(key = "a", timeout = "1s"))[0];
        assert!(msg.contains("unknown argument `timeout`"), "{msg}");
        assert!(msg.contains(VALID), "{msg}");
    }
}
