//! Leader election (facade), etcd's Campaign / Resign / Leader / Observe and Kubernetes'
//! lease election on the locks of this crate: leadership is the election's lock, held with a
//! fencing token (the term) and renewed; candidates queue for it in FIFO order; the record
//! observers read is written and announced by the leader alone
//! ([`backend::board`](crate::backend::board)).

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::backend::board::{self, Feed, Next, Record};
use crate::key::LockKeys;
use crate::token::decode_value;
use crate::{Lease, LeaseHandle, LockError, Locker};

/// The pause before a candidate stands in line again after Redis was out of reach.
const CAMPAIGN_RETRY: Duration = Duration::from_millis(500);

/// How long a leader's lease lasts without renewal (Kubernetes' `leaseDuration`): a crashed
/// leader is replaced this long after its last renewal at the latest.
const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// One election, by name: campaign for it, or read and observe who leads. From
/// [`Locker::election`].
///
/// ```
/// # use lock_core::{Locker, LockError};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let locker = Locker::memory();
/// let election = locker.election("billing-scheduler");
/// let leadership = election.campaign().await?; // waits until this process leads
/// let term = leadership.term(); // hand it to the stores the leader writes to
///
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.term, term);
///
/// leadership.resign().await?; // the next candidate in line leads at once
/// assert!(election.leader().await?.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    locker: Locker,
    name: String,
    lease: Duration,
}

impl Locker {
    /// The election `name`: its leadership is the lock `name` (so `lockctl status name`
    /// shows the leader), held with a fencing token, the leader's term; its record is at
    /// `<prefix>{name}:leader`. Needs one Redis (or Sentinel, or a Cluster) with Lua
    /// scripts, or the in-memory store: Redlock and WATCH/MULTI lockers answer
    /// [`LockError::Config`].
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            locker: self.clone(),
            name: name.into(),
            lease: DEFAULT_LEASE,
        }
    }
}

/// Who leads (or led) an election.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's label (`app@host:pid`), when its Locker stores one.
    pub label: Option<String>,
    /// Its term: the election lock's fencing token, strictly increasing across leaders.
    pub term: u64,
    /// Since when it leads, by the store's clock (`None` in the moment between winning and
    /// announcing it).
    pub since: Option<SystemTime>,
}

/// A change of leadership, as observers see it: in order, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderChange {
    /// A new leader, with a term higher than any seen before.
    Elected(Leader),
    /// The leader of `term` resigned.
    Resigned {
        /// The term that ended.
        term: u64,
        /// Its leader's label.
        label: Option<String>,
        /// When, by the store's clock.
        at: SystemTime,
    },
    /// The lease of the leader of `term` ran out without a resignation (it crashed, was
    /// paused or cut off from the store) and nobody has taken over: the leadership is
    /// vacant. Observers see it within [`Observer::EXPIRY_SLACK`] of the lease's end by the store's
    /// clock. If another candidate was waiting, its `Elected` follows instead.
    Expired {
        /// The term that ended.
        term: u64,
        /// Its leader's label.
        label: Option<String>,
    },
}

impl Election {
    /// How long the leader's lease lasts without renewal (default 15 s, Kubernetes'
    /// `leaseDuration`). The leader renews it every third of this; a crashed or paused
    /// leader is replaced at most this long after its last renewal, and a paused leader
    /// knows it is no longer leader (by its local clock) before that.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn keys(&self) -> Result<LockKeys, LockError> {
        LockKeys::new(&self.locker.engine().settings().prefix, self.name.clone())
    }

    /// Waits until this process leads: candidates queue for the election's lock in FIFO
    /// order (the lock's waiter queue), without polling, for as long as it takes. Dropping
    /// the future withdraws the candidacy. The leadership returned carries its term, is
    /// renewed in the background, and tells when it is lost.
    pub async fn campaign(&self) -> Result<Leadership, LockError> {
        let keys = self.keys()?;
        board::supported(self.locker.engine().backend(), &keys.name)?;
        // Said as the election's setting, not as the TTL of a lock.
        if let Err(LockError::InvalidDuration { name, reason, .. }) =
            crate::limits::validate_ttl(&keys.name, self.lease)
        {
            return Err(LockError::InvalidDuration {
                name,
                what: "election lease",
                value: self.lease,
                reason,
            });
        }
        let lease = loop {
            let request = self
                .locker
                .lock(self.name.clone())
                .ttl(self.lease)
                .wait(crate::MAX_WAIT)
                .fencing()
                .auto_renew();
            match request.await {
                Ok(lease) => break lease,
                // A day without a turn: stand in line again.
                Err(LockError::Timeout { .. }) => continue,
                // Redis out of reach for the locker's unreachable timeout: a candidate
                // waits for as long as it takes, so it stands in line again once Redis
                // answers (a server that refuses this client fails at once).
                Err(err) if err.is_transient() => {
                    tracing::debug!(election = %self.name, %err, "campaign: Redis out of reach; trying again");
                    tokio::time::sleep(CAMPAIGN_RETRY).await;
                    continue;
                }
                Err(err) => return Err(err),
            }
        };
        let term = lease.fencing_token().ok_or_else(|| {
            LockError::connection(
                &self.name,
                "the election's lock came without a fencing token",
            )
        })?;
        let label = self.locker.engine().settings().label.clone();
        let since = board::proclaim(
            self.locker.engine().backend(),
            &keys,
            lease.stored_value(),
            true,
            term,
            label.as_deref().unwrap_or(""),
        )
        .await?;
        let Some(since) = since else {
            // Lost between winning and announcing it (a very short lease, a stall).
            return Err(LockError::Lost { name: keys.name });
        };
        tracing::info!(election = %self.name, term, "elected leader");
        Ok(Leadership {
            lease,
            keys,
            term,
            label,
            since,
        })
    }

    /// Who leads now, if anyone (one round trip, two on Redis): never a leader whose lease
    /// has ended (the election's lock expires with it), announced or not.
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        let keys = self.keys()?;
        current(&self.locker, &keys).await
    }

    /// Follows the election: [`Observer::current`] is who leads now, and
    /// [`Observer::next`] waits for each change, delivered once and in order (terms only
    /// grow), announced on a pub/sub channel: no polling.
    pub async fn observe(&self) -> Result<Observer, LockError> {
        let keys = self.keys()?;
        let mut observer = Observer {
            locker: self.locker.clone(),
            keys,
            feed: None,
            current: None,
            seen: None,
            look_at: None,
        };
        observer.resubscribe().await?;
        Ok(observer)
    }
}

/// Reads the lock (who holds it, its term) and the record (since when).
async fn current(locker: &Locker, keys: &LockKeys) -> Result<Option<Leader>, LockError> {
    Ok(current_lease(locker, keys).await?.map(|(leader, _)| leader))
}

/// [`current`], with what is left of the leader's lease by the store's TTL.
async fn current_lease(
    locker: &Locker,
    keys: &LockKeys,
) -> Result<Option<(Leader, Option<Duration>)>, LockError> {
    let backend = locker.engine().backend();
    board::supported(backend, &keys.name)?;
    let record = board::record(backend, keys).await?;
    let state = crate::backend::Backend::inspect(backend, keys).await?;
    let Some(value) = state.value else {
        return Ok(None);
    };
    let Some(term) = state.fencing_counter else {
        return Ok(None);
    };
    let label = decode_value(&value).1.map(str::to_owned);
    let since = record
        .filter(|record| record.elected && record.term == term)
        .map(|record| record.at);
    Ok(Some((Leader { label, term, since }, state.remaining)))
}

/// The leadership of one term. Renewed in the background while held; [`Leadership::lost`]
/// completes when it ends without a resignation. Dropping it gives the lock up (without the
/// `Resigned` announcement: observers see the next leader's `Elected`).
#[must_use = "leadership ends when it is dropped; keep it while acting as leader"]
pub struct Leadership {
    lease: Lease,
    keys: LockKeys,
    term: u64,
    label: Option<String>,
    since: SystemTime,
}

impl Leadership {
    /// This leadership's term: strictly greater than every earlier leader's. Hand it to
    /// the stores the leader writes to, so that they refuse a leader whose term ended.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Since when this process leads, by the store's clock.
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// Whether this process may still act as leader: false once the lease is lost, by the
    /// local clock too. A leader that was paused (SIGSTOP, a long GC, a frozen VM) past its
    /// lease sees `false` as soon as it resumes, before its renewal can even be tried. Check
    /// it before each action; the store's fencing on [`term`](Self::term) covers the
    /// moment between the check and the write.
    pub fn is_leader(&self) -> bool {
        !self.lease.is_lost()
    }

    /// Completes when the leadership is lost (the lease ran out, renewal failed, the lock
    /// was taken away): stop acting as leader.
    pub async fn lost(&self) {
        self.lease.lost().await;
    }

    /// A cloneable view of the underlying lease (loss signal, validity) for tasks that must
    /// stop when leadership ends.
    pub fn handle(&self) -> LeaseHandle {
        self.lease.handle()
    }

    /// Steps down: announces the resignation to observers, then gives the lock to the next
    /// candidate in line at once. `Ok(true)` if this was still the leader.
    pub async fn resign(self) -> Result<bool, LockError> {
        let Leadership {
            lease,
            keys,
            term,
            label,
            ..
        } = self;
        let engine = std::sync::Arc::clone(lease.engine());
        let announced = board::proclaim(
            engine.backend(),
            &keys,
            lease.stored_value(),
            false,
            term,
            label.as_deref().unwrap_or(""),
        )
        .await;
        let released = lease.release().await?;
        announced?;
        Ok(released)
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.keys.name)
            .field("term", &self.term)
            .field("leader", &self.is_leader())
            .finish_non_exhaustive()
    }
}

/// Follows one election's leadership (see [`Election::observe`]).
pub struct Observer {
    locker: Locker,
    keys: LockKeys,
    feed: Option<Feed>,
    current: Option<Leader>,
    /// The last change delivered or known: (term, 0 elected unannounced, 1 elected, 2
    /// resigned or expired). Announcements at or below it are not delivered again.
    seen: Option<(u64, u8)>,
    /// While someone leads: when to look whether its lease ran out (its end by the store's
    /// TTL, plus [`Observer::EXPIRY_SLACK`]).
    look_at: Option<tokio::time::Instant>,
}

impl Observer {
    /// How long after a leader's lease ends (by the store's TTL) an observer looks again
    /// and reports the vacancy ([`LeaderChange::Expired`]).
    pub const EXPIRY_SLACK: Duration = Duration::from_millis(100);

    /// Who leads, as of the last change seen.
    pub fn current(&self) -> Option<&Leader> {
        self.current.as_ref()
    }

    /// Waits for the next change of leadership. Each change is delivered once, in the
    /// order it happened. If announcements may have been missed (the pub/sub connection
    /// dropped), the observer subscribes again and reads the record: a change missed in
    /// that gap is delivered as the state it led to.
    ///
    /// A leader whose lease runs out without a resignation, with nobody taking over, is
    /// reported as [`LeaderChange::Expired`] within [`Observer::EXPIRY_SLACK`] of the lease's end
    /// (the observer looks at the lease's TTL once per change and once per lease while
    /// someone leads: no polling in between).
    pub async fn next(&mut self) -> Result<LeaderChange, LockError> {
        loop {
            let Some(feed) = self.feed.as_mut() else {
                let before = (self.seen, self.current.clone());
                self.resubscribe().await?;
                if self.current.is_none()
                    && let Some(change) = self.lapsed_since(before.1)
                {
                    return Ok(change);
                }
                if self.seen > before.0
                    && let Some(change) = self.snapshot_change()
                {
                    return Ok(change);
                }
                continue;
            };
            let next = match self.look_at {
                Some(at) => tokio::select! {
                    next = feed.next() => Some(next),
                    () = tokio::time::sleep_until(at) => None,
                },
                None => Some(feed.next().await),
            };
            match next {
                Some(Next::Record(record)) => {
                    if let Some(change) = self.apply(record) {
                        return Ok(change);
                    }
                }
                Some(Next::Gap) => {
                    tracing::debug!(election = %self.keys.name, "election feed interrupted; subscribing again");
                    self.feed = None;
                }
                None => {
                    if let Some(change) = self.look().await? {
                        return Ok(change);
                    }
                }
            }
        }
    }

    /// The leader's lease may have run out: reads the lock. Still held by the same term:
    /// looks again at its new end. Free: the vacancy. Held by a later term (its
    /// announcement is on its way): that leader, as a resubscription would find it.
    async fn look(&mut self) -> Result<Option<LeaderChange>, LockError> {
        let found = current_lease(&self.locker, &self.keys).await?;
        let known = self.current.clone();
        match (found, known) {
            (Some((leader, left)), Some(known)) if leader.term == known.term => {
                self.look_at = Some(look_after(left));
                Ok(None)
            }
            (Some((leader, left)), _) => {
                self.look_at = Some(look_after(left));
                let order = (leader.term, if leader.since.is_some() { 1 } else { 0 });
                if self.seen.is_some_and(|seen| order <= seen) {
                    return Ok(None);
                }
                self.seen = Some(order);
                self.current = Some(leader.clone());
                Ok(Some(LeaderChange::Elected(leader)))
            }
            (None, known) => {
                self.look_at = None;
                // Free: a resignation writes its record before it releases, so a record
                // read now tells a resignation whose announcement is still on its way (an
                // observer in the resigning process looks as it resigns) from a lapse.
                if let Some(known) = known.as_ref() {
                    let record = board::record(self.locker.engine().backend(), &self.keys).await?;
                    if let Some(record) = record.filter(|r| !r.elected && r.term == known.term) {
                        return Ok(self.apply(record));
                    }
                }
                Ok(self.lapsed_since(known))
            }
        }
    }

    /// `Expired` for `before`, the leader known earlier, now that nobody leads, when its
    /// term ended unannounced (not resigned, no later term seen).
    fn lapsed_since(&mut self, before: Option<Leader>) -> Option<LeaderChange> {
        let before = before?;
        if self.seen.is_some_and(|seen| seen >= (before.term, 2)) {
            return None;
        }
        self.seen = Some((before.term, 2));
        self.current = None;
        Some(LeaderChange::Expired {
            term: before.term,
            label: before.label,
        })
    }

    /// Subscribes, then reads the current state, so no announcement falls between them.
    async fn resubscribe(&mut self) -> Result<(), LockError> {
        let engine = self.locker.engine();
        let feed = board::subscribe(engine.backend(), engine.notifier(), &self.keys).await?;
        self.feed = Some(feed);
        let found = current_lease(&self.locker, &self.keys).await?;
        self.look_at = found.as_ref().map(|(_, left)| look_after(*left));
        let leader = found.map(|(leader, _)| leader);
        let seen = match &leader {
            Some(leader) => Some((leader.term, if leader.since.is_some() { 1 } else { 0 })),
            // Nobody leads: the last term resigned, or its leader is gone unannounced.
            None => board::record(engine.backend(), &self.keys)
                .await?
                .map(|record| (record.term, if record.elected { 1 } else { 2 })),
        };
        self.current = leader;
        self.seen = self.seen.max(seen);
        Ok(())
    }

    /// The state a resubscription found, as a change.
    fn snapshot_change(&self) -> Option<LeaderChange> {
        match (&self.current, self.seen) {
            (Some(leader), _) => Some(LeaderChange::Elected(leader.clone())),
            (None, Some((term, 2))) => Some(LeaderChange::Resigned {
                term,
                label: None,
                at: SystemTime::now(),
            }),
            _ => None,
        }
    }

    /// An announcement, unless it was seen already.
    fn apply(&mut self, record: Record) -> Option<LeaderChange> {
        let order = (record.term, if record.elected { 1 } else { 2 });
        // The announcement of a leader already known from a read of the store (elected,
        // not yet announced: delivered by a resubscription, or `current` when observing
        // began): now it is known since when, but it is no new change.
        if record.elected && self.seen == Some((record.term, 0)) {
            self.seen = Some(order);
            if let Some(leader) = self.current.as_mut().filter(|l| l.term == record.term) {
                leader.since = Some(record.at);
            }
            return None;
        }
        if self.seen.is_some_and(|seen| order <= seen) {
            return None;
        }
        self.seen = Some(order);
        let label = (!record.label.is_empty()).then_some(record.label);
        if record.elected {
            let leader = Leader {
                label,
                term: record.term,
                since: Some(record.at),
            };
            self.current = Some(leader.clone());
            // Its lease's end is read at once (one round trip per change).
            self.look_at = Some(tokio::time::Instant::now());
            Some(LeaderChange::Elected(leader))
        } else {
            self.current = None;
            self.look_at = None;
            Some(LeaderChange::Resigned {
                term: record.term,
                label,
                at: record.at,
            })
        }
    }
}

/// When to look whether a lease with `left` to run has ended: just after its end (a
/// second on when the store gave no TTL).
fn look_after(left: Option<Duration>) -> tokio::time::Instant {
    let slack = Observer::EXPIRY_SLACK;
    tokio::time::Instant::now() + left.map_or(10 * slack, |left| left + slack)
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.keys.name)
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resubscription that lands between a leader's grant and its announcement finds it
    /// elected but not yet announced, and delivers it (`Elected`, no `since`); the
    /// announcement that follows is the same change and must not be delivered again.
    /// lock-torture's `observer-order` rule saw the duplicate in a `client-kill` run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_leader_delivered_from_a_snapshot_is_not_delivered_again() {
        let locker = Locker::memory();
        let keys = LockKeys::new(&locker.engine().settings().prefix, "e".to_owned()).unwrap();
        let mut observer = Observer {
            locker,
            keys,
            feed: None,
            current: Some(Leader {
                label: None,
                term: 2,
                since: None,
            }),
            seen: Some((2, 0)),
            look_at: None,
        };
        let at = SystemTime::now();
        let record = |elected| Record {
            elected,
            term: 2,
            at,
            label: String::new(),
        };
        assert_eq!(observer.apply(record(true)), None);
        assert_eq!(observer.current().and_then(|l| l.since), Some(at));
        // The term's end is a change of its own.
        assert!(matches!(
            observer.apply(record(false)),
            Some(LeaderChange::Resigned { term: 2, .. })
        ));
        assert_eq!(observer.apply(record(false)), None);
    }
}
