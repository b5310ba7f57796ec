//! What one `Locker` knows locally about each lock name it is using: which of its leases
//! holds it, who is queued for it, and a signal fired when it is released.
//!
//! This is what keeps waiters in one process from stampeding Redis: they queue on a FIFO
//! gate, only the head of the queue talks to Redis, and while a lease of this same locker
//! holds the lock the head does not even ask: it waits for that lease's release signal (or
//! the end of its validity, in case it was leaked).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::signal::Wake;

/// Independent shards so that tasks locking different names rarely meet on one mutex.
const SHARDS: usize = 16;

#[derive(Default)]
pub(crate) struct LocalNames {
    shards: [Mutex<HashMap<Arc<str>, Arc<NameState>>>; SHARDS],
    hasher: std::collections::hash_map::RandomState,
}

/// The local state of one name.
#[derive(Default)]
pub(crate) struct NameState {
    /// FIFO queue of this locker's waiters; its holder is the one that talks to Redis.
    pub gate: tokio::sync::Mutex<()>,
    /// Waiters queued on (or holding) the gate.
    queued: AtomicUsize,
    /// Fired when a lease of this name is released here, or when Redis reports a release or
    /// a turn in the waiter queue (through the notifier), or when the notifier lost
    /// messages.
    pub released: Arc<Wake>,
    /// The lease of this locker holding the name, if any: its serial and validity end.
    holder: Mutex<Option<(u64, Instant)>>,
}

/// A counted reference to a name's state; the entry leaves the map with its last user.
pub(crate) struct NameRef {
    names: Arc<LocalNames>,
    /// Shared with the map's key: cloning a `NameRef` allocates nothing.
    name: Arc<str>,
    state: Arc<NameState>,
}

impl LocalNames {
    pub fn get(self: &Arc<Self>, name: &str) -> NameRef {
        let shard = &self.shards[self.shard_of(name)];
        let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let (name, state) = match map.get_key_value(name) {
            Some((key, state)) => (Arc::clone(key), Arc::clone(state)),
            None => {
                let key: Arc<str> = Arc::from(name);
                let state = Arc::new(NameState::default());
                map.insert(Arc::clone(&key), Arc::clone(&state));
                (key, state)
            }
        };
        NameRef {
            names: Arc::clone(self),
            name,
            state,
        }
    }

    fn shard_of(&self, name: &str) -> usize {
        (self.hasher.hash_one(name) as usize) % SHARDS
    }
}

impl Clone for NameRef {
    fn clone(&self) -> NameRef {
        NameRef {
            names: Arc::clone(&self.names),
            name: Arc::clone(&self.name),
            state: Arc::clone(&self.state),
        }
    }
}

impl Drop for NameRef {
    fn drop(&mut self) {
        let shard = &self.names.shards[self.names.shard_of(&self.name)];
        let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
        // The map's reference and ours: nobody else uses this name now.
        if Arc::strong_count(&self.state) == 2 {
            map.remove(&*self.name);
        }
    }
}

impl std::ops::Deref for NameRef {
    type Target = NameState;

    fn deref(&self) -> &NameState {
        &self.state
    }
}

impl NameState {
    /// True while some waiter of this locker is queued for the name: a newcomer must queue
    /// behind it instead of barging in.
    pub fn has_queue(&self) -> bool {
        self.queued.load(Ordering::Acquire) > 0
    }

    /// How many waiters of this locker are queued for the name (the caller included).
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Joins the queue; the returned guard leaves it.
    pub fn enqueue(&self) -> Queued<'_> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        Queued(self)
    }

    /// Records that lease `serial` of this locker holds the name until `valid_until`.
    pub fn set_holder(&self, serial: u64, valid_until: Instant) {
        *self.holder.lock().unwrap_or_else(PoisonError::into_inner) = Some((serial, valid_until));
    }

    /// Forgets lease `serial` as holder (if it still is) and wakes the waiters.
    pub fn clear_holder(&self, serial: u64) {
        {
            let mut holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
            if holder.is_some_and(|(s, _)| s == serial) {
                *holder = None;
            }
        }
        self.released.wake();
    }

    /// When a lease of this locker holds the name: the end of its validity.
    pub fn local_holder_until(&self) -> Option<Instant> {
        let holder = *self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        holder
            .map(|(_, until)| until)
            .filter(|until| *until > Instant::now())
    }
}

/// A place in a name's queue.
pub(crate) struct Queued<'a>(&'a NameState);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_leave_with_their_last_user() {
        let names = Arc::new(LocalNames::default());
        let a = names.get("a");
        let a2 = names.get("a");
        assert!(Arc::ptr_eq(&a.state, &a2.state));
        drop(a);
        assert_eq!(
            names
                .shards
                .iter()
                .map(|s| s.lock().unwrap().len())
                .sum::<usize>(),
            1
        );
        drop(a2);
        assert_eq!(
            names
                .shards
                .iter()
                .map(|s| s.lock().unwrap().len())
                .sum::<usize>(),
            0
        );
    }

    #[tokio::test]
    async fn a_release_between_arming_and_waiting_is_not_lost() {
        // The acquire loop arms its wake-up before each attempt; a release that lands after
        // the failed attempt but before the wait must still wake it.
        let names = Arc::new(LocalNames::default());
        let state = names.get("x");
        let wake = state.released.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        state.set_holder(1, Instant::now() + std::time::Duration::from_secs(60));
        state.clear_holder(1); // the release, before the waiter starts waiting
        tokio::time::timeout(std::time::Duration::from_secs(5), wake)
            .await
            .expect("the armed waiter was woken");
        assert!(state.local_holder_until().is_none());
    }
}
