//! The things being compared, behind one trait so a new contender is one small module.

use std::future::Future;
use std::time::Duration;

pub mod core;
pub mod naive;
pub mod raw;

/// A lock implementation under test.
pub trait Contender: Send + Sync + 'static {
    /// What a successful acquire hands back, to be given to `release`.
    type Held: Send + 'static;

    /// The name printed in tables.
    fn label(&self) -> String;

    /// One attempt, no waiting.
    fn try_lock(
        &self,
        name: &str,
        ttl: Duration,
    ) -> impl Future<Output = Option<Self::Held>> + Send;

    /// Waits up to `wait` for the lock (the contended scenarios). Contenders without a
    /// waiting strategy of their own try once.
    fn lock_wait(
        &self,
        name: &str,
        ttl: Duration,
        wait: Duration,
    ) -> impl Future<Output = Option<Self::Held>> + Send {
        let _ = wait;
        self.try_lock(name, ttl)
    }

    /// Gives the lock back.
    fn release(&self, held: Self::Held) -> impl Future<Output = ()> + Send;
}
