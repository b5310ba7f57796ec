//! The attribute's arguments: `key = ".."` (or `keys = [..]`), `ttl`, `wait` and
//! `hold_at_least` (each `".."` or a `Duration` expression), `locker = <expr>`,
//! `renew = <bool>`, `on_lost = ".."`, `permits = N`, `weight = W`, `mode = ".."`, `crate = ".."`, parsed
//! into one typed [`Args`].
//!
//! Parsing goes on past a bad argument so that every independent problem is reported in one
//! compile; only a syntax error (a missing `=` or `,`) stops it.

use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token};

use crate::duration;
use crate::duration_arg::{self, DurationArg};
use crate::errors::Errors;
use crate::hold::{self, Hold, Weight};
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
    syn::custom_keyword!(keys);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(weight);
    syn::custom_keyword!(mode);
    syn::custom_keyword!(hold_at_least);
}

const NAMES: [&str; 12] = [
    "key",
    "keys",
    "ttl",
    "wait",
    "locker",
    "renew",
    "on_lost",
    "permits",
    "weight",
    "mode",
    "hold_at_least",
    "crate",
];
const VALID: &str = "valid arguments are `key`, `keys`, `ttl`, `wait`, `locker`, `renew`, \
     `on_lost`, `permits`, `weight`, `mode`, `hold_at_least` and `crate`";

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

/// Validated arguments. Durations given as strings are already in range.
#[derive(Debug)]
pub(crate) struct Args {
    /// The lock names: one template, or several with `keys = [..]`.
    pub keys: Vec<Template>,
    /// A lock (default), a semaphore permit, a read-write lock side, or all of `keys`.
    pub hold: Hold,
    /// With `permits`: how many permits each call takes (one without it).
    pub weight: Option<Weight>,
    pub ttl: Option<DurationArg>,
    pub wait: Option<DurationArg>,
    pub locker: Option<Expr>,
    /// `renew = false` turns auto-renewal off (it is on by default).
    pub renew: Option<bool>,
    pub on_lost: Option<OnLost>,
    /// `hold_at_least = ..`: a scheduled run's minimum hold (a plain lock only).
    pub hold_at_least: Option<DurationArg>,
    /// `crate = ".."`: the path generated code uses instead of `::lock_core`.
    pub krate: Option<Path>,
}

/// What has been read so far; every field may still be missing or wrong.
#[derive(Default)]
struct Partial<'a> {
    /// The names the function's parameters bind, when known.
    names: Option<&'a [Ident]>,
    key: Option<Template>,
    keys: Option<Vec<Template>>,
    /// Where `key`, `keys`, `permits` and `mode` were given, to check how they combine.
    key_span: Option<Span>,
    keys_span: Option<Span>,
    permits: Option<(Span, u64)>,
    weight: Option<(Span, Weight)>,
    mode: Option<(Span, Hold)>,
    ttl: Option<DurationArg>,
    wait: Option<DurationArg>,
    locker: Option<Expr>,
    renew: Option<bool>,
    on_lost: Option<OnLost>,
    hold_at_least: Option<(Span, DurationArg)>,
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
        let keys = partial
            .keys
            .take()
            .or_else(|| partial.key.take().map(|k| vec![k]));
        if keys.is_none()
            && !partial
                .seen
                .iter()
                .any(|seen| seen == "key" || seen == "keys")
        {
            errors.push(missing_key());
        }
        let held = hold::combine(
            partial.key_span,
            partial.keys_span,
            partial.permits,
            partial.mode,
        );
        if let Some(err) = partial.hold_of_a_lock_only() {
            errors.push(err);
        }
        if let Some(err) = hold::check_weight(partial.permits, partial.weight.as_ref()) {
            errors.push(err);
        }
        let held = held.map_err(|all| all.into_iter().for_each(|err| errors.push(err)));
        match (errors.finish(), keys, held) {
            (Some(err), _, _) => Err(err),
            (None, None, _) | (None, _, Err(())) => Err(missing_key()),
            (None, Some(keys), Ok(hold)) => Ok(Args {
                keys,
                hold,
                weight: partial.weight.map(|(_, weight)| weight),
                ttl: partial.ttl,
                wait: partial.wait,
                locker: partial.locker,
                renew: partial.renew,
                on_lost: partial.on_lost,
                hold_at_least: partial.hold_at_least.map(|(_, hold)| hold),
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
        "missing `key`: name the lock, e.g. #[redis_locked(key = \"orders:{order_id}\")] \
         (`{..}` placeholders take the function's parameters), or give `keys = [..]` to take \
         several locks together",
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
    } else if input.peek(kw::keys) {
        Ident::new("keys", input.parse::<kw::keys>()?.span)
    } else if input.peek(kw::permits) {
        Ident::new("permits", input.parse::<kw::permits>()?.span)
    } else if input.peek(kw::weight) {
        Ident::new("weight", input.parse::<kw::weight>()?.span)
    } else if input.peek(kw::mode) {
        Ident::new("mode", input.parse::<kw::mode>()?.span)
    } else if input.peek(kw::hold_at_least) {
        Ident::new("hold_at_least", input.parse::<kw::hold_at_least>()?.span)
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
    /// `hold_at_least` with `keys`, `permits` or `mode`: a minimum hold is for a plain lock.
    fn hold_of_a_lock_only(&self) -> Option<syn::Error> {
        let (span, _) = self.hold_at_least.as_ref()?;
        let other = if self.keys_span.is_some() {
            "keys"
        } else if self.permits.is_some() {
            "permits"
        } else if self.mode.is_some() {
            "mode"
        } else {
            return None;
        };
        Some(syn::Error::new(
            *span,
            format!("`hold_at_least` is for a scheduled job under one lock (`key = \"..\"`), not with `{other}`; remove one of them"),
        ))
    }

    /// Checks and stores one `name = value`.
    fn accept(&mut self, name: &Ident, value: Expr) -> syn::Result<()> {
        // A value passed through `macro_rules!` (`key = $key` with `$key:literal` or
        // `$key:expr`) arrives wrapped in an invisible group.
        let value = crate::ungroup::ungroup(value);
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
                let mut template = Template::scan(&lit)?;
                if let Some(err) = self.names.and_then(|names| template.check_names(names)) {
                    return Err(err);
                }
                if let Some(names) = self.names {
                    template.bind(names);
                }
                self.key = Some(template);
                self.key_span = Some(name.span());
            }
            "keys" => {
                self.keys_span = Some(name.span());
                self.keys = Some(hold::keys(&value, self.names)?);
            }
            "permits" => self.permits = Some((name.span(), hold::permits(&value)?)),
            "weight" => self.weight = Some((name.span(), hold::weight(&value)?)),
            "mode" => {
                let lit = string_literal(&value, "mode")?;
                self.mode = Some((name.span(), hold::mode(&lit)?));
            }
            "ttl" => {
                self.ttl = Some(duration_arg::parse(
                    value,
                    "ttl",
                    name.span(),
                    duration::ttl,
                )?);
            }
            "wait" => {
                self.wait = Some(duration_arg::parse(
                    value,
                    "wait",
                    name.span(),
                    duration::wait,
                )?);
            }
            "hold_at_least" => {
                let hold = duration_arg::parse(
                    value,
                    "hold_at_least",
                    name.span(),
                    duration::hold_at_least,
                )?;
                self.hold_at_least = Some((name.span(), hold));
            }
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
        "keys" => "keys = [\"buyer:{buyer_id}\", \"item:{item_id}\"]",
        "permits" => "permits = 5",
        "weight" => "weight = 2",
        "mode" => "mode = \"read\"",
        "ttl" => "ttl = \"10s\" or ttl = Duration::from_secs(10)",
        "wait" => "wait = \"5s\" or wait = Duration::from_secs(5)",
        "locker" => "locker = self.locker",
        "renew" => "renew = false",
        "on_lost" => "on_lost = \"cancel\"",
        "hold_at_least" => "hold_at_least = \"5m\" or hold_at_least = Duration::from_secs(300)",
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
    if let Some(what) = named_elsewhere(value).filter(|_| name == "key") {
        return Err(syn::Error::new(
            value.span(),
            format!(
                "`{name}` takes {why}, not {what}: the attribute reads its arguments as \
                 written, before constants are evaluated and macros expanded, so it cannot \
                 see that value; write it out ({}); for a name computed at run time, take \
                 the lock in the body instead: `locker.lock(KEY).await?` or \
                 `locker.using(KEY, |lease| ..)`",
                example(name),
            ),
        ));
    }
    Err(syn::Error::new(
        value.span(),
        format!("`{name}` takes {why}: {}", example(name)),
    ))
}

/// `a constant such as `KEY`` or `a macro call such as `key!()``: a value the attribute
/// cannot read, said as what it is.
fn named_elsewhere(value: &Expr) -> Option<String> {
    match value {
        Expr::Path(path) if path.qself.is_none() => {
            let shown = path
                .path
                .segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect::<Vec<_>>()
                .join("::");
            Some(format!("a constant or static (`{shown}`)"))
        }
        Expr::Macro(call) => {
            let shown = call
                .mac
                .path
                .segments
                .last()
                .map(|segment| segment.ident.to_string())
                .unwrap_or_default();
            Some(format!("a macro call (`{shown}!(..)`)"))
        }
        _ => None,
    }
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

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
