//! Unit tests of the argument parser.

use std::time::Duration;

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
    assert_eq!(args.keys[0].format_string().value(), "market:{}");
    assert_eq!(args.hold, Hold::Lock);
    assert_eq!(
        args.ttl.and_then(|ttl| ttl.literal()),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        args.wait.and_then(|wait| wait.literal()),
        Some(Duration::from_secs(90))
    );
    assert!(args.locker.is_some());
    assert!(args.krate.unwrap().is_ident("renamed"));
    let args = parse(quote!(key = "a", renew = false, on_lost = "cancel")).unwrap();
    assert_eq!(args.renew, Some(false));
    assert_eq!(args.on_lost, Some(OnLost::Cancel));
}

#[test]
fn durations_may_be_expressions() {
    let args = parse(quote!(
        key = "a",
        ttl = TTL,
        wait = Duration::from_secs(2),
        hold_at_least = self.hold
    ))
    .unwrap();
    for arg in [args.ttl, args.wait, args.hold_at_least] {
        assert!(matches!(arg, Some(DurationArg::Expr { .. })), "{arg:?}");
    }
    // Through `macro_rules!` (`$ttl:expr`): the invisible group is seen through, so a
    // literal is still checked now.
    let grouped = syn::Expr::Group(syn::ExprGroup {
        attrs: Vec::new(),
        group_token: Default::default(),
        expr: Box::new(syn::parse_quote!("0s")),
    });
    assert!(messages(quote!(key = "a", ttl = #grouped))[0].contains("more than zero"));
}

#[test]
fn renew_and_on_lost_values_are_checked() {
    assert!(
        messages(quote!(key = "a", renew = "false"))[0].contains("`renew` takes `true` or `false`")
    );
    assert!(messages(quote!(key = "a", on_lost = "abort"))[0].contains("unknown `on_lost` policy"));
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
    assert!(all[3].contains("`wait = \"5s\"`"), "{all:?}");
    assert!(
        all[3].contains("`wait = Duration::from_secs(5)`"),
        "{all:?}"
    );
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

#[test]
fn holds_other_than_a_lock() {
    use crate::hold::Hold;
    assert_eq!(
        parse(quote!(key = "a", permits = 5)).unwrap().hold,
        Hold::Permits(5)
    );
    assert_eq!(
        parse(quote!(key = "a", mode = "read")).unwrap().hold,
        Hold::Read
    );
    assert_eq!(
        parse(quote!(key = "a", mode = "write")).unwrap().hold,
        Hold::Write
    );
    let all = parse(quote!(keys = ["a:{x}", "b"], ttl = "1s")).unwrap();
    assert_eq!(all.hold, Hold::All);
    assert_eq!(all.keys.len(), 2);
    assert_eq!(all.keys[1].constant_text().value(), "b");
}

#[test]
fn hold_misuse_is_reported_together() {
    let all = messages(quote!(keys = [], permits = 0, mode = "both"));
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(all[0].contains("`keys` needs at least one"), "{all:?}");
    assert!(all[1].contains("between 1 and 1000000"), "{all:?}");
    assert!(all[2].contains("unknown `mode`"), "{all:?}");
    let all = messages(quote!(key = "a", keys = ["b"], permits = 2, mode = "read"));
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all[0].contains("either `key`"), "{all:?}");
    assert!(all[1].contains("cannot be combined"), "{all:?}");
    assert!(all[2].contains("exclusive locks only"), "{all:?}");
    assert!(messages(quote!(permits = 3))[0].starts_with("missing `key`"));
}

#[test]
fn weight_goes_with_permits_and_fits_in_them() {
    use crate::hold::Weight;
    let args = parse(quote!(key = "a", permits = 8, weight = 8)).unwrap();
    assert!(matches!(args.weight, Some(Weight::Literal(8, _))));
    let args = parse(quote!(key = "a", permits = 8, weight = job.gpus)).unwrap();
    assert!(matches!(args.weight, Some(Weight::Expr(_))));
    assert!(parse(quote!(key = "a", permits = 8))
        .unwrap()
        .weight
        .is_none());

    let msg = &messages(quote!(key = "a", permits = 8, weight = 0))[0];
    assert!(msg.contains("at least 1 and at most `permits`"), "{msg}");
    let msg = &messages(quote!(key = "a", permits = 8, weight = 9))[0];
    assert!(
        msg.contains("`weight = 9` is more than `permits = 8`"),
        "{msg}"
    );
    let msg = &messages(quote!(key = "a", weight = 2))[0];
    assert!(msg.contains("there is no semaphore here"), "{msg}");
    let msg = &messages(quote!(key = "a", mode = "read", weight = 2))[0];
    assert!(msg.contains("add `permits = N`"), "{msg}");
    let msg = &messages(quote!(key = "a", permits = 8, weight = "2"))[0];
    assert!(msg.contains("without quotes: `weight = 2`"), "{msg}");
    let msg = &messages(quote!(key = "a", permits = 8, weight = 1.5))[0];
    assert!(msg.contains("an integer literal"), "{msg}");
    let msg = &messages(quote!(key = "a", permits = 8, wieght = 2))[0];
    assert!(msg.contains("did you mean `weight`?"), "{msg}");
}
