//! Deadlock detection around one wait: a layer beside the wait itself ([`turn`]), started
//! where the slow path starts (`engine/acquire.rs`) and ended with it.
//!
//! A request that waits while its task holds other leases of the same Locker (the holds
//! on its call stack: `#[redis_locked]` functions, `using` closures, `LockLayer` handlers;
//! leases the same code took with plain `lock()` and still holds, as `engine/local.rs`
//! counts them; or leases named with `LockRequest::holding`) has its wait checked and
//! recorded by the backend (`backend/waits.rs`), concurrently with the wait: if recording
//! it would close a cycle of waiters, the request ends at once with
//! [`LockError::Deadlock`] (its wait is dropped, leaving the queue as a cancelled wait
//! does) and the other waiters keep waiting; if the chain of waiters it would wait behind
//! is longer than the check follows ([`MAX_WAIT_CHAIN`](crate::MAX_WAIT_CHAIN) locks),
//! with [`LockError::WaitChainTooLong`]. A request whose task holds nothing is not
//! watched at all: no call, no timer.
//!
//! Counting a plain lease as held may be wrong (it may have moved to another task
//! unseen, see `engine/local.rs`): it is only ever recorded here, never a reason to refuse
//! a request outright; a lease of the lock waited for is left out (the request waits for
//! it like any other).
//!
//! The record is checked again every [`RECHECK`]: when the lock waited for has changed
//! hands meanwhile (a record counts only while the holder it names holds the lock), the
//! new holder is recorded, which may close a cycle then. (Every record is written after a
//! walk of the whole chain behind it, so a cycle is always closed by a check that sees
//! it; only on a Cluster may a record be incomplete, its chain leaving the slot, where no
//! later check could read further either.) When the wait ends (granted,
//! timed out, cancelled, failed), its records are deleted in the background; until then
//! a grant already makes them stop counting (the lock's holder changed).
//!
//! [`turn`]: crate::engine::turn

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::waits::{Checked, WaitRecord};
use crate::engine::held::Held;
use crate::engine::local::Owner;
use crate::engine::Engine;
use crate::key::{KeyLayout, LockKeys};
use crate::token::decode_value;
use crate::{DeadlockLink, LockError};

/// How often a recorded wait looks again whether the lock it waits for changed hands
/// (and so whether it now closes a cycle): the detection bound for a cycle that forms
/// through such a change. A check whose holder is unchanged reads a few keys and writes
/// nothing.
pub(crate) const RECHECK: Duration = Duration::from_millis(200);

/// Reads the leases of a Locker's locks held on the current task's call stack.
pub(crate) type TaskHolds = fn(&Arc<Engine>) -> Vec<Arc<Held>>;

/// The leases a request's task holds while it waits, as the facade finds them.
#[derive(Default)]
pub(crate) struct Holds {
    /// Reads the leases of this Locker held on the task's call stack; called when a wait
    /// begins (not on the fast path), on the task that awaits the request.
    pub of_task: Option<TaskHolds>,
    /// Leases the request was told its task holds (`LockRequest::holding`).
    pub declared: Vec<Arc<Held>>,
}

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holds")
            .field("declared", &self.declared.len())
            .finish_non_exhaustive()
    }
}

/// A wait to watch: the lock waited for and the leases held, once it is known that there
/// are some and the backend detects deadlocks.
pub(super) struct Watch {
    engine: Arc<Engine>,
    wanted: LockKeys,
    held: Vec<(LockKeys, String)>,
    id: String,
}

impl Holds {
    /// The watch for a wait for `wanted` by `owner` that began at `begun`, or `None` (no
    /// Redis call, no timer) when the task holds no other live lease of this Locker or the
    /// backend does not detect.
    pub(super) fn watch(
        self,
        engine: &Arc<Engine>,
        wanted: &LockKeys,
        owner: &Owner,
        begun: Instant,
    ) -> Option<Watch> {
        if !engine.backend().detects_deadlocks() {
            return None;
        }
        let mut leases = self.declared;
        if let Some(of_task) = self.of_task {
            leases.extend(of_task(engine));
        }
        let of_owner = engine.local().leases_of(owner, begun);
        leases.extend(
            of_owner
                .into_iter()
                .filter_map(|lease| lease.downcast().ok()),
        );
        let mut held: Vec<(LockKeys, String)> = Vec::new();
        for lease in leases {
            let live = !lease.has_ended() && !lease.is_lost();
            let other = lease.keys.lock != wanted.lock;
            if live && other && !held.iter().any(|(_, value)| *value == lease.value) {
                held.push((lease.keys.clone(), lease.value.clone()));
            }
        }
        if held.is_empty() {
            return None;
        }
        let id = crate::token::new_value(&wanted.name, None).ok()?;
        Some(Watch {
            engine: Arc::clone(engine),
            wanted: wanted.clone(),
            held,
            id,
        })
    }
}

/// Deletes the wait's records when it ends, whichever way (a task of its own, so that a
/// cancelled request still cleans up), if it may have recorded any.
struct Records<'a> {
    watch: &'a Watch,
    /// A check that may have recorded was sent (and its records not deleted since).
    maybe_recorded: AtomicBool,
}

impl Drop for Records<'_> {
    fn drop(&mut self) {
        if !self.maybe_recorded.load(Ordering::Acquire) {
            return;
        }
        let engine = Arc::clone(&self.watch.engine);
        let wanted = self.watch.wanted.clone();
        let held = self.watch.held.clone();
        let id = self.watch.id.clone();
        // Outside a runtime nothing runs: the records stop counting with the wait's end
        // (their expiry) or the lock's next holder.
        self.watch.engine.spawn_background(async move {
            if let Err(err) = engine.backend().end_wait(&id, &wanted, &held).await {
                tracing::debug!(name = %wanted.name, %err, "deleting a wait's deadlock records failed; they expire with the wait");
            }
        });
    }
}

impl Watch {
    /// Runs `wait` (the slow path), checked for deadlocks until it ends.
    pub(super) async fn around<F>(self, wait: F, deadline: Instant) -> Result<Arc<Held>, LockError>
    where
        F: Future<Output = Result<Arc<Held>, LockError>>,
    {
        let records = Records {
            watch: &self,
            maybe_recorded: AtomicBool::new(false),
        };
        let checks = self.checks(&records, deadline);
        tokio::pin!(wait, checks);
        tokio::select! {
            biased;
            result = &mut wait => result,
            deadlock = &mut checks => Err(deadlock),
        }
    }

    /// Checks the wait now and every [`RECHECK`] until its deadline; completes only with
    /// the deadlock it is part of.
    async fn checks(&self, records: &Records<'_>, deadline: Instant) -> LockError {
        let mut seen: Option<String> = None;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return std::future::pending().await;
            }
            let wait = WaitRecord {
                id: &self.id,
                wanted: &self.wanted,
                held: &self.held,
                life: deadline - now,
                seen_before: seen.as_deref(),
            };
            records.maybe_recorded.store(true, Ordering::Release);
            match self.engine.backend().check_wait(&wait).await {
                Ok(Checked::Cycle(path)) => {
                    records.maybe_recorded.store(false, Ordering::Release);
                    return self.deadlock(path);
                }
                Ok(Checked::Recorded { holder, complete }) => {
                    if !complete {
                        tracing::debug!(name = %self.wanted.name, "deadlock check could not follow every waiter (a chain into other Cluster slots)");
                    }
                    seen = Some(holder);
                }
                Ok(Checked::TooLong { limit }) => {
                    tracing::debug!(name = %self.wanted.name, limit, "refused: the chain of waiters is longer than deadlock detection follows");
                    return LockError::WaitChainTooLong {
                        name: self.wanted.name.clone(),
                        limit,
                    };
                }
                Ok(Checked::Unchanged) => {}
                Ok(Checked::Free) => {
                    records.maybe_recorded.store(false, Ordering::Release);
                    seen = None;
                }
                Ok(Checked::NothingHeld | Checked::Unsupported) => {
                    records.maybe_recorded.store(false, Ordering::Release);
                    return std::future::pending().await;
                }
                Err(err) => {
                    tracing::debug!(name = %self.wanted.name, %err, "deadlock check failed; trying again");
                    seen = None;
                }
            }
            let next = (Instant::now() + RECHECK).min(deadline);
            tokio::time::sleep_until(next.into()).await;
        }
    }

    /// The error for a cycle found from the lock waited for.
    fn deadlock(&self, path: Vec<(String, String)>) -> LockError {
        let layout = KeyLayout::new(&self.engine.settings().prefix);
        let cycle = path
            .iter()
            .map(|(key, value)| {
                let name = layout.name_of(key).unwrap_or(key);
                DeadlockLink::new(name, decode_value(value).1.map(str::to_owned))
            })
            .collect();
        tracing::debug!(name = %self.wanted.name, "deadlock: this request closes a cycle of waiters");
        LockError::Deadlock {
            name: self.wanted.name.clone(),
            cycle,
        }
    }
}
