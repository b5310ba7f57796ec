//! Deadlock detection's public side: the waits-for records of a lock
//! ([`Locker::waits_for`]), and leases a request declares it holds
//! ([`LockRequest::holding`]). The detection itself is the engine's
//! (`engine/deadlock.rs`); see [`LockError::Deadlock`](crate::LockError::Deadlock).

use std::time::Duration;

use crate::key::{KeyLayout, LockKeys};
use crate::token::decode_value;
use crate::{Lease, LockError, LockRequest, Locker};

/// Who waits for a lock while holding other locks, and what its holder waits for: the
/// deadlock detector's records about it, as [`Locker::waits_for`] reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitsFor {
    /// The lock's holder label, when it is held and its value carries one.
    pub holder: Option<String>,
    /// Whether the lock is held at all.
    pub held: bool,
    /// Requests waiting for this lock that hold other locks (requests that hold nothing
    /// are not recorded: they cannot be part of a deadlock).
    pub waiters: Vec<HoldingWaiter>,
    /// The locks this lock's holder waits for while holding it.
    pub holder_waits_for: Vec<String>,
}

/// A request waiting for a lock while holding others.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldingWaiter {
    /// The waiter's holder label (of its first held lease), when it has one.
    pub label: Option<String>,
    /// The names of the locks it holds.
    pub holding: Vec<String>,
    /// How long its record still counts if its wait does not end sooner.
    pub remaining: Duration,
}

impl Locker {
    /// The deadlock detector's records about `name`: who waits for it while holding what,
    /// and what its holder waits for (`lockctl waits NAME` prints them). Empty on backends
    /// that do not detect deadlocks (Redlock, WATCH/MULTI).
    ///
    /// ```
    /// # use lock_core::{Locker, LockError};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// let waits = locker.waits_for("orders:7").await?;
    /// assert!(!waits.held && waits.waiters.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn waits_for(&self, name: &str) -> Result<WaitsFor, LockError> {
        let engine = self.engine();
        let keys = LockKeys::new(&engine.settings().prefix, name.to_owned())?;
        let on = engine.backend().waits_on(&keys).await?;
        let layout = KeyLayout::new(&engine.settings().prefix);
        let name_of = |key: &str| layout.name_of(key).unwrap_or(key).to_owned();
        let label = |value: &str| decode_value(value).1.map(str::to_owned);
        Ok(WaitsFor {
            held: on.holder.is_some(),
            holder: on.holder.as_deref().and_then(label),
            waiters: on
                .waited_by
                .iter()
                .map(|(remaining, held)| HoldingWaiter {
                    label: held.first().and_then(|(_, value)| label(value)),
                    holding: held.iter().map(|(key, _)| name_of(key)).collect(),
                    remaining: *remaining,
                })
                .collect(),
            holder_waits_for: on
                .waits_for
                .iter()
                .map(|(key, _, _)| name_of(key))
                .collect(),
        })
    }
}

impl LockRequest {
    /// Declares that this request's task holds `lease` while the request waits, so that
    /// the wait is checked for deadlocks against it. Most leases need no declaring: those
    /// of enclosing `#[redis_locked]` functions, `using` closures and `LockLayer`
    /// handlers, and those the same code took with plain `lock()` and still holds, count
    /// already. Declare a lease the library would not count as this code's: one passed in
    /// from another task or from a sibling future (`join!`), or used on another task
    /// since it was taken. A lease of another Locker is ignored.
    ///
    /// ```
    /// # use lock_core::{Locker, LockError};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// let order = locker.lock("order:7").await?;
    /// let account = locker
    ///     .lock("account:7")
    ///     .wait(Duration::from_secs(2))
    ///     .holding(&order)
    ///     .await?;
    /// # drop((order, account));
    /// # Ok(())
    /// # }
    /// ```
    pub fn holding(mut self, lease: &Lease) -> Self {
        if let Some(held) = lease.handle().held_of(self.engine()) {
            self.declare_held(held);
        }
        self
    }
}
