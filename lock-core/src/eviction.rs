//! [`EvictionCheck`]: what a `Locker` does when the server could evict held locks.

/// What a [`Locker`](crate::Locker) does when Redis could evict the keys of held locks: a
/// `maxmemory` limit is set and `maxmemory-policy` is anything but `noeviction` (the
/// `volatile-*` policies evict exactly the keys that have a TTL, which is every lock; the
/// `allkeys-*` policies any key). Under memory pressure such a server deletes lock keys
/// while their holders still work under them.
///
/// The Locker reads the policy with `INFO memory` when it first connects its watch
/// connection (at its first acquisition) and again whenever that connection is reopened (a
/// restart, a failover: behind Sentinel, on the new master). On a Redis Cluster every
/// master is read, and one that could evict locks is enough for the warning or refusal. Set with
/// [`LockerBuilder::eviction_check`](crate::LockerBuilder::eviction_check).
///
/// ```
/// use lock_core::{EvictionCheck, Locker};
///
/// let locker = Locker::builder()
///     .url("redis://127.0.0.1:6379/0")
///     .eviction_check(EvictionCheck::Refuse)
///     .build()?;
/// # let _ = locker;
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EvictionCheck {
    /// Log a `tracing` warning once (and set the `lock_eviction_risk` gauge to 1 with the
    /// `metrics` feature) when the server could evict locks, or when its policy could not
    /// be read; locks are still granted.
    #[default]
    Warn,
    /// Refuse every acquisition with [`LockError::Misconfigured`](crate::LockError::Misconfigured)
    /// while the server could evict locks, or while its policy cannot be read (`INFO`
    /// refused): the first acquisition waits for the check, within its own time (its wait,
    /// or the command timeout for a try); a server that does not answer the check by then
    /// ends it with [`LockError::Connection`](crate::LockError::Connection).
    Refuse,
    /// Do not read the policy.
    Off,
}

/// Why a server whose eviction settings are `policy` and `maxmemory` puts held locks at
/// risk, and what to change.
pub(crate) fn risk(policy: &str, maxmemory: u64) -> String {
    format!(
        "the server may evict held locks: maxmemory is {maxmemory} bytes and \
         maxmemory-policy is `{policy}`, so under memory pressure Redis deletes keys{}, and a \
         holder keeps working under a lock that is gone; set `maxmemory-policy noeviction` \
         (writes then fail when memory is full instead of dropping locks), or use a Redis \
         without a memory limit for locks",
        if policy.starts_with("volatile") {
            " with a TTL (every lock key)"
        } else {
            " (lock keys among them)"
        }
    )
}
