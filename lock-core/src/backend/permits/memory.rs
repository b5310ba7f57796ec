//! Permits in this process (`Locker::memory`): the same rules as the Redis scripts, step for
//! step (holders with an end, a FIFO queue, reservations for a claim window), with wake-ups
//! posted straight to the waiter's signal instead of published on a channel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{
    parse_member, Ask, Attempt, CapacitySet, PermitKeys, QueueWaiter, RawHolder, RawHolders,
};
use crate::backend::CLAIM_WINDOW;
use crate::signal::{Hint, Wake};

#[derive(Default)]
pub(crate) struct MemoryPermits {
    sets: Mutex<HashMap<String, Set>>,
}

impl std::fmt::Debug for MemoryPermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPermits").finish_non_exhaustive()
    }
}

/// One name's holders (member -> end), waiters (in arrival order), and the capacity stored
/// by the first request while it was idle (the set is dropped when idle again, unless its
/// capacity is pinned), or set by `set_capacity` and pinned until `pinned_until` (pushed
/// out by the permits and waiters that come while it is pinned, as the keys' expiry is on
/// Redis).
#[derive(Default)]
struct Set {
    holders: HashMap<String, Instant>,
    queue: Vec<Entry>,
    capacity: Option<u64>,
    pinned_until: Option<Instant>,
}

struct Entry {
    id: String,
    expiry: Instant,
    ask: Ask,
    value: String,
    wake: Arc<Wake>,
}

impl Entry {
    fn member(&self) -> String {
        super::member(self.ask.weight, &self.value)
    }
}

/// What an admission pass found.
struct Admitted {
    taken: bool,
    place: Option<u64>,
    blocked: bool,
}

impl Set {
    /// Whether the stored capacity is pinned (and wins over the one a request asks for).
    fn pinned(&mut self, now: Instant) -> bool {
        if self.pinned_until.is_some_and(|until| until <= now) {
            self.pinned_until = None;
        }
        self.pinned_until.is_some()
    }

    /// Dropped when nobody holds or waits and no capacity is pinned.
    fn idle(&mut self, now: Instant) -> bool {
        self.holders.is_empty() && self.queue.is_empty() && !self.pinned(now)
    }

    fn prune(&mut self, now: Instant) -> u64 {
        self.holders.retain(|_, end| *end > now);
        self.holders.keys().map(|m| parse_member(m).0).sum()
    }

    fn first_end(&self, now: Instant) -> Option<Duration> {
        self.holders
            .values()
            .min()
            .map(|end| end.saturating_duration_since(now))
    }

    /// The scripts' `admit`: hands free capacity to the queue in order; `me` takes its
    /// permit directly.
    fn admit(
        &mut self,
        now: Instant,
        mut sum: u64,
        me: Option<&str>,
        ttl: Duration,
        announce: bool,
    ) -> Admitted {
        self.queue.retain(|entry| entry.expiry > now);
        let mut admitted = Admitted {
            taken: false,
            place: None,
            blocked: false,
        };
        let mut handed = false;
        let mut first_blocked = None;
        let mut position = 0;
        let mut index = 0;
        while index < self.queue.len() {
            let entry = &self.queue[index];
            let member = entry.member();
            if self.holders.contains_key(&member) {
                index += 1;
                continue;
            }
            let capacity = self.capacity.unwrap_or(entry.ask.capacity);
            if first_blocked.is_none() && sum + entry.ask.weight <= capacity {
                sum += entry.ask.weight;
                handed = true;
                if Some(entry.id.as_str()) == me {
                    self.holders.insert(member, now + ttl);
                    self.queue.remove(index);
                    admitted.taken = true;
                    continue;
                }
                self.holders.insert(member, now + CLAIM_WINDOW);
                let entry = &mut self.queue[index];
                entry.expiry = now + CLAIM_WINDOW;
                entry.wake.post(Hint::Granted);
                index += 1;
                continue;
            }
            first_blocked.get_or_insert(index);
            if Some(entry.id.as_str()) == me {
                admitted.place = Some(position);
            }
            position += 1;
            index += 1;
            if me.is_none() || admitted.place.is_some() {
                break;
            }
        }
        admitted.blocked = first_blocked.is_some();
        if let Some(first) = first_blocked.filter(|_| announce || handed) {
            let entry = &self.queue[first];
            if Some(entry.id.as_str()) != me {
                let left = self.first_end(now).unwrap_or(Duration::ZERO);
                entry.wake.post(Hint::Head(left));
            }
        }
        admitted
    }
}

impl MemoryPermits {
    fn sets(&self) -> MutexGuard<'_, HashMap<String, Set>> {
        // Every critical section leaves the sets consistent before it could panic.
        self.sets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn acquire(
        &self,
        keys: &PermitKeys,
        member: &str,
        ttl: Duration,
        ask: Ask,
        waiter: Option<&QueueWaiter<'_>>,
    ) -> Attempt {
        let now = Instant::now();
        let mut sets = self.sets();
        let set = sets.entry(keys.holders.clone()).or_default();
        let sum = set.prune(now);
        set.queue.retain(|entry| entry.expiry > now);
        if set.pinned(now)
            && let Some(stored) = set.capacity
        {
            if ask.weight > stored {
                return Attempt::Mismatch { stored };
            }
            // Judged against the stored number, whatever the request asks; the pin
            // lives as long as what comes while it is there.
            let life = waiter.map_or(Duration::ZERO, |w| w.life + CLAIM_WINDOW);
            let until = now + ttl.max(life);
            set.pinned_until = set.pinned_until.max(Some(until));
        }
        match set.capacity {
            Some(_) if set.pinned_until.is_some() => {}
            Some(stored) if stored != ask.capacity => {
                if sum > 0 || !set.queue.is_empty() {
                    return Attempt::Mismatch { stored };
                }
                set.capacity = Some(ask.capacity);
            }
            Some(_) => {}
            None => set.capacity = Some(ask.capacity),
        }
        let me = waiter.map(|w| w.id);
        if let Some(end) = set.holders.get_mut(member) {
            // Reserved for us: claim it.
            *end = now + ttl;
            set.queue.retain(|entry| Some(entry.id.as_str()) != me);
            return Attempt::Taken;
        }
        if let Some(waiter) = waiter {
            let expiry = now + waiter.life + CLAIM_WINDOW;
            match set.queue.iter_mut().find(|entry| entry.id == waiter.id) {
                Some(entry) => entry.expiry = expiry,
                None => set.queue.push(Entry {
                    id: waiter.id.to_owned(),
                    expiry,
                    ask,
                    value: parse_member(member).1.to_owned(),
                    wake: Arc::clone(waiter.wake),
                }),
            }
        }
        let admitted = set.admit(now, sum, me, ttl, false);
        if admitted.taken {
            return Attempt::Taken;
        }
        let sum: u64 = set.holders.keys().map(|m| parse_member(m).0).sum();
        let capacity = set.capacity.unwrap_or(ask.capacity);
        if me.is_none() && !admitted.blocked && sum + ask.weight <= capacity {
            set.holders.insert(member.to_owned(), now + ttl);
            return Attempt::Taken;
        }
        let first_end = set.first_end(now);
        if set.idle(now) {
            sets.remove(&keys.holders);
        }
        Attempt::Busy {
            first_end,
            place: admitted.place,
            capacity,
            server_ms: None,
        }
    }

    pub fn release(&self, keys: &PermitKeys, member: &str, leaving: Option<&str>) -> bool {
        let now = Instant::now();
        let mut sets = self.sets();
        let Some(set) = sets.get_mut(&keys.holders) else {
            return false;
        };
        let ours = set.holders.remove(member).is_some_and(|end| end > now);
        if let Some(id) = leaving {
            set.queue.retain(|entry| entry.id != id);
        }
        let sum = set.prune(now);
        set.admit(now, sum, None, Duration::ZERO, true);
        if set.idle(now) {
            sets.remove(&keys.holders);
        }
        ours
    }

    /// The script `permits_set_capacity`: stores `capacity` and pins it for at least
    /// `pin`; the room it makes goes to the queue in order at once.
    pub fn set_capacity(&self, keys: &PermitKeys, capacity: u64, pin: Duration) -> CapacitySet {
        let now = Instant::now();
        let mut sets = self.sets();
        let set = sets.entry(keys.holders.clone()).or_default();
        set.queue.retain(|entry| entry.expiry > now);
        if let Some(above) = set.queue.iter().find(|e| e.ask.weight > capacity) {
            return CapacitySet::WaiterAbove {
                weight: above.ask.weight,
            };
        }
        let before = set.capacity.replace(capacity);
        set.pinned(now);
        set.pinned_until = set.pinned_until.max(Some(now + pin));
        let sum = set.prune(now);
        set.admit(now, sum, None, Duration::ZERO, true);
        CapacitySet::Set { before }
    }

    /// The scripts' `permits_reweigh`: `member` becomes `lighter` with the same end, and the
    /// weight it frees goes to the queue in order.
    pub fn reweigh(&self, keys: &PermitKeys, member: &str, lighter: &str) -> bool {
        let now = Instant::now();
        let mut sets = self.sets();
        let Some(set) = sets.get_mut(&keys.holders) else {
            return false;
        };
        match set.holders.remove(member) {
            Some(end) if end > now => {
                set.holders.insert(lighter.to_owned(), end);
            }
            _ => return false,
        }
        let sum = set.prune(now);
        set.admit(now, sum, None, Duration::ZERO, true);
        true
    }

    pub fn extend(&self, keys: &PermitKeys, member: &str, ttl: Duration) -> bool {
        let now = Instant::now();
        let mut sets = self.sets();
        match sets
            .get_mut(&keys.holders)
            .and_then(|set| set.holders.get_mut(member))
        {
            Some(end) if *end > now => {
                *end = now + ttl;
                true
            }
            _ => false,
        }
    }

    pub fn holders(&self, keys: &PermitKeys) -> RawHolders {
        let now = Instant::now();
        let mut sets = self.sets();
        let Some(set) = sets.get_mut(&keys.holders) else {
            return RawHolders::default();
        };
        let mut holders: Vec<RawHolder> = set
            .holders
            .iter()
            .filter(|(_, end)| **end > now)
            .map(|(member, end)| {
                let (weight, value) = parse_member(member);
                RawHolder {
                    weight,
                    value: value.to_owned(),
                    remaining: end.saturating_duration_since(now),
                }
            })
            .collect();
        holders.sort_by_key(|h| h.remaining);
        let waiting = set.queue.iter().filter(|e| e.expiry > now).count();
        let idle = holders.is_empty() && waiting == 0 && !set.pinned(now);
        RawHolders {
            holders,
            waiting: u64::try_from(waiting).unwrap_or(u64::MAX),
            capacity: set.capacity.filter(|_| !idle),
        }
    }
}
