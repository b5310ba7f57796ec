//! Countdown latches: N processes count down, many wait for zero, with a TTL so that a
//! latch whose counting process died expires and its waiters are told so.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use super::env::Env;
use crate::backend::latch::{Armed, Counted, LatchKeys, LatchStore, State};
use crate::backend::AnyBackend;
use crate::signal::Wake;
use crate::{LockError, Locker};

/// How long after a round's TTL a waiter looks whether it expired (the server's clock
/// and this process's may differ a little).
const EXPIRY_SLACK: Duration = Duration::from_millis(5);

/// Without notifications (a locker built from a pool): the longest pause between looks.
const POLL_CAP: Duration = Duration::from_millis(100);

/// A countdown latch: armed with a count, counted down by any number of processes, waited
/// on by many until it reaches zero (it "opens").
///
/// - **One message wakes every waiter.** The count-down that reaches zero publishes one
///   message on the latch's channel; each process that waits subscribes to it once, and
///   every waiter of that process is woken from it without asking Redis again (no
///   polling, no herd).
/// - **It cannot hang.** Each round has a TTL, judged by the server's clock: if the
///   processes counting down die, the round expires and its waiters get
///   [`LockError::LatchExpired`] at its end instead of waiting forever (or their own
///   deadline first: [`LockError::LatchTimeout`]).
/// - **Rounds.** [`Latch::arm`] starts a new round once the previous one opened (or
///   expired); each round has an id of its own, so a waiter of one round is never woken by
///   another's opening, and a waiter that arrives after the re-arm waits for the new round.
///   Arming while a round still counts is refused ([`LockError::LatchStillCounting`]).
/// - **Misuse is an error that says so**: a count-down below zero
///   ([`LockError::LatchCountBelowZero`], nothing changed), a count-down or wait on a latch
///   never armed or expired ([`LockError::LatchNotFound`]).
///
/// A waiter that arrives once the round is open returns at once, until the round's TTL
/// ends. Works on one Redis, Sentinel, a Cluster (the latch's key and channel share its
/// name's hash tag; the opening is told in its shard) and in memory; not on Redlock nor with
/// `Protocol::Transactions` ([`LockError::Config`]).
///
/// ```
/// use lock_core::{LockError, Locker};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let locker = Locker::memory();
/// let shards = locker.latch("reindex:shards-done");
/// shards.arm(3, Duration::from_secs(600)).await?; // 3 workers, done within 10 minutes
///
/// let waiter = {
///     let shards = shards.clone();
///     tokio::spawn(async move { shards.wait(Duration::from_secs(60)).await })
/// };
/// for _ in 0..3 {
///     shards.count_down().await?; // each worker, when its shard is done
/// }
/// waiter.await.expect("join")?; // opened
///
/// assert!(matches!(shards.count_down().await, Err(LockError::LatchCountBelowZero { .. })));
/// assert!(matches!(
///     locker.latch("never-armed").wait(Duration::from_secs(1)).await,
///     Err(LockError::LatchNotFound { .. })
/// ));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Latch {
    env: Env,
    name: String,
}

/// A latch's current round, as [`Latch::state`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatchState {
    /// The round's id: a number from the server's clock, never reused for the name.
    pub round: u64,
    /// Count-downs still missing (0: open).
    pub remaining: u64,
    /// The count the round was armed with.
    pub count: u64,
    /// How long until the round expires.
    pub expires_in: Option<Duration>,
}

impl Locker {
    /// A countdown latch on `name` (see [`Latch`]). Its key (`<prefix>{name}:latch`, and
    /// the channel `<key>:opened`) never meets the lock or the other primitives of the same
    /// name.
    pub fn latch(&self, name: impl Into<String>) -> Latch {
        Latch {
            env: Env::new(self),
            name: name.into(),
        }
    }
}

impl Latch {
    /// The latch's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Arms a new round: `count` count-downs open it, and it expires `ttl` after now (by the
    /// server's clock) if it has not been re-armed before. Returns the round's id.
    /// [`LockError::LatchStillCounting`] while the current round still counts.
    pub async fn arm(&self, count: u64, ttl: Duration) -> Result<u64, LockError> {
        if count == 0 {
            return Err(LockError::Config(format!(
                "latch `{}`: armed with a count of 0, which would be open from the start; arm it with the number of count-downs to wait for (1 or more)",
                self.name
            )));
        }
        crate::limits::validate_ttl(&self.name, ttl)?;
        let (keys, store) = self.parts()?;
        match self
            .env
            .run(&self.name, store.arm(&keys, count, ttl))
            .await?
        {
            Armed::Armed { round } => Ok(round),
            Armed::Counting { left } => Err(LockError::LatchStillCounting {
                name: self.name.clone(),
                remaining: left,
            }),
        }
    }

    /// Counts the current round down by one; returns what is left (0: this call opened it).
    pub async fn count_down(&self) -> Result<u64, LockError> {
        self.count_down_by(1).await
    }

    /// Counts the current round down by `n` (a process that did `n` parts of the work);
    /// returns what is left. [`LockError::LatchCountBelowZero`] when the round has fewer
    /// than `n` left (nothing is counted), [`LockError::LatchNotFound`] with no latch.
    pub async fn count_down_by(&self, n: u64) -> Result<u64, LockError> {
        if n == 0 {
            return Err(LockError::Config(format!(
                "latch `{}`: a count-down by 0 changes nothing; count down by 1 or more",
                self.name
            )));
        }
        let (keys, store) = self.parts()?;
        match self.env.run(&self.name, store.count_down(&keys, n)).await? {
            Counted::Left { left } => Ok(left),
            Counted::TooMany { left } => Err(LockError::LatchCountBelowZero {
                name: self.name.clone(),
                remaining: left,
                asked: n,
            }),
            Counted::Missing => Err(LockError::LatchNotFound {
                name: self.name.clone(),
            }),
        }
    }

    /// The current round, or `None` with no latch (never armed, or expired).
    pub async fn state(&self) -> Result<Option<LatchState>, LockError> {
        let (keys, store) = self.parts()?;
        let state = self.env.run(&self.name, store.state(&keys)).await?;
        Ok(state.map(|s| LatchState {
            round: s.round,
            remaining: s.left,
            count: s.armed,
            expires_in: s.ttl,
        }))
    }

    /// Waits up to `timeout` for the current round to open. `Ok` once it opened (at once if
    /// it is open); [`LockError::LatchExpired`] if the round expired first (its counting
    /// processes did not finish within its TTL); [`LockError::LatchTimeout`] at the end of
    /// `timeout`; [`LockError::LatchNotFound`] if there is no latch to wait on.
    ///
    /// The round waited for is the one current when the wait begins: a re-arm after it
    /// opened does not keep this wait waiting, and another round's opening does not end it.
    pub async fn wait(&self, timeout: Duration) -> Result<(), LockError> {
        let span = tracing::debug_span!("lock.latch.wait", name = %self.name);
        self.wait_for(timeout).instrument(span).await
    }

    async fn wait_for(&self, timeout: Duration) -> Result<(), LockError> {
        crate::limits::validate_wait(&self.name, timeout)?;
        let started = Instant::now();
        let deadline = started + timeout;
        let (keys, store) = self.parts()?;
        // Listen before the first look, so that an opening right after it is not missed.
        let (_subscription, signal, told) = match &store {
            LatchStore::Memory(memory) => (None, Arc::clone(memory.signal()), true),
            LatchStore::Server(_) => match self.env.notifier() {
                Some(notifier) => match notifier.subscribe_shared(&keys.channel).await {
                    Ok((subscription, signal)) => (Some(subscription), signal, true),
                    Err(err) => {
                        tracing::debug!(name = %self.name, %err, "no latch notifications; polling");
                        (None, Arc::new(Wake::default()), false)
                    }
                },
                None => (None, Arc::new(Wake::default()), false),
            },
        };
        let mut round = None;
        loop {
            let notified = signal.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if round.is_some_and(|round| signal.has_opened(round)) {
                return Ok(());
            }
            let state = self.env.run(&self.name, store.state(&keys)).await?;
            let (mine, left, expiry) = match (state, round) {
                (None, None) => {
                    return Err(LockError::LatchNotFound {
                        name: self.name.clone(),
                    })
                }
                (None, Some(_)) => return Err(self.expired()),
                (Some(state), _) => {
                    let mine = *round.get_or_insert(state.round);
                    match judge(&state, mine) {
                        Judged::Open => return Ok(()),
                        Judged::Gone => return Err(self.expired()),
                        Judged::Counting => {}
                    }
                    let expiry = state.ttl.map(|ttl| Instant::now() + ttl + EXPIRY_SLACK);
                    (mine, state.left, expiry)
                }
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(LockError::LatchTimeout {
                    name: self.name.clone(),
                    waited: started.elapsed(),
                    remaining: left,
                });
            }
            let mut until = expiry.map_or(deadline, |expiry| expiry.min(deadline));
            if !told {
                until = until.min(now + POLL_CAP);
            }
            tokio::select! {
                () = notified.as_mut() => {
                    if signal.has_opened(mine) {
                        return Ok(());
                    }
                    // Woken without this round's opening (messages may have been lost, or
                    // another round's): look again.
                }
                () = tokio::time::sleep_until(until.into()) => {}
            }
        }
    }

    fn expired(&self) -> LockError {
        LockError::LatchExpired {
            name: self.name.clone(),
        }
    }

    fn parts(&self) -> Result<(LatchKeys, LatchStore), LockError> {
        let keys = LatchKeys::new(self.env.prefix(), self.name.clone())?;
        if let Some(server) = self.env.server() {
            return Ok((keys, LatchStore::Server(server)));
        }
        let missing = match self.env.backend() {
            AnyBackend::Memory(memory) => {
                return Ok((keys, LatchStore::Memory(Arc::clone(memory.latches()))))
            }
            AnyBackend::Redlock(_) => {
                "on Redlock (a count kept on each node separately is no count)"
            }
            AnyBackend::Transaction(_) => {
                "with Protocol::Transactions (a count-down and its announcement are one Lua script)"
            }
            AnyBackend::Scripted(_) => "here",
        };
        Err(LockError::Config(format!(
            "latch `{}`: countdown latches are not available {missing}; use a locker on one Redis, Sentinel or a Cluster with Lua scripts, or Locker::memory()",
            self.name
        )))
    }
}

/// Where the round a waiter waits for stands, judged from the latch's state.
enum Judged {
    Open,
    Counting,
    /// Replaced by a round armed after it expired: it never opened.
    Gone,
}

fn judge(state: &State, mine: u64) -> Judged {
    if state.round == mine {
        return if state.left == 0 {
            Judged::Open
        } else {
            Judged::Counting
        };
    }
    // Re-armed since: only a round that opened is followed by a new one with it as
    // `previous` (one armed after an expiry has none).
    if state.previous == Some(mine) {
        Judged::Open
    } else {
        Judged::Gone
    }
}

impl fmt::Debug for Latch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Latch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
