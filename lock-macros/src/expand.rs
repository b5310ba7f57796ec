//! Code generation: the function keeps its signature; its body becomes one call to
//! `__private::run_locked` with the original body as an `async move` block.
//!
//! ```text
//! { let __lock_key = format!("market:{}", item_id);          // before the body moves them
//!   let __lock_locker = Some({ let r = &(expr); locker_of::<Locker>(r) }); // or None
//!   let __lock_ttl: Duration = <expr>;                          // only for `ttl = <expr>`
//!   run_locked(__lock_locker, LockSpec::new(__lock_key).ttl(..).wait(..),
//!              body::<ReturnType, _>(async move { <the body's statements> })).await }
//! ```

use proc_macro2::{Literal, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{ParseStream, Parser as _};
use syn::spanned::Spanned as _;
use syn::{AttrStyle, Ident, ItemFn, ReturnType};

use crate::args::Args;
use crate::duration_arg::DurationArg;
use crate::errors::Errors;
use crate::hold::Hold;
use crate::{bindings, handler, signature};

/// The whole macro, on `proc_macro2` streams so that it can be unit-tested.
pub(crate) fn redis_locked(args: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            let err = syn::Error::new(
                Span::call_site(),
                "#[redis_locked] goes on an `async fn` with a body: a free function, an \
                 inherent method or a method in a trait impl",
            );
            return with_original(&err, item);
        }
    };
    let mut errors = Errors::default();
    let names = bindings::bound_names(&function.sig);
    let parser = |input: ParseStream<'_>| Args::parse_for(input, Some(&names));
    let args = parser.parse2(args).map_err(|err| errors.push(err)).ok();
    errors.extend(signature::check(&function.sig, &function.attrs));
    match (errors.finish(), args) {
        (None, Some(args)) => generate(&args, function),
        (Some(err), _) => with_original(&err, quiet(function)),
        (None, None) => item,
    }
}

/// The user's function, rejected, with `unused_variables` allowed: its parameters are
/// often used only in the key template, which no longer reads them, and a warning for each
/// would bury the error that says what to fix.
fn quiet(mut function: ItemFn) -> TokenStream {
    function
        .attrs
        .push(syn::parse_quote!(#[allow(unused_variables)]));
    quote!(#function)
}

/// The errors, followed by the user's function untouched so that IDEs and later compile
/// errors still see it.
fn with_original(err: &syn::Error, item: TokenStream) -> TokenStream {
    let errors = err.to_compile_error();
    quote!(#errors #item)
}

fn generate(args: &Args, function: ItemFn) -> TokenStream {
    // `modifiers` (unstable `default fn`) is always empty on a parsed `ItemFn`.
    let ItemFn {
        attrs,
        vis,
        modifiers: _,
        sig,
        block,
    } = function;
    let krate = match &args.krate {
        Some(path) => quote!(#path),
        None => quote!(::lock_core),
    };
    let private = quote!(#krate::__private);
    // The call to `run_locked`, spanned on the return type: a missing `From<LockError>` for
    // the error type is reported there, where the user has to fix it.
    let return_span = match &sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => Span::call_site(),
    };
    // A return type written `Result<T, E>`: `E` is checked on its own, spanned on it, so
    // that a missing `From<LockError>` is one error at `E` saying what to write.
    let result_error = match &sig.output {
        ReturnType::Type(_, ty) => {
            signature::result_error_type(ty).filter(|error| !signature::mentions_impl_trait(error))
        }
        ReturnType::Default => None,
    };
    let run_locked = match (result_error, &args.krate) {
        (Some(error), Some(path)) => {
            quote_spanned!(error.span()=> #path::__private::run_locked_result::<_, _, #error>)
        }
        (Some(error), None) => quote_spanned!(error.span()=>
            ::lock_core::__private::run_locked_result::<_, _, #error>
        ),
        (None, Some(path)) => quote_spanned!(return_span=> #path::__private::run_locked),
        (None, None) => quote_spanned!(return_span=> ::lock_core::__private::run_locked),
    };
    // Mixed-site hygiene: user code (the body, the locker expression) cannot see these
    // locals at all; the prefix keeps them readable in `cargo expand` output.
    let key = Ident::new("__lock_key", Span::mixed_site());
    let locker = Ident::new("__lock_locker", Span::mixed_site());

    let key_values: Vec<TokenStream> = args
        .keys
        .iter()
        .map(|key| {
            if key.is_constant() {
                let text = key.constant_text();
                quote!(::core::convert::From::from(#text))
            } else {
                let format = key.format_string();
                // Each value through `key_part`, spanned on the template: a value that is
                // not `Display` is one error there that says what to write.
                let span = key.span;
                let values = key.placeholders().map(|value| match &args.krate {
                    Some(path) => quote_spanned!(span=> #path::__private::key_part(&(#value))),
                    None => quote_spanned!(span=> ::lock_core::__private::key_part(&(#value))),
                });
                quote!(#private::format!(#format, #(#values),*))
            }
        })
        .collect();
    let (key_type, key_value) = match args.hold {
        Hold::All => (
            quote!(#private::Vec<#private::String>),
            quote!(#private::Vec::from([#(#key_values),*])),
        ),
        _ => (quote!(#private::String), quote!(#(#key_values)*)),
    };

    let locker_value = match &args.locker {
        // Borrowed first with no expected type, so that blocks, `if`s and `match`es typed
        // as references still work; then passed as `&Locker`, a coercion site where deref
        // coercion turns `&Arc<Locker>`, `&LazyLock<Locker>` or `&&Locker` into `&Locker`,
        // and where a wrong type is a plain "expected `&Locker`" error on the expression.
        // The inner block drops any temporary of the expression before the body starts.
        Some(expr) => {
            let borrowed = Ident::new("__lock_ref", Span::mixed_site());
            let mut at_expr = borrowed.clone();
            at_expr.set_span(Span::mixed_site().located_at(expr.span()));
            quote!(::core::option::Option::Some({
                let #borrowed = &(#expr);
                #private::locker_of::<#private::Locker>(#at_expr)
            }))
        }
        None => quote!(::core::option::Option::None),
    };

    let mut spec = match args.hold {
        Hold::Lock => quote!(#private::LockSpec::new(#key)),
        Hold::Permits(n) => {
            let n = Literal::u64_unsuffixed(n);
            quote!(#private::LockSpec::new(#key).permits(#n))
        }
        Hold::Read => quote!(#private::LockSpec::new(#key).read()),
        Hold::Write => quote!(#private::LockSpec::new(#key).write()),
        Hold::All => quote!(#private::LockSpec::all(#key)),
    };
    // Expression durations are evaluated first, in the function's scope, each into a typed
    // local; literals go into the spec as milliseconds.
    let mut durations = TokenStream::new();
    for (setter, arg) in [
        ("ttl", &args.ttl),
        ("wait", &args.wait),
        ("hold_at_least", &args.hold_at_least),
    ] {
        if let Some(arg) = arg {
            let setter = Ident::new(setter, Span::call_site());
            let value = duration_value(arg, &setter, &private, &mut durations);
            spec = quote!(#spec.#setter(#value));
        }
    }
    // `weight`: a literal goes in as it is; an expression is evaluated first, in the
    // function's scope, into a `u64` local (a wrong type is an error on the expression).
    match &args.weight {
        Some(crate::hold::Weight::Literal(n, _)) => {
            let n = Literal::u64_unsuffixed(*n);
            spec = quote!(#spec.weight(#n));
        }
        Some(crate::hold::Weight::Expr(expr)) => {
            let local = Ident::new("__lock_weight", Span::mixed_site());
            let ty = quote_spanned!(expr.span()=> u64);
            durations.extend(quote!(let #local: #ty = #expr;));
            spec = quote!(#spec.weight(#local));
        }
        None => {}
    }
    if handler::is_http_handler(&sig) {
        // lock_core applies the web default (no waiting, as LockLayer: one table there)
        // unless `wait` says otherwise, and answers refused `permits` as a limit (429).
        spec = quote!(#spec.http_handler());
    }
    if let Some(renew) = args.renew {
        spec = quote!(#spec.renew(#renew));
    }
    match args.on_lost {
        Some(crate::args::OnLost::Cancel) => spec = quote!(#spec.cancel_on_lost(true)),
        Some(crate::args::OnLost::Error) => spec = quote!(#spec.error_on_lost(true)),
        Some(crate::args::OnLost::Report) | None => {}
    }

    // The body's statements go straight into the async block: wrapping its braces in
    // another block would make a one-line body `{ Ok(n) }` a block of unnecessary braces
    // (`unused_braces`, which `cargo fix` then "fixes" into broken code).
    let stmts = &block.stmts;
    let body = quote_spanned!(block.brace_token.span.join()=> async move { #(#stmts)* });
    // Typed as the declared return type (see `__private::body`), unless it mentions
    // `impl Trait`, which a turbofish cannot name.
    let body = match &sig.output {
        ReturnType::Type(_, ty) if !signature::mentions_impl_trait(ty) => {
            quote!(#private::body::<#ty, _>(#body))
        }
        _ => body,
    };
    // Call and `.await` both spanned on the return type: each requires `LockedReturn` of
    // it (a `Result` whose error converts from `LockError`), and rustc reports the two
    // identical errors as one, where the user has to fix it: a return type the macro could
    // not judge (an alias) that is not a `Result` is one error that says so.
    let call_span = result_error.map_or(return_span, |error| error.span());
    let call = quote_spanned!(call_span=>
        #run_locked(#locker, #spec, #body).await
    );
    // syn keeps the body's inner attributes (`#![allow(..)]`) with the outer ones; they
    // belong inside the function's braces, where they still apply to the whole function.
    let (outer, inner): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Outer));
    quote! {
        #(#outer)* #vis #sig {
            #(#inner)*
            let #key: #key_type = #key_value;
            let #locker: ::core::option::Option<#private::Locker> = #locker_value;
            #durations
            #call
        }
    }
}

/// The value a `ttl`, `wait` or `hold_at_least` passes to the spec's `setter`. A literal
/// is its milliseconds. An expression is bound first (appended to `lets`) to a local typed
/// `::core::time::Duration`, so that a value of another type is rustc's "expected
/// `Duration`" on the user's expression, "expected due to" the argument's name; its range
/// is lock_core's to check when the function is called (`LockError::InvalidDuration`).
fn duration_value(
    arg: &DurationArg,
    setter: &Ident,
    private: &TokenStream,
    lets: &mut TokenStream,
) -> TokenStream {
    match arg {
        DurationArg::Literal(duration) => {
            let millis = Literal::u64_unsuffixed(millis(*duration));
            quote!(#private::Duration::from_millis(#millis))
        }
        DurationArg::Expr { name, expr } => {
            let local = Ident::new(&format!("__lock_{setter}"), Span::mixed_site());
            let ty = quote_spanned!(*name=> ::core::time::Duration);
            lets.extend(quote!(let #local: #ty = #expr;));
            quote!(#local)
        }
    }
}

/// Literal durations were range-checked (at most 24h), so the milliseconds fit a `u64`.
fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(args: TokenStream, item: TokenStream) -> String {
        redis_locked(args, item).to_string()
    }

    #[test]
    fn wraps_the_body_and_keeps_the_signature() {
        let out = expand(
            quote!(key = "market:{item_id}", ttl = "10s", wait = "5s"),
            quote!(
                /// Docs stay.
                #[inline]
                pub async fn purchase_item(buyer: &Buyer, item_id: &str) -> Result<bool, AppError> {
                    Ok(true)
                }
            ),
        );
        assert!(out.starts_with("# [doc = r\" Docs stay.\"] # [inline] pub async fn purchase_item (buyer : & Buyer , item_id : & str) -> Result < bool , AppError >"), "{out}");
        assert!(
            out.contains(":: lock_core :: __private :: format ! (\"market:{}\" , :: lock_core :: __private :: key_part (& (item_id)))"),
            "{out}"
        );
        assert!(out.contains("Duration :: from_millis (10000)) . wait (:: lock_core :: __private :: Duration :: from_millis (5000))"), "{out}");
        assert!(out.contains(":: core :: option :: Option :: None"), "{out}");
        assert!(
            out.contains("__private :: body :: < Result < bool , AppError > , _ > (async move { Ok (true) })) . await }"),
            "{out}"
        );
        assert!(!out.contains("allow"), "{out}");
    }

    #[test]
    fn locker_crate_and_constant_key() {
        let out = expand(
            quote!(
                key = "jobs:{{nightly}}",
                locker = self.locks,
                crate = "renamed"
            ),
            quote!(
                async fn run(&self) -> io::Result<()> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains(":: core :: convert :: From :: from (\"jobs:{nightly}\")"),
            "{out}"
        );
        assert!(out.contains("let __lock_ref = & (self . locks) ; renamed :: __private :: locker_of :: < renamed :: __private :: Locker > (__lock_ref)"), "{out}");
        assert!(!out.contains("lock_core"), "{out}");
    }

    #[test]
    fn errors_come_with_the_original_function() {
        let item = quote!(
            fn plain(id: u32) -> bool {
                true
            }
        );
        let out = expand(quote!(key = "k:{idd}", ttl = "0s"), item.clone());
        assert!(out.ends_with(&item.to_string()), "{out}");
        // Four independent problems: ttl, async, return type, unknown placeholder.
        assert_eq!(out.matches("compile_error").count(), 4, "{out}");
    }

    #[test]
    fn handlers_get_the_web_default_unless_they_say_wait() {
        let handler = quote!(
            async fn pay(State(app): State<App>, Path(id): Path<u64>) -> Result<(), LockError> {
                Ok(())
            }
        );
        let out = expand(quote!(key = "orders:{id}"), handler.clone());
        assert!(out.contains(". http_handler ()"), "{out}");
        // With `wait`, lock_core still knows it is a handler (a refused permit answers
        // 429), and the wait is the function's own.
        let out = expand(quote!(key = "orders:{id}", wait = "2s"), handler);
        assert!(
            out.contains(". wait (:: lock_core :: __private :: Duration :: from_millis (2000)) . http_handler ()"),
            "{out}"
        );
        let out = expand(
            quote!(key = "orders:{id}"),
            quote!(
                async fn settle(id: u64) -> Result<(), LockError> {
                    Ok(())
                }
            ),
        );
        assert!(
            !out.contains("http_handler") && !out.contains(". wait ("),
            "{out}"
        );
    }

    #[test]
    fn duration_expressions_are_typed_locals() {
        let out = expand(
            quote!(
                key = "k",
                ttl = TTL,
                wait = "2s",
                hold_at_least = Duration::from_secs(n)
            ),
            quote!(
                async fn f(n: u64) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        // Bound before the call, in the function's scope, typed `Duration`.
        assert!(
            out.contains("let __lock_ttl : :: core :: time :: Duration = TTL ; let __lock_hold_at_least : :: core :: time :: Duration = Duration :: from_secs (n) ;"),
            "{out}"
        );
        assert!(
            out.contains(". ttl (__lock_ttl) . wait (:: lock_core :: __private :: Duration :: from_millis (2000)) . hold_at_least (__lock_hold_at_least)"),
            "{out}"
        );
    }

    #[test]
    fn not_a_function() {
        let out = expand(
            quote!(key = "a"),
            quote!(
                struct S;
            ),
        );
        assert!(out.contains("goes on an `async fn` with a body"), "{out}");
        assert!(out.ends_with("struct S ;"), "{out}");
    }

    #[test]
    fn a_rejected_function_is_kept_without_unused_variable_warnings() {
        // `item_id` is read only by the key template: once the function is rejected, a
        // warning for it would sit beside the error that matters.
        let out = expand(
            quote!(key = "market:{item_id}"),
            quote!(
                async fn purchase(item_id: u64) -> bool {
                    true
                }
            ),
        );
        assert!(out.contains("must return `Result<T, E>`"), "{out}");
        assert!(
            out.contains("# [allow (unused_variables)] async fn purchase"),
            "{out}"
        );
    }

    #[test]
    fn inner_attributes_stay_inside_the_body() {
        let out = expand(
            quote!(key = "k"),
            quote!(
                #[inline]
                async fn f() -> Result<(), E> {
                    #![allow(unused_variables)]
                    Ok(())
                }
            ),
        );
        assert!(
            out.starts_with("# [inline] async fn f () -> Result < () , E > { # ! [allow (unused_variables)] let __lock_key"),
            "{out}"
        );
    }
}
