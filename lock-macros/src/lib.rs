//! The `#[redis_locked]` attribute of `lock_core`. Depend on `lock_core` and use it as
//! `lock_core::redis_locked`; this crate holds only the macro.
//!
//! # `#[redis_locked]`
//!
#![cfg_attr(not(doctest), doc = include_str!("redis_locked.md"))]
//!
//! # Inside the crate
//!
//! `args` parses the attribute (`ungroup` sees through `macro_rules!` groups), `template` reads the key, `duration_arg` the `ttl`/`wait`/`hold_at_least`
//! values (a string, checked by `duration` with `grammar`, the same file as lock-core's duration parser, or a
//! `Duration` expression), `bindings` collects the names parameters bind, `signature` checks the function's
//! shape, `handler` tells HTTP handlers (axum extractor parameters) from business functions,
//! and `expand` generates code that calls only `lock_core::__private`.

mod args;
mod bindings;
mod duration;
mod duration_arg;
mod errors;
mod expand;
/// lock-core's `src/duration.rs` (a link): the one duration grammar. Left out when
/// collecting doctests (see the end of this file): its example uses lock_core.
#[cfg(not(doctest))]
mod grammar;
mod handler;
mod hold;
#[cfg(test)]
mod properties;
mod signature;
mod suggest;
mod template;
mod ungroup;

use proc_macro::TokenStream;

#[cfg_attr(not(doctest), doc = include_str!("redis_locked.md"))]
#[proc_macro_attribute]
pub fn redis_locked(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::redis_locked(args.into(), item.into()).into()
}

// No doctests here (`doctest = false` in Cargo.toml): the examples of `redis_locked.md`, of
// README.md and of `grammar` use lock_core, which this crate does not depend on, even as a
// dev-dependency; they run as lock-core's doctests (lock-core/src/lib.rs). `cargo test
// --doc` runs a crate's doctests even with `doctest = false`, so what holds them is left out
// under `cfg(doctest)` too: there this crate has none.
