//! Futures of rare paths, built and boxed out of line, so that they cost the hot path's
//! poll functions nothing.
//!
//! `Box::pin(call()).await` inside an `async` body builds the callee's whole future on the
//! caller's stack before moving it into the box: the caller's poll function then reserves
//! stack for it on every poll (and probes each of its pages), whichever branch runs. A
//! Redlock or WATCH/MULTI attempt's future in the dispatch of every backend call, or the
//! connecting task in every connection lookup, made the uncontended lock's poll functions
//! reserve 10-28 KB of stack each, so that each cycle touched several times the stack the
//! raw redis-rs calls do. [`boxed`] builds the future in a function of its own, called only
//! on the rare path: the caller's frame holds a box pointer.
//!
//! Leaf layer: imports nothing of the crate.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The future `make` builds, boxed in a function of its own (see the module's docs).
/// `make` should only capture what the future needs (references, small values).
#[inline(never)]
pub(crate) fn boxed<'a, F, Fut>(make: F) -> BoxFuture<'a, Fut::Output>
where
    F: FnOnce() -> Fut,
    Fut: Future + Send + 'a,
{
    Box::pin(make())
}

#[cfg(test)]
mod tests {
    use super::boxed;

    #[tokio::test]
    async fn a_boxed_future_runs_to_its_output() {
        let word = String::from("held");
        let length = boxed(|| async { word.len() }).await;
        assert_eq!(length, 4);
    }
}
