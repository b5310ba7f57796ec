//! In-process locks with the same semantics as Redis ones (TTL expiry, token check, fencing
//! counters), for unit tests and single-process applications.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{Attempt, AttemptKind, Backend, RawState};
use crate::fence::{next_token, unix_micros};
use crate::key::LockKeys;
use crate::LockError;

/// After this many operations, expired entries of names nobody touched again are swept.
const SWEEP_EVERY: u64 = 1024;

#[derive(Default)]
pub(crate) struct Memory {
    state: Mutex<State>,
    /// Semaphores and read-write locks (`crate::prims`), kept apart from the locks.
    permits: std::sync::Arc<crate::backend::permits::memory::MemoryPermits>,
    /// Countdown latches (`crate::backend::latch`).
    latches: std::sync::Arc<crate::backend::latch::MemoryLatches>,
    /// Elections' records and their announcements (`crate::backend::board`).
    elections: crate::backend::board::MemoryBoard,
    /// Deadlock detection's waits-for records (`crate::backend::waits`).
    waits: crate::backend::waits::MemoryWaits,
}

#[derive(Default)]
struct State {
    locks: HashMap<String, Entry>,
    /// Fencing counters by lock key (never expire, like the Redis counters), drawn by the
    /// rule of `crate::fence` on this process's clock.
    fences: HashMap<String, u64>,
    operations: u64,
}

struct Entry {
    value: String,
    expires_at: Instant,
}

impl Memory {
    /// The live entry for `key`, dropping it first if it has expired.
    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section below leaves the maps consistent before it can panic.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.operations += 1;
        if state.operations.is_multiple_of(SWEEP_EVERY) {
            let now = Instant::now();
            state.locks.retain(|_, entry| entry.expires_at > now);
        }
        state
    }
}

impl Memory {
    pub(crate) fn elections(&self) -> &crate::backend::board::MemoryBoard {
        &self.elections
    }

    pub(crate) fn waits(&self) -> &crate::backend::waits::MemoryWaits {
        &self.waits
    }

    /// The live value on lock key `key`, unmarked (the waits-for records compare it).
    pub(crate) fn holder(&self, key: &str) -> Option<String> {
        let mut state = self.state();
        state.live(key).map(|entry| entry.value.clone())
    }

    pub(crate) fn latches(&self) -> &std::sync::Arc<crate::backend::latch::MemoryLatches> {
        &self.latches
    }

    pub(crate) fn permits(
        &self,
    ) -> &std::sync::Arc<crate::backend::permits::memory::MemoryPermits> {
        &self.permits
    }
}

impl State {
    fn live(&mut self, key: &str) -> Option<&mut Entry> {
        let now = Instant::now();
        if self.locks.get(key).is_some_and(|e| e.expires_at <= now) {
            self.locks.remove(key);
        }
        self.locks.get_mut(key)
    }
}

impl Backend for Memory {
    async fn acquire(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        fencing: bool,
        _kind: AttemptKind<'_>,
    ) -> Result<Attempt, LockError> {
        let mut state = self.state();
        if let Some(entry) = state.live(&keys.lock) {
            return Ok(Attempt::Busy {
                remaining: Some(entry.expires_at.saturating_duration_since(Instant::now())),
                holder_value: Some(entry.value.clone()),
                place: None,
            });
        }
        state.locks.insert(
            keys.lock.clone(),
            Entry {
                value: value.to_owned(),
                expires_at: Instant::now() + ttl,
            },
        );
        let fencing_token = fencing.then(|| {
            let counter = state.fences.entry(keys.lock.clone()).or_insert(0);
            *counter = next_token(*counter, unix_micros());
            *counter
        });
        Ok(Attempt::Acquired {
            fencing_token,
            listened: false,
        })
    }

    async fn release(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        let mut state = self.state();
        let ours = state.live(&keys.lock).is_some_and(|e| e.value == value);
        if ours {
            state.locks.remove(&keys.lock);
        }
        Ok(ours)
    }

    async fn extend(&self, keys: &LockKeys, value: &str, ttl: Duration) -> Result<bool, LockError> {
        let mut state = self.state();
        match state.live(&keys.lock) {
            Some(entry) if entry.value == value => {
                entry.expires_at = Instant::now() + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn inspect(&self, keys: &LockKeys) -> Result<RawState, LockError> {
        let mut state = self.state();
        let fencing_counter = state.fences.get(&keys.lock).copied();
        let (value, remaining) = match state.live(&keys.lock) {
            Some(entry) => (
                Some(entry.value.clone()),
                Some(entry.expires_at.saturating_duration_since(Instant::now())),
            ),
            None => (None, None),
        };
        Ok(RawState {
            value,
            remaining,
            fencing_counter,
            on_replicas: None,
        })
    }
}
