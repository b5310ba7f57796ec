//! What one `Locker` knows locally about each lock name it is using: which of its leases
//! holds it, who is queued for it, and a signal fired when it is released.
//!
//! This is what keeps waiters in one process from stampeding Redis: they queue on a FIFO
//! gate, only the head of the queue talks to Redis, and while a lease of this same locker
//! holds the lock the head does not even ask: it waits for that lease's release signal (or
//! the end of its validity, in case it was leaked).

use std::any::Any;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Waker;

use hashbrown::HashTable;
use std::time::Instant;

use crate::signal::Wake;

/// Independent shards so that tasks locking different names rarely meet on one mutex.
const SHARDS: usize = 16;

/// States kept per shard for reuse: an uncontended lock cycle then allocates nothing here.
const SPARES: usize = 16;

/// Names per shard remembered as contended (see [`NameRef::contended_lately`]).
const CONTENDED: usize = 4;

/// How long a name stays remembered as contended after this locker last queued for it.
const CONTENDED_FOR: std::time::Duration = std::time::Duration::from_millis(200);

#[derive(Default)]
pub(crate) struct LocalNames {
    shards: [Mutex<Shard>; SHARDS],
    hasher: std::collections::hash_map::RandomState,
}

/// One shard of the map. A name is hashed once per `get`: the hash picks the shard, finds
/// the entry, and stays in the state for its removal (a `HashSet` would hash the name again
/// for each of these, several SipHash runs per lock cycle).
#[derive(Default)]
struct Shard {
    /// The names in use: each state, found by the hash and name it carries.
    names: HashTable<Arc<NameState>>,
    /// States of names no longer in use, to be reused for the next new name.
    spares: Vec<Arc<NameState>>,
    /// Names this locker recently queued for in Redis (hash, until when), kept beyond
    /// their states: a ring, overwritten oldest first.
    contended: [(u64, Option<Instant>); CONTENDED],
    /// The ring's next slot.
    next_contended: usize,
}

/// The local state of one name.
#[derive(Default)]
pub(crate) struct NameState {
    /// The name; set while the state is in the map, reused (capacity and all) as a spare.
    name: String,
    /// The name's hash (by the map's hasher).
    hash: u64,
    /// FIFO queue of this locker's waiters; its holder is the one that talks to Redis.
    pub gate: tokio::sync::Mutex<()>,
    /// Waiters queued on (or holding) the gate.
    queued: AtomicUsize,
    /// Fired when a lease of this name is released here, or when Redis reports a release or
    /// a turn in the waiter queue (through the notifier), or when the notifier lost
    /// messages.
    pub released: Arc<Wake>,
    /// The lease of this locker holding the name, if any.
    holder: Mutex<Option<Holder>>,
    /// This locker's place in the name's Redis-side waiter queue. Its lock also covers
    /// leaving the local queue (`Queued::leave`), so that "the last local waiter left, and
    /// the Redis place with it" is one step no newcomer can slip into.
    place: Mutex<RedisPlace>,
}

/// The lease of this locker that holds a name.
struct Holder {
    serial: u64,
    /// The end of its local validity.
    until: Instant,
    /// Who it counts as held by, for deadlock detection: `None` for nobody (not yet
    /// known, dropped, or used on another task since).
    claim: Option<Claim>,
}

/// Who took a lease, and when.
struct Claim {
    owner: Owner,
    /// When the lease was granted: it counts only for waits that began later (a sibling
    /// future's grant while this one already waited is not this one's).
    granted: Instant,
    /// The lease's state (`engine::held::Held`, which this module does not name: it
    /// names this one), for a wait of its owner to name it.
    lease: Weak<dyn Any + Send + Sync>,
}

/// This locker's place in a name's Redis-side waiter queue (one entry per locker: its
/// channel), which its local waiters pass on to each other.
#[derive(Default)]
struct RedisPlace {
    /// A queued attempt may have put this locker in the queue (it is set before the attempt
    /// is sent), and no attempt has taken the lock since: the last local waiter to leave
    /// without the lock must take the locker out.
    queued: bool,
    /// That leave, in flight: signalled when it ends. A newcomer's queued attempt waits for
    /// it, or the leave could land after the attempt and remove the newcomer's entry.
    leaving: Option<Arc<tokio::sync::Notify>>,
}

/// A leave of the Redis queue in flight (see [`Queued::leave`]); dropping it, once the leave
/// has ended (or could not start), lets newcomers queue again.
pub(crate) struct Leaving {
    state: NameRef,
    done: Arc<tokio::sync::Notify>,
}

impl Drop for Leaving {
    fn drop(&mut self) {
        let mut place = self.state.place();
        if place
            .leaving
            .as_ref()
            .is_some_and(|done| Arc::ptr_eq(done, &self.done))
        {
            place.leaving = None;
        }
        drop(place);
        self.done.notify_waiters();
    }
}

/// A counted reference to a name's state; the entry leaves the map with its last user.
pub(crate) struct NameRef {
    names: Arc<LocalNames>,
    state: Arc<NameState>,
}

impl LocalNames {
    pub fn get(self: &Arc<Self>, name: &str) -> NameRef {
        let hash = self.hasher.hash_one(name);
        let mut shard = self.shard(hash);
        let found = shard.names.find(hash, |state| state.name == name).cloned();
        let state = match found {
            Some(state) => state,
            None => {
                let state = shard.fresh_state(name, hash);
                shard
                    .names
                    .insert_unique(hash, Arc::clone(&state), |state| state.hash);
                state
            }
        };
        NameRef {
            names: Arc::clone(self),
            state,
        }
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        // Bits the table itself does not use: its bucket index takes the low bits and its
        // tags the top seven, so a shard's names still spread over all its buckets.
        let index = ((hash >> 40) as usize) % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn shard_of(&self, name: &str) -> usize {
        ((self.hasher.hash_one(name) >> 40) as usize) % SHARDS
    }
}

impl Shard {
    /// A state for `name`: a spare when one is free, else a new one.
    fn fresh_state(&mut self, name: &str, hash: u64) -> Arc<NameState> {
        while let Some(mut spare) = self.spares.pop() {
            // Free only once its last NameRef has finished dropping.
            let Some(state) = Arc::get_mut(&mut spare) else {
                continue;
            };
            match Arc::get_mut(&mut state.released) {
                Some(wake) => *wake = Wake::default(),
                // Something still holds the old signal (a notifier route on its way out).
                None => state.released = Arc::default(),
            }
            state.name.clear();
            state.name.push_str(name);
            state.hash = hash;
            *state
                .holder
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner) = None;
            *state
                .place
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner) = RedisPlace::default();
            return spare;
        }
        Arc::new(NameState {
            name: name.to_owned(),
            hash,
            ..NameState::default()
        })
    }
}

impl Clone for NameRef {
    fn clone(&self) -> NameRef {
        NameRef {
            names: Arc::clone(&self.names),
            state: Arc::clone(&self.state),
        }
    }
}

impl Drop for NameRef {
    fn drop(&mut self) {
        let mut shard = self.names.shard(self.state.hash);
        // The map's reference and ours: nobody else uses this name now.
        if Arc::strong_count(&self.state) == 2 {
            let ours = shard
                .names
                .find_entry(self.state.hash, |state| Arc::ptr_eq(state, &self.state));
            if let Ok(entry) = ours {
                let (state, _) = entry.remove();
                if shard.spares.len() < SPARES && state.is_idle() {
                    shard.spares.push(state);
                }
            }
        }
    }
}

impl NameRef {
    /// Whether this locker queued for the name in Redis within the last
    /// [`CONTENDED_FOR`] (as of `now`): its next request then queues at once, in the one
    /// script that also takes a free lock, rather than trying a plain `SET` first that a
    /// contended name refuses (a call per acquisition saved under contention).
    pub fn contended_lately(&self, now: Instant) -> bool {
        let shard = self.names.shard(self.state.hash);
        shard
            .contended
            .iter()
            .any(|&(hash, until)| hash == self.state.hash && until.is_some_and(|u| u > now))
    }

    /// Records that this locker queued for the name in Redis (see
    /// [`NameRef::contended_lately`]).
    pub fn note_contended(&self, now: Instant) {
        let until = Some(now + CONTENDED_FOR);
        let mut shard = self.names.shard(self.state.hash);
        let hash = self.state.hash;
        if let Some(slot) = shard.contended.iter_mut().find(|(h, _)| *h == hash) {
            slot.1 = until;
            return;
        }
        let next = shard.next_contended;
        shard.contended[next] = (hash, until);
        shard.next_contended = (next + 1) % CONTENDED;
    }

    /// Joins the name's local queue; the returned guard leaves it.
    pub fn enqueue(&self) -> Queued<'_> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        Queued(Some(self))
    }
}

impl std::ops::Deref for NameRef {
    type Target = NameState;

    fn deref(&self) -> &NameState {
        &self.state
    }
}

impl NameState {
    /// Nobody queued, no holder and no place in the Redis queue: fit for reuse under another
    /// name.
    fn is_idle(&self) -> bool {
        let place = self.place();
        self.queued.load(Ordering::Acquire) == 0
            && !place.queued
            && place.leaving.is_none()
            && self
                .holder
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none()
    }

    fn place(&self) -> MutexGuard<'_, RedisPlace> {
        self.place.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records, before a queued attempt is sent, that it may put this locker in the Redis
    /// queue (a request dropped with the attempt in flight must still take it out).
    pub fn may_be_in_redis_queue(&self) {
        self.place().queued = true;
    }

    /// Records that an attempt took the lock: a queued one took this locker out of the
    /// Redis queue.
    pub fn out_of_redis_queue(&self) {
        self.place().queued = false;
    }

    /// Whether this locker may stand in the name's Redis queue (a waiter of this locker
    /// queued there and none has taken the lock since).
    pub fn in_redis_queue(&self) -> bool {
        self.place().queued
    }

    /// Completes once no leave of the Redis queue by this locker is in flight for the name.
    pub async fn no_leave_in_flight(&self) {
        loop {
            let Some(done) = self.place().leaving.clone() else {
                return;
            };
            let ended = done.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            // Ended between the look and the arming: look again.
            let same = self
                .place()
                .leaving
                .as_ref()
                .is_some_and(|now| Arc::ptr_eq(now, &done));
            if same {
                ended.await;
            }
        }
    }

    /// True while some waiter of this locker is queued for the name: a newcomer must queue
    /// behind it instead of barging in.
    pub fn has_queue(&self) -> bool {
        self.queued.load(Ordering::Acquire) > 0
    }

    /// Records that lease `serial` of this locker holds the name until `valid_until`: an
    /// extension keeps the owner; another lease counts as nobody's (a fresh lease is
    /// recorded with its owner by [`NameState::take`]).
    pub fn set_holder(&self, serial: u64, valid_until: Instant) {
        let mut holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        match holder.as_mut() {
            Some(held) if held.serial == serial => held.until = valid_until,
            _ => {
                *holder = Some(Holder {
                    serial,
                    until: valid_until,
                    claim: None,
                })
            }
        }
    }

    /// Records that lease `serial` of this locker, whose state is `lease`, holds the name
    /// until `valid_until`, taken by `owner` at `granted` (when its answer was read, with
    /// no await since): a later wait of the same owner counts it as held (see
    /// [`LocalNames::leases_of`]). One lock of the holder for both.
    pub fn take<L: Any + Send + Sync>(
        &self,
        serial: u64,
        valid_until: Instant,
        lease: &Arc<L>,
        owner: Owner,
        granted: Instant,
    ) {
        let lease: Weak<L> = Arc::downgrade(lease);
        let claim = Claim {
            owner,
            granted,
            lease: lease as Weak<dyn Any + Send + Sync>,
        };
        *self.holder.lock().unwrap_or_else(PoisonError::into_inner) = Some(Holder {
            serial,
            until: valid_until,
            claim: Some(claim),
        });
    }

    /// Lease `serial` is used (a method of the `Lease` called) on the current task: if it
    /// was taken on another task, it was handed over, and counts as nobody's from now on.
    pub fn used_here(&self, serial: u64) {
        let mut holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = holder.as_mut().filter(|held| held.serial == serial)
            && held
                .claim
                .as_ref()
                .is_some_and(|claim| claim.owner.runner != Runner::current())
        {
            held.claim = None;
        }
    }

    /// Forgets lease `serial` as holder (if it still is) and wakes the waiters.
    pub fn clear_holder(&self, serial: u64) {
        {
            let mut holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
            if holder.as_ref().is_some_and(|held| held.serial == serial) {
                *holder = None;
            }
        }
        self.released.wake();
    }

    /// Lease `serial` (if it still holds the name) is on its way out: dropped, its release
    /// running in the background. It still holds the name until that release is done, but
    /// it counts as nobody's any more.
    pub fn disown(&self, serial: u64) {
        let mut holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = holder.as_mut().filter(|held| held.serial == serial) {
            held.claim = None;
        }
    }

    /// When a lease of this locker holds the name: the end of its validity.
    pub fn local_holder_until(&self) -> Option<Instant> {
        let holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        holder
            .as_ref()
            .map(|held| held.until)
            .filter(|until| *until > Instant::now())
    }
}

impl LocalNames {
    /// The leases of this locker that count as held by `owner` for a wait that began at
    /// `begun`: taken by the same code (see [`Owner`]), granted before the wait began, and
    /// still valid and owned (not dropped, not used on another task since). A scan of the
    /// names in use, made when a request starts waiting (never on the fast path). Each
    /// lease's state as [`NameState::take`] was given it.
    pub fn leases_of(&self, owner: &Owner, begun: Instant) -> Vec<Arc<dyn Any + Send + Sync>> {
        let now = Instant::now();
        let mut found = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for state in shard.names.iter() {
                let holder = state.holder.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(held) = holder.as_ref().filter(|held| held.until > now) else {
                    continue;
                };
                let Some(claim) = held.claim.as_ref() else {
                    continue;
                };
                if claim.granted < begun && claim.owner.is(owner) {
                    found.extend(claim.lease.upgrade());
                }
            }
        }
        found
    }
}

/// Who a lease counts as held by, for deadlock detection: the code that awaited the
/// request that took it, told by the task (or, outside any task, the thread) that ran it
/// and the waker it was polled with, which tells apart futures that a combinator polls
/// with wakers of their own (`FuturesUnordered`, `buffer_unordered`,
/// `for_each_concurrent`) but not those polled with one waker (`join!`, `select!`).
///
/// The library cannot see a `Lease` being moved: a lease handed to another task keeps
/// counting for the code that took it until it is used (any method of the `Lease`) on
/// another task, or dropped; it then counts for nobody. So counting a lease as held may be
/// wrong: a request never refuses on its strength (it waits instead: see
/// `engine/acquire.rs`), and deadlock detection only records it (see `engine/deadlock.rs`).
#[derive(Clone)]
pub(crate) struct Owner {
    runner: Runner,
    waker: Waker,
}

/// A Tokio task, or outside any task (the future a runtime's `block_on` drives, e.g.
/// `#[tokio::main]`'s body), the thread that drives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Runner {
    fn current() -> Runner {
        match tokio::task::try_id() {
            Some(task) => Runner::Task(task),
            None => Runner::Thread(std::thread::current().id()),
        }
    }
}

impl Owner {
    /// The code polled with `cx`, on the current task.
    pub fn of(cx: &std::task::Context<'_>) -> Owner {
        Owner {
            runner: Runner::current(),
            waker: cx.waker().clone(),
        }
    }

    /// The code awaiting this (completes at once).
    pub async fn current() -> Owner {
        std::future::poll_fn(|cx| std::task::Poll::Ready(Owner::of(cx))).await
    }

    /// The same code: same task and a waker that wakes the same future. (A kept waker
    /// keeps what it wakes allocated, so its address names no other future meanwhile.)
    fn is(&self, other: &Owner) -> bool {
        self.runner == other.runner && self.waker.will_wake(&other.waker)
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("runner", &self.runner)
            .finish_non_exhaustive()
    }
}

/// A place in a name's local queue. Dropping it leaves the queue; [`Queued::leave`] does
/// too, and says whether the Redis queue must be left as well.
pub(crate) struct Queued<'a>(Option<&'a NameRef>);

impl Queued<'_> {
    /// Leaves the local queue. The last waiter to leave while this locker may still stand
    /// in the Redis queue (a request that ends without the lock: timeout, error,
    /// cancellation) gets the leave to run: the locker's place is given up at once, and
    /// newcomers' queued attempts wait until the returned guard is dropped.
    pub fn leave(mut self) -> Option<Leaving> {
        let state = self.0.take()?;
        let mut place = state.place();
        let last = state.queued.fetch_sub(1, Ordering::AcqRel) == 1;
        if !(last && place.queued) {
            return None;
        }
        place.queued = false;
        let done = Arc::new(tokio::sync::Notify::new());
        place.leaving = Some(Arc::clone(&done));
        drop(place);
        // It stood in line until now: the name is contended, however long ago its last
        // queued attempt was. This locker's next request for it then queues at once (after
        // this leave), rather than try a plain `SET` first, which does not look at the line
        // and would take a lock that lay free after an expiry ahead of those waiting.
        state.note_contended(Instant::now());
        Some(Leaving {
            state: state.clone(),
            done,
        })
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.0 {
            state.queued.fetch_sub(1, Ordering::AcqRel);
        }
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
        let in_use = |names: &LocalNames| {
            names
                .shards
                .iter()
                .map(|s| s.lock().unwrap().names.len())
                .sum::<usize>()
        };
        assert_eq!(in_use(&names), 1);
        drop(a2);
        assert_eq!(in_use(&names), 0);
    }

    #[test]
    fn a_reused_state_starts_clean_under_its_new_name() {
        let names = Arc::new(LocalNames::default());
        let a = names.get("a");
        a.set_holder(7, Instant::now() + std::time::Duration::from_secs(60));
        a.clear_holder(7);
        a.released.post(crate::signal::Hint::Granted);
        let first = Arc::as_ptr(&a.state);
        drop(a);
        // Same shard as "a", so that the spare is found.
        let other = (0..10_000)
            .map(|i| format!("n{i}"))
            .find(|n| names.shard_of(n) == names.shard_of("a"))
            .unwrap();
        let b = names.get(&other);
        assert_eq!(Arc::as_ptr(&b.state), first, "the spare is reused");
        assert_eq!(b.state.name, other);
        assert!(b.local_holder_until().is_none());
        assert!(!b.has_queue());
        assert_eq!(b.released.take_hint(), None, "no hint carried over");
        assert!(names.get("a").state.name == "a");
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
