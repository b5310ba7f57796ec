//! The fast path's attempt cut at a deadline by the connection's own response timeout,
//! rather than by a timer of the caller's around it.
//!
//! A waiting request's first attempt is one `SET .. NX .. GET` on an open connection, and
//! must end by the end of the locker's unreachable timeout (or the request's deadline),
//! which may come before the command timeout. Every command on the shared connection is
//! bounded anyway (by the connection's deadlines, `connection/deadlines.rs`, or on a pool
//! built elsewhere by redis-rs's response timeout), and each clone of the connection
//! carries its own bound: set on this attempt's clone to what is left until the deadline,
//! that one bound ends the attempt, and the timer a wrapper would arm (its registration,
//! its removal, and the copy of the attempt into the wrapper) is saved on every
//! uncontended acquisition.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::calls::set_nx_get;
use super::{is_syntax_error, Scripted};
use crate::backend::{Attempt, AttemptKind, Backend as _};
use crate::connection::shared::is_connection_failure;
use crate::key::LockKeys;
use crate::LockError;

impl Scripted {
    /// Whether [`Scripted::acquire_cut_at`] can make an attempt of `kind`: the first try of
    /// a request that queues next (no `PTTL` follows a busy answer), without a fencing
    /// token, on a server that accepts `SET .. NX .. GET`, on a connection whose clones
    /// each carry a response timeout (not a Cluster's).
    pub(crate) fn cuts(&self, kind: AttemptKind<'_>, fencing: bool) -> bool {
        matches!(kind, AttemptKind::BeforeQueueing)
            && !fencing
            && self.set_get.load(Ordering::Relaxed)
            && self.conn.times_out_per_clone()
    }

    /// [`Backend::acquire`](crate::backend::Backend::acquire) of kind `BeforeQueueing`
    /// without fencing (see [`Scripted::cuts`]), ended at `until` if no answer came by then:
    /// `Ok(None)`, and the `SET` is undone in the background as a dropped attempt's is.
    ///
    /// Only for a locker whose every command is bounded by the command timeout (the
    /// connections it configured itself): the response timeout of this attempt's clone of
    /// the open shared connection is lowered to what is left until `until` when that is
    /// shorter, and put back before anything else is sent on the clone. When the
    /// connection must be opened first, or the server refuses `SET .. GET` (Redis before
    /// 7.0: the script follows, which may take two commands), a timer bounds the attempt
    /// instead; and a grant that the replica check confirms with commands of its own (the
    /// check is on, or a look at the master is due) is confirmed under a timer.
    pub(crate) async fn acquire_cut_at(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        until: Instant,
    ) -> Result<Option<Attempt>, LockError> {
        let Some(mut lent) = self.conn.get_open() else {
            return Box::pin(self.acquire_with_timer(keys, value, ttl, until)).await;
        };
        let command_timeout = self.conn.timeout();
        // Read once: also the instant at which a grant asks whether the replica check's
        // look at the master is due (every few seconds): a round trip early, which can
        // only leave the look to a later grant.
        let now = Instant::now();
        let left = until.saturating_duration_since(now);
        let cut = left < command_timeout;
        let mut flight = self.flight(&mut lent, keys, value);
        if cut && flight.lent.conn.set_response_timeout(left) {
            flight.restore = Some(command_timeout);
        }
        let reply = set_nx_get(&mut flight.lent.conn, keys, value, ttl).await;
        flight.restore_timeout();
        match reply {
            Ok(attempt) => {
                if let (Attempt::Acquired { .. }, Some(replicated)) = (&attempt, &self.replicated)
                    && !replicated.is_quiet(&keys.lock, now)
                {
                    // Granted only once replicas have it, by `until`; otherwise undone
                    // (the armed flight, on this connection, after the write).
                    let confirm =
                        self.confirm_grant(replicated, &mut flight.lent.conn, keys, value, ttl);
                    match tokio::time::timeout_at(until.into(), Box::pin(confirm)).await {
                        Ok(confirmed) => confirmed?,
                        Err(_) => return Ok(None),
                    }
                }
                flight.armed = false;
                drop(flight);
                // Its timeout put back: kept for this thread's next operation.
                self.conn.give_back(lent);
                Ok(Some(attempt))
            }
            // No answer by `until` (the lowered timeout fired, not the command timeout; a
            // timer never fires early): the flight, still armed, undoes the SET as it is
            // dropped, behind it on this connection, which is not retired for a reply that
            // was only late for us.
            Err(err) if cut && err.is_timeout() && Instant::now() >= until => Ok(None),
            Err(err) if is_syntax_error(&err) => {
                // Redis before 7.0 refuses NX together with GET, and wrote nothing: the
                // script from now on, in this attempt too.
                self.set_get.store(false, Ordering::Relaxed);
                flight.armed = false;
                drop(flight);
                Box::pin(self.acquire_with_timer(keys, value, ttl, until)).await
            }
            Err(err) => {
                // As `Backend::acquire` treats it: a server error wrote nothing; anything
                // else may have taken the lock, and the undo stays armed.
                if matches!(err.kind(), redis::ErrorKind::Server(_)) {
                    flight.armed = false;
                }
                if is_connection_failure(&err) {
                    self.conn.retire(flight.lent);
                }
                Err(LockError::from_redis(&keys.name, &keys.lock, err))
            }
        }
    }

    /// The same attempt through [`Backend::acquire`](crate::backend::Backend::acquire),
    /// under a timer that ends it at `until` (dropping it undoes whatever it may have set).
    async fn acquire_with_timer(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        until: Instant,
    ) -> Result<Option<Attempt>, LockError> {
        let call = self.acquire(keys, value, ttl, false, AttemptKind::BeforeQueueing);
        match tokio::time::timeout_at(until.into(), call).await {
            Ok(attempt) => attempt.map(Some),
            Err(_) => Ok(None),
        }
    }
}
