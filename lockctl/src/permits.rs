//! Semaphores and read-write locks in `status` and `list`: every holder of a name's
//! semaphore (its lock key and `:sem`) and read-write lock (`:rw`), read through
//! lock-core (`holders()`, judged by the server's clock).

use std::time::Duration;

use lock_core::{HoldMode, Locker};
use redis::AsyncCommands as _;

use crate::exit::Failure;
use crate::store::Target;

/// One holder of a permit, a read lease or the write lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitRow {
    pub name: String,
    /// The Redis key of the semaphore or read-write lock.
    pub key: String,
    /// `permit`, `read` or `write`.
    pub kind: &'static str,
    pub holder: Option<String>,
    pub remaining: Duration,
    /// How many of the semaphore's permits it holds (1 for a read-write lease).
    pub permits: u64,
}

impl PermitRow {
    /// `permit`, `6 permits`, `read` or `write`, as `status` and `list` show it.
    pub fn kind_text(&self) -> String {
        if self.kind == "permit" && self.permits > 1 {
            format!("{} permits", self.permits)
        } else {
            self.kind.to_owned()
        }
    }
}

/// What `status` shows of a name's semaphore and read-write lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamePermits {
    /// Every holder of either.
    pub rows: Vec<PermitRow>,
    /// Requests waiting for either.
    pub waiting: u64,
    /// The semaphore's number of permits as stored with it (`None` while it is idle).
    pub capacity: Option<u64>,
}

/// Holders of `name`'s semaphore and read-write lock, how many requests wait for them, and
/// the semaphore's stored number of permits.
pub async fn of_name(locker: &Locker, target: &Target, name: &str) -> Result<NamePermits, Failure> {
    let fail = |err: lock_core::LockError| Failure::from_lock_error(&err, &target.shown_url);
    let semaphore = locker.semaphore(name, 1).holders().await.map_err(fail)?;
    let rwlock = locker.rwlock(name).holders().await.map_err(fail)?;
    let waiting = semaphore.waiting + rwlock.waiting;
    let capacity = semaphore.capacity;
    let mut rows = Vec::new();
    for (holders, suffix) in [(semaphore, "sem"), (rwlock, "rw")] {
        for holder in holders.holders {
            rows.push(PermitRow {
                name: name.to_owned(),
                key: format!("{}:{suffix}", target.layout.lock_key(name)),
                kind: match holder.mode {
                    HoldMode::Read => "read",
                    HoldMode::Write => "write",
                    _ => "permit",
                },
                holder: holder.holder,
                remaining: holder.remaining,
                permits: holder.weight,
            });
        }
    }
    Ok(NamePermits {
        rows,
        waiting,
        capacity,
    })
}

/// Every holder of a semaphore or read-write lock whose name matches the glob `pattern`
/// (SCAN, never KEYS).
pub async fn matching(
    locker: &Locker,
    target: &Target,
    pattern: &str,
) -> Result<Vec<PermitRow>, Failure> {
    let client = target.client()?;
    let fail = |err: redis::RedisError| Failure::from_redis(&err, &target.shown_url);
    let mut conn = tokio::time::timeout(target.timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| {
            Failure::unavailable(format!(
                "cannot reach Redis at {}: no answer within {:?}",
                target.shown_url, target.timeout
            ))
        })?
        .map_err(fail)?;
    let mut names = Vec::new();
    for suffix in [":sem", ":rw"] {
        for scan in crate::store::scans(&target.layout, pattern, suffix) {
            let mut keys = conn
                .scan_match::<_, Vec<u8>>(scan.pattern.as_bytes())
                .await
                .map_err(fail)?;
            let mut found = Vec::new();
            while let Some(key) = futures_util::StreamExt::next(&mut keys).await {
                found.push(key.map_err(fail)?);
            }
            drop(keys);
            for key in found {
                let Ok(key) = String::from_utf8(key) else {
                    continue;
                };
                if let Some(name) = scan.name_of(&target.layout, &key) {
                    names.push(name.to_owned());
                }
            }
        }
    }
    names.sort();
    names.dedup();
    let mut rows = Vec::new();
    for name in names {
        rows.extend(of_name(locker, target, &name).await?.rows);
    }
    Ok(rows)
}

/// A locker on the target, for reading holders through lock-core.
pub fn locker(target: &Target) -> Result<Locker, Failure> {
    Locker::builder()
        .url(target.url())
        .prefix(target.prefix.as_str())
        .command_timeout(target.timeout)
        .build()
        .map_err(|err| Failure::from_lock_error(&err, &target.shown_url))
}
