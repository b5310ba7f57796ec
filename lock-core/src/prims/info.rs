//! What `holders()` reports about a semaphore or a read-write lock.

use std::time::Duration;

use crate::backend::permits::{RawHolders, RW_CAPACITY};
use crate::token::decode_value;

/// How a holder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldMode {
    /// One permit of a semaphore.
    Permit,
    /// The shared side of a read-write lock.
    Read,
    /// The exclusive side of a read-write lock.
    Write,
}

/// One holder of a semaphore permit or of a read-write lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitHolder {
    /// The holder's label (`app@host:pid` by default), when it stored one.
    pub holder: Option<String>,
    /// How long until its TTL ends, by the store's clock. A waiter whose turn came and who
    /// has not claimed it yet is listed too, with the rest of its claim window.
    pub remaining: Duration,
    /// How it holds.
    pub mode: HoldMode,
    /// How many permits it holds (a semaphore's [`acquire_many`](crate::Semaphore::acquire_many));
    /// 1 for a read-write lock's reader or writer.
    pub weight: u64,
}

/// Everyone holding a semaphore or a read-write lock, and how many wait.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PermitHolders {
    /// The holders, the one whose TTL ends first first.
    pub holders: Vec<PermitHolder>,
    /// Requests standing in the queue.
    pub waiting: u64,
    /// A semaphore's number of permits as stored with it: set by the first request while
    /// the semaphore is idle, binding on every request while anyone holds or waits
    /// (a request asking for another number fails with
    /// [`LockError::CapacityMismatch`](crate::LockError::CapacityMismatch)), or set with
    /// [`Semaphore::set_capacity`](crate::Semaphore::set_capacity) (then it wins over the
    /// number requests ask for). `None` while it is idle and not set (the next request
    /// stores its own number), and always for a read-write lock (its capacity is fixed).
    pub capacity: Option<u64>,
}

impl PermitHolders {
    pub(crate) fn from_raw(raw: RawHolders, rw: bool) -> PermitHolders {
        let holders = raw
            .holders
            .into_iter()
            .map(|h| PermitHolder {
                holder: decode_value(&h.value).1.map(str::to_owned),
                remaining: h.remaining,
                mode: match (rw, h.weight >= RW_CAPACITY) {
                    (false, _) => HoldMode::Permit,
                    (true, false) => HoldMode::Read,
                    (true, true) => HoldMode::Write,
                },
                weight: if rw { 1 } else { h.weight },
            })
            .collect();
        PermitHolders {
            holders,
            waiting: raw.waiting,
            capacity: raw.capacity.filter(|_| !rw),
        }
    }
}
