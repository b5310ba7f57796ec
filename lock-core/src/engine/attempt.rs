//! One attempt at a lock, and the bookkeeping of an acquisition across its attempts: the
//! last holder seen, the last transient error, and what the request ends with (a grant, a
//! busy or timeout error).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Attempt, AttemptKind, Backend as _, Place};
use crate::engine::held::{Grant, Held, Renewal};
use crate::engine::local::{NameRef, Owner};
use crate::engine::validity::validity;
use crate::engine::Engine;
use crate::key::LockKeys;
use crate::out_of_line::boxed;
use crate::token::{decode_value, new_value};
use crate::wait::Outage;
use crate::{LockError, WaitSetting};

/// Who holds a lock that a lease of the requesting Locker holds, in messages: not the
/// label the lease wrote (this process's own host:pid), which reads as someone else.
pub(crate) const THIS_LOCKER: &str = "a lease of this Locker, in this process";

/// What one attempt came to.
pub(super) enum Tried {
    /// A lease with validity left, from an attempt that started at `started`, whose answer
    /// was read at `answered`.
    Acquired { started: Instant, answered: Instant },
    /// Busy, or a grant that came too late and was given back.
    NotYet,
    /// The request's deadline passed with the attempt in flight; it was abandoned.
    OutOfTime,
}

/// What the last busy attempt said about the holder.
#[derive(Debug, Default)]
pub(super) struct Busy {
    pub remaining: Option<Duration>,
    pub holder: Option<String>,
    /// Our place in the lock's waiter queue, after a queued attempt.
    pub place: Option<Place>,
}

/// One acquisition in progress.
pub(super) struct Acquire<'a> {
    pub engine: &'a Arc<Engine>,
    /// The request's `lock.acquire` span: its attempts and time waited are recorded on it.
    pub span: &'a tracing::Span,
    pub keys: LockKeys,
    pub value: String,
    pub ttl: Duration,
    pub fencing: bool,
    pub begun: Instant,
    /// The code that awaits the request: the lease counts as its (see `engine/local.rs`).
    pub owner: Owner,
    pub attempts: u32,
    pub last_busy: Busy,
    pub fencing_token: Option<u64>,
    /// The granted value carries the listened-for mark.
    pub listened: bool,
    pub renew: Option<Renewal>,
    pub hold_at_least: Option<Duration>,
    /// Set when a grant arrived too late to be of use (how long it took).
    pub expired_grant: Option<Duration>,
    /// The error of the last attempt, when it failed with a transient error: what the
    /// request reports if its wait runs out before an attempt succeeds.
    pub transient: Option<LockError>,
    /// An attempt was refused by the replica acknowledgement check (or cut short by the
    /// request's deadline during it), and none has been granted since: what the request
    /// reports if it fails, rather than a contention error. A busy answer after it does
    /// not clear it: the holder seen then may be another grant the check refused, and
    /// replication is what failed.
    pub not_replicated: Option<Unreplicated>,
    /// A waiting request's count of Redis's silence (`None` for a try, whose one attempt
    /// has the command timeout): it gives up once Redis has not answered for the locker's
    /// `unreachable_timeout`, whatever is left of its wait.
    pub outage: Option<Outage>,
}

/// What the replica check found when it refused an attempt.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unreplicated {
    acknowledged: u32,
    required: u32,
    timeout: Duration,
    connected: Option<u32>,
}

impl Acquire<'_> {
    /// One attempt, abandoned at `bound` if it is still in flight then (dropping a backend's
    /// acquire undoes whatever it may have set).
    pub async fn attempt(
        &mut self,
        bound: Option<Instant>,
        kind: AttemptKind<'_>,
    ) -> Result<Tried, LockError> {
        self.attempt_at(Instant::now(), bound, kind).await
    }

    /// [`Acquire::attempt`] counted from `started`, an instant at or before the attempt's
    /// command is sent (the fast path's first attempt: the request's start, which saves a
    /// clock read; the lease's validity runs from the earlier instant, never the later).
    pub async fn attempt_at(
        &mut self,
        started: Instant,
        bound: Option<Instant>,
        kind: AttemptKind<'_>,
    ) -> Result<Tried, LockError> {
        if self.attempts > 0 {
            // Every attempt writes a token of its own. An earlier attempt may still have a
            // compare-and-delete of its value in flight (the undo of an attempt abandoned at
            // a node's or the request's deadline, a late grant given back, a failed Redlock
            // round's clean-up); with the same token it could land after this attempt took
            // the lock and delete it under its new holder.
            self.value = new_value(&self.keys.name, self.engine.settings().label.as_deref())?;
        }
        self.attempts += 1;
        let (bound, outage_ends) = match &self.outage {
            Some(outage) => outage.cap(bound, started),
            None => (bound, false),
        };
        let backend = self.engine.backend();
        let attempt = match bound {
            None => {
                backend
                    .acquire(&self.keys, &self.value, self.ttl, self.fencing, kind)
                    .await
            }
            Some(deadline) => {
                // On connections this locker configured, the fast path's attempt is ended at
                // the deadline by the bound of its own clone of the connection: no timer of ours.
                let cutting = if self.engine.commands_bounded() {
                    backend.cutting(kind, self.fencing)
                } else {
                    None
                };
                let (keys, value, ttl, fencing) = (&self.keys, &self.value, self.ttl, self.fencing);
                let within = match cutting {
                    Some(scripted) => scripted
                        .acquire_cut_at(keys, value, ttl, deadline)
                        .await
                        .transpose(),
                    // Built out of line (see `out_of_line.rs`): the attempt above, every
                    // attempt of a waiting request on one server, keeps a small stack frame.
                    None => boxed(|| {
                        let call = backend.acquire(keys, value, ttl, fencing, kind);
                        tokio::time::timeout_at(deadline.into(), call)
                    })
                    .await
                    .ok(),
                };
                match within {
                    Some(attempt) => attempt,
                    None if outage_ends => return Err(self.unreachable(started)),
                    None => {
                        // Cut short while its grant waited for replicas: that is what failed.
                        if let Some((required, timeout)) = backend.replica_wait_cut(&self.value) {
                            // What an earlier refusal found connected still describes it.
                            let connected =
                                self.not_replicated.and_then(|earlier| earlier.connected);
                            self.not_replicated = Some(Unreplicated {
                                acknowledged: 0,
                                required,
                                timeout,
                                connected,
                            });
                        }
                        return Ok(Tried::OutOfTime);
                    }
                }
            }
        };
        if let Some(outage) = &mut self.outage {
            match &attempt {
                Err(LockError::Connection { .. } | LockError::NoQuorum { .. }) => {
                    outage.may_retry(started);
                }
                _ => outage.answered(),
            }
        }
        let attempt = match attempt {
            Ok(attempt) => attempt,
            Err(err) => {
                if let LockError::NotReplicated {
                    acknowledged,
                    required,
                    timeout,
                    connected,
                    ..
                } = &err
                {
                    self.not_replicated = Some(Unreplicated {
                        acknowledged: *acknowledged,
                        required: *required,
                        timeout: *timeout,
                        connected: *connected,
                    });
                }
                return Err(err);
            }
        };
        match attempt {
            Attempt::Acquired {
                fencing_token,
                listened,
            } => {
                // Also the grant's instant for the name's local holder (see `grant`).
                let answered = Instant::now();
                let took = answered.saturating_duration_since(started);
                let trusted = validity(self.ttl);
                if !trusted.is_zero() && took >= trusted {
                    // The answer came back after the lease had run out (a slow network or
                    // server): such a lease protects nothing. Give it back and treat the
                    // attempt as failed, as Redlock does. The give-back runs in a task of
                    // its own, so that dropping this request cannot cut it short.
                    self.give_back();
                    self.expired_grant = Some(took);
                    return Ok(Tried::NotYet);
                }
                self.fencing_token = fencing_token;
                self.listened = listened;
                Ok(Tried::Acquired { started, answered })
            }
            Attempt::Busy {
                remaining,
                holder_value,
                place,
            } => {
                self.last_busy = Busy {
                    remaining,
                    holder: holder_value
                        .as_deref()
                        .and_then(|v| decode_value(v).1)
                        .map(str::to_owned),
                    place,
                };
                Ok(Tried::NotYet)
            }
        }
    }

    /// Whether a waiting request may try again after a transient error: Redis has not been
    /// silent for the locker's `unreachable_timeout` yet.
    pub fn keeps_trying(&self) -> bool {
        self.outage.as_ref().is_none_or(Outage::keeps_trying)
    }

    /// The attempt started at `started` was cut at the end of the unreachable timeout:
    /// the last transient error, or that nothing answered.
    fn unreachable(&mut self, started: Instant) -> LockError {
        let limit = self.outage.as_mut().map(|outage| {
            outage.may_retry(started);
            outage.limit()
        });
        self.transient.take().unwrap_or_else(|| {
            LockError::connection(
                &self.keys.name,
                format!(
                    "Redis did not answer within the locker's unreachable timeout ({:?})",
                    limit.unwrap_or_default()
                ),
            )
        })
    }

    /// Deletes this request's value from the lock in the background (compare-and-delete:
    /// nobody else's lock is touched). The TTL frees it if this fails.
    fn give_back(&self) {
        let engine = Arc::clone(self.engine);
        let keys = self.keys.clone();
        let value = self.value.clone();
        self.engine.spawn_background(async move {
            let backend = engine.backend();
            let given_back = backend.release(&keys, &value).await;
            if let Err(err) = given_back {
                tracing::debug!(name = %keys.name, %err, "giving back a late grant failed; the TTL will free the lock");
            }
        });
    }

    /// The lease of an attempt that started at `attempt_started` and was answered at
    /// `answered`. `contended`: whether this locker queued for the name lately, as
    /// [`NameRef::contended_lately`] said at the request's start (the caller asked already).
    pub fn grant(
        self,
        attempt_started: Instant,
        answered: Instant,
        local: NameRef,
        contended: bool,
    ) -> Arc<Held> {
        record(self.span, self.attempts, self.begun);
        // Waiters are likely to mark the value before its release when it was granted
        // marked, or this locker queued for the name lately: its release then hands over at
        // once rather than try a bare compare-and-delete first. (Only a hint: a value marked
        // since it was granted is handed over by the release all the same.)
        let listened = self.listened || contended;
        if let Some(token) = self.fencing_token {
            self.engine.fences().check(&self.keys.name, token);
        }
        self.engine.hold(
            Grant {
                keys: self.keys,
                value: self.value,
                fencing_token: self.fencing_token,
                attempt_started,
                answered,
                ttl: self.ttl,
                local,
                renew: self.renew,
                hold_at_least: self.hold_at_least,
                listened,
            },
            self.owner,
        )
    }

    pub fn busy(self) -> LockError {
        record(self.span, self.attempts, self.begun);
        if let Some(took) = self.expired_grant {
            return LockError::connection(
                &self.keys.name,
                format!("the lock was granted after {took:?}, when its TTL of {:?} had already run out; the network or server is too slow for this TTL", self.ttl),
            );
        }
        LockError::Busy {
            name: self.keys.name,
            holder: self.last_busy.holder,
            retry_after: self.last_busy.remaining,
            wait_setting: WaitSetting::default(),
        }
    }

    /// A try's attempt that the command timeout cut short: what a command would say that
    /// timed out (the attempt is undone in the background).
    pub fn unanswered(self) -> LockError {
        record(self.span, self.attempts, self.begun);
        if let Some(unreplicated) = self.not_replicated {
            return unreplicated.error(self.keys.name);
        }
        let within = self.engine.settings().command_timeout;
        LockError::connection(
            &self.keys.name,
            format!("no answer within the command timeout ({within:?})"),
        )
    }

    pub fn timeout(self) -> LockError {
        record(self.span, self.attempts, self.begun);
        if let Some(err) = self.transient {
            return err;
        }
        if let Some(unreplicated) = self.not_replicated {
            return unreplicated.error(self.keys.name);
        }
        LockError::Timeout {
            name: self.keys.name,
            waited: self.begun.elapsed(),
            holder: self.last_busy.holder,
            retry_after: self.last_busy.remaining,
            wait_setting: WaitSetting::default(),
        }
    }
}

impl Unreplicated {
    fn error(self, name: String) -> LockError {
        LockError::NotReplicated {
            name,
            acknowledged: self.acknowledged,
            required: self.required,
            timeout: self.timeout,
            connected: self.connected,
        }
    }
}

/// The request's attempts and time waited, on its span (the clock is read only for a span
/// that records).
fn record(span: &tracing::Span, attempts: u32, begun: Instant) {
    if span.is_disabled() {
        return;
    }
    span.record("attempts", attempts);
    span.record("waited_us", begun.elapsed().as_micros() as u64);
}
