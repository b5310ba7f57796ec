//! What the annotated function's signature must look like: `async`, returning a `Result`.
//!
//! The return type is only rejected when it visibly is not a `Result`. Aliases such as
//! `anyhow::Result<T>`, `io::Result<T>` or a crate's own `Result<T>` cannot be told apart
//! from other path types, so every other path type passes here; the expansion's call then
//! requires `lock_core::__private::LockedReturn` of it, whose one error says what to write
//! (and that the macro cannot see through aliases) when it is not a `Result`.

use syn::visit::Visit;
use syn::{Attribute, ReturnType, Signature, Type, TypePath};

use crate::errors::Errors;

const NEED: &str =
    "#[redis_locked] functions must return `Result<T, E>` with `E: From<lock_core::LockError>`";
const WHY: &str = "a lock that cannot be had becomes `Err(..)` and the body does not run";

const PRIMITIVES: [&str; 17] = [
    "bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64",
    "i128", "isize", "f32", "f64",
];

/// Errors for everything wrong with `sig` (of a function carrying `attrs`), together.
pub(crate) fn check(sig: &Signature, attrs: &[Attribute]) -> Option<syn::Error> {
    let mut errors = Errors::default();
    if sig.asyncness.is_none() {
        // An attribute that expanded first may have turned the `async fn` into a plain
        // one: then "write `async fn`" would be wrong advice.
        if let Some(msg) = rewritten_by_another_attribute(sig, attrs) {
            return Some(syn::Error::new(sig.fn_token.span, msg));
        }
        errors.push(syn::Error::new(
            sig.fn_token.span,
            "#[redis_locked] requires an `async fn`: the lock is held while the body runs \
             and waiting for it must not block the thread; write `async fn`",
        ));
    }
    errors.extend(check_return(&sig.output, sig));
    errors.finish()
}

/// What to say when the function is not `async` because another attribute rewrote it
/// before `#[redis_locked]` ran: `#[tokio::test]` above it (the test becomes a plain `fn`
/// marked `#[test]`), or `#[async_trait]` on the impl (the method returns a boxed future,
/// with an `'async_trait` lifetime).
fn rewritten_by_another_attribute(sig: &Signature, attrs: &[Attribute]) -> Option<&'static str> {
    let is_test = attrs.iter().any(|attr| {
        attr.path()
            .segments
            .last()
            .is_some_and(|last| last.ident == "test")
    });
    if is_test {
        return Some(
            "this is no longer an `async fn`: an attribute above #[redis_locked] \
             (`#[tokio::test]`) already turned it into a synchronous test; put \
             #[redis_locked(..)] above #[tokio::test], so that it runs first and the test \
             attribute wraps the locked `async fn`",
        );
    }
    let async_trait = sig
        .generics
        .lifetimes()
        .any(|lifetime| lifetime.lifetime.ident == "async_trait");
    if async_trait {
        return Some(
            "this is no longer an `async fn`: another attribute (`#[async_trait]` on the \
             impl, which expands before the attributes of its methods) rewrote it into a \
             `fn` returning a boxed future before #[redis_locked] ran; no order of the two \
             works: drop #[async_trait] where native `async fn` in traits will do (Rust \
             1.75+), or put the locked work in an inherent #[redis_locked] `async fn` that \
             the trait method calls",
        );
    }
    None
}

fn check_return(output: &ReturnType, sig: &Signature) -> Option<syn::Error> {
    let ty = match output {
        ReturnType::Type(_, ty) => ty,
        ReturnType::Default => {
            return Some(syn::Error::new(
                sig.ident.span(),
                format!("{NEED} ({WHY}); add a return type, e.g. `-> Result<(), MyError>`"),
            ))
        }
    };
    let Some(what) = not_a_result(ty) else {
        return foreign_error_type(ty);
    };
    let fix = match ty.as_ref() {
        Type::ImplTrait(bounds) if is_future(bounds) => {
            "an `async fn` already returns a future: write `-> Result<T, E>`".to_owned()
        }
        // A web handler's `impl IntoResponse`: the `Ok` side of the `Result`.
        Type::ImplTrait(bounds) => format!(
            "wrap it: `-> Result<{}, MyError>` (for a web handler, `MyError` answers the \
             response too: `LockError` does with the `axum` feature)",
            quote::ToTokens::to_token_stream(bounds)
        ),
        // `bool` -> `Result<bool, MyError>`: keep what the function computes.
        Type::Path(_) if PRIMITIVES.contains(&what.trim_matches('`')) || what == "`String`" => {
            format!("e.g. `-> Result<{}, MyError>`", what.trim_matches('`'))
        }
        // `Box<dyn Error>`: an error type written where the whole `Result` belongs.
        Type::Path(_) if what == "`Box`" => "a boxed error goes in the `Err` side, e.g. \
             `-> Result<T, Box<dyn Error + Send + Sync>>` (it converts from `LockError`)"
            .to_owned(),
        // `Option<u64>` -> `Result<Option<u64>, MyError>`.
        Type::Path(_) => format!(
            "e.g. `-> Result<{}<T>, MyError>` to keep it",
            what.trim_matches('`')
        ),
        Type::Tuple(tuple) if tuple.elems.is_empty() => "e.g. `-> Result<(), MyError>`".to_owned(),
        _ => "e.g. `-> Result<u64, MyError>`".to_owned(),
    };
    // `new_spanned` underlines the whole type, not just its first token.
    Some(syn::Error::new_spanned(
        ty,
        format!("{NEED}, found {what} ({WHY}); {fix}"),
    ))
}

/// Whether `impl ...` names `Future` (the future an `async fn` already returns).
fn is_future(bounds: &syn::TypeImplTrait) -> bool {
    bounds.bounds.iter().any(|bound| match bound {
        syn::TypeParamBound::Trait(t) => {
            t.path.segments.last().is_some_and(|s| s.ident == "Future")
        }
        _ => false,
    })
}

/// An error for `Result<T, E>` whose `E` is a std type that can never take a `LockError`
/// (`String`, `&str`): `impl From<LockError> for String` is forbidden to the user by Rust's
/// orphan rule (neither the trait nor the type is theirs), so "add the impl" would be
/// wrong advice.
fn foreign_error_type(ty: &Type) -> Option<syn::Error> {
    let error = result_error_type(ty)?;
    let name = match error {
        Type::Reference(reference) => match reference.elem.as_ref() {
            Type::Path(path) if path.path.is_ident("str") => "&str",
            _ => return None,
        },
        Type::Path(path) => match well_known_non_result(path).as_deref() {
            Some("String") => "String",
            _ => return None,
        },
        _ => return None,
    };
    Some(syn::Error::new_spanned(
        error,
        format!(
            "{NEED}, and `{name}` cannot be one: `impl From<LockError> for {name}` is not \
             allowed outside the crates that define them (Rust's orphan rule); return your own \
             error type with `impl From<lock_core::LockError>`, or `Result<T, \
             lock_core::LockError>`, or `Box<dyn std::error::Error + Send + Sync>`, and turn \
             it into a `{name}` with `map_err` where you need one"
        ),
    ))
}

/// A description of `ty` when it certainly is not a `Result` (or an alias of one).
fn not_a_result(ty: &Type) -> Option<String> {
    let what = match ty {
        Type::Paren(inner) => return not_a_result(&inner.elem),
        Type::Group(inner) => return not_a_result(&inner.elem),
        Type::Tuple(tuple) if tuple.elems.is_empty() => "`()`",
        Type::Tuple(_) => "a tuple",
        Type::Reference(_) => "a reference",
        Type::ImplTrait(_) => "`impl Trait`",
        Type::TraitObject(_) => "a trait object",
        Type::Array(_) => "an array",
        Type::Slice(_) => "a slice",
        Type::Ptr(_) => "a raw pointer",
        Type::FnPtr(_) => "a function pointer",
        Type::Never(_) => "`!`",
        Type::Infer(_) => "`_`",
        Type::Path(path) => return well_known_non_result(path).map(|name| format!("`{name}`")),
        // Macros and anything syn does not model: let rustc decide.
        _ => return None,
    };
    Some(what.to_owned())
}

/// Primitive types and the std types people return by mistake (`Option`, `String`, `Vec`,
/// `Box`),
/// when written as a bare name or through `std::`/`core::`/`alloc::`. Nobody aliases these
/// names to a `Result`; any other path may be an alias and passes.
fn well_known_non_result(path: &TypePath) -> Option<String> {
    const STD: [&str; 4] = ["Option", "String", "Vec", "Box"];
    if path.qself.is_some() {
        return None;
    }
    let segments: Vec<String> = path
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    let last = segments.last()?;
    let bare = segments.len() == 1 && path.path.leading_colon.is_none();
    let from_std = segments.len() > 1 && ["std", "core", "alloc"].contains(&segments[0].as_str());
    let is_primitive = bare && PRIMITIVES.contains(&last.as_str());
    let is_std = (bare || from_std) && STD.contains(&last.as_str());
    (is_primitive || is_std).then(|| last.clone())
}

/// True when `ty` mentions `impl Trait` anywhere (`Result<impl Display, E>`): such a type
/// cannot be written in a `let`, so the expansion leaves out its type-inference hint.
/// The `E` of a return type written `Result<T, E>` (any path ending in `Result` with two
/// type arguments): the expansion checks it for `From<LockError>` on its own, so that the
/// error says what to write there.
pub(crate) fn result_error_type(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let types: Vec<&Type> = args
        .args
        .iter()
        .filter_map(|arg| match arg {
            syn::GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    match types.as_slice() {
        [_, error] if args.args.len() == 2 => Some(error),
        _ => None,
    }
}

pub(crate) fn mentions_impl_trait(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut finder = Finder(false);
    finder.visit_type(ty);
    finder.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(text: &str) -> Signature {
        syn::parse_str::<syn::ItemFn>(&format!("{text} {{}}"))
            .unwrap()
            .sig
    }

    fn error(text: &str) -> Option<String> {
        check(&sig(text), &[]).map(|err| err.to_string())
    }

    #[test]
    fn accepts_results_and_aliases() {
        for ret in [
            "Result<bool, AppError>",
            "std::result::Result<(), E>",
            "::core::result::Result<u8, E>",
            "anyhow::Result<u8>",
            "io::Result<()>",
            "Result<u8>",
            "MyAlias",
            "<T as Trait>::Output",
            "Result<impl Display, E>",
            "my_macro!()",
        ] {
            assert_eq!(error(&format!("async fn f() -> {ret}")), None, "{ret}");
        }
    }

    #[test]
    fn rejects_visible_non_results() {
        for (ret, what) in [
            ("()", "found `()`"),
            ("bool", "found `bool`"),
            ("(u8, u8)", "a tuple"),
            ("&'static str", "a reference"),
            (
                "impl Future<Output = Result<(), E>>",
                "already returns a future",
            ),
            ("Option<u8>", "`-> Result<Option<T>, MyError>` to keep it"),
            ("std::option::Option<u8>", "`Option`"),
            ("String", "`String`"),
            ("Box<dyn Error>", "goes in the `Err` side"),
            ("std::boxed::Box<dyn Error + Send>", "found `Box`"),
        ] {
            let err = error(&format!("async fn f() -> {ret}"));
            let err = err.unwrap_or_else(|| panic!("{ret} should be rejected"));
            assert!(err.contains(what), "{ret}: {err}");
            assert!(err.contains("must return `Result<T, E>`"), "{err}");
            assert!(err.contains("found"), "{err}");
        }
        assert!(error("async fn f()").unwrap().contains("add a return type"));
    }

    #[test]
    fn a_handlers_response_type_is_told_to_go_in_the_ok_side() {
        let err = error("async fn f() -> impl IntoResponse").expect("rejected");
        assert!(
            err.contains("`-> Result<impl IntoResponse, MyError>`"),
            "{err}"
        );
        assert!(!err.contains("future"), "{err}");
    }

    #[test]
    fn std_error_types_are_not_told_to_implement_from() {
        for (ret, name) in [
            ("Result<u64, String>", "`String` cannot be one"),
            (
                "std::result::Result<(), std::string::String>",
                "`String` cannot be one",
            ),
            ("Result<u64, &'static str>", "`&str` cannot be one"),
        ] {
            let err = error(&format!("async fn f() -> {ret}")).expect("rejected");
            assert!(
                err.contains(name) && err.contains("orphan rule"),
                "{ret}: {err}"
            );
        }
        for ret in [
            "Result<u64, MyError>",
            "Result<u64, Box<dyn Error>>",
            "io::Result<u64>",
        ] {
            assert_eq!(error(&format!("async fn f() -> {ret}")), None, "{ret}");
        }
    }

    #[test]
    fn requires_async_and_reports_both_problems() {
        let err = check(&sig("fn f() -> bool"), &[]).unwrap();
        let all: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(all.len(), 2);
        assert!(all[0].contains("requires an `async fn`"));
        assert!(error("fn f() -> Result<(), E>")
            .unwrap()
            .contains("async fn"));
    }

    #[test]
    fn finds_impl_trait() {
        let ty = |text: &str| syn::parse_str::<Type>(text).unwrap();
        assert!(mentions_impl_trait(&ty("Result<impl Display, E>")));
        assert!(!mentions_impl_trait(&ty("Result<Box<dyn Display>, E>")));
    }
}
