//! The `#[redis_locked]` attribute. Use it through `lock_core::redis_locked`.

mod args;
mod bindings;
mod duration;
mod errors;
mod expand;
mod signature;
mod suggest;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` under a distributed lock.
#[proc_macro_attribute]
pub fn redis_locked(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::redis_locked(args.into(), item.into()).into()
}
