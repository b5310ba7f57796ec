//! Redlock: N independent Redis masters, a lock needs a majority of them.
//!
//! Every operation goes to all nodes in parallel, each with a short per-node deadline, so a
//! slow or dead node costs at most that deadline, and the latency of an operation is that of
//! the slowest node of the fastest majority rather than the sum of all nodes.
//!
//! - Acquire: the same value on every node. Success needs a majority, and enough validity
//!   left: TTL minus the time the attempt took minus the clock-drift allowance (1% of the
//!   TTL plus 2 ms). On failure the value is deleted from every node that granted before
//!   the attempt returns, and from those whose reply was lost in the background (an
//!   abandoned per-node attempt undoes itself), so a slow node costs a failed attempt one
//!   per-node deadline too; a busy node's lock was not set by the attempt.
//! - Waiting: every node keeps the lock's waiter queue (`acquire_queued.lua`), ordered by
//!   the waiters' tickets (when each request began waiting, on the masters' clock: each
//!   client corrects its own by the median of its offsets to the masters, see
//!   [`TicketClock`]), so the
//!   nodes agree on who is next: a release hands the lock to the same head on each node,
//!   and that head (told by every node that reserved it, on its channel: a `Locker` listens
//!   on each node) claims it with one queued attempt on every node, granted like any other
//!   acquisition (a majority within the validity time). A head that claims fewer than a
//!   majority (its claim reached some masters before the previous holder's release did)
//!   gives back what it claimed and keeps its turn there (`return_claim.lua`: back in line
//!   by its ticket, the lock still reserved for it while it heads the line), so that the
//!   masters the release reaches later complete its majority; handing those masters to the
//!   next in line instead split the masters until a claim window ended. Entries and
//!   reservations expire by themselves (the request's wait, the claim window), so a
//!   crashed node or waiter holds nobody up for longer than that.
//! - Release and extend: all nodes; they count as done with a majority.
//! - Fencing: each node keeps a counter; an acquisition takes the maximum of the counters it
//!   drew on its majority and writes that maximum back to a majority before it is granted.
//!   Any two majorities share a node, so the next acquisition draws a larger number. This
//!   holds as long as nodes do not lose their data (see the delayed-restart rule in the
//!   crate docs); it is the strongest ordering a quorum of independent counters can give,
//!   and it is not a substitute for a consensus system where correctness depends on it.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::prim_scripts::MARK_LISTENED;
use super::scripted::Scripted;
use super::ticket::TicketClock;
use super::{Attempt, AttemptKind, Backend, RawState};
use crate::key::LockKeys;
use crate::undo::Undo;
use crate::LockError;

pub(crate) struct Redlock {
    nodes: Vec<Scripted>,
    node_timeout: Duration,
    /// Waiters' tickets, on the masters' clock (see [`TicketClock`]).
    tickets: TicketClock,
}

impl Redlock {
    pub fn new(nodes: Vec<Scripted>, node_timeout: Duration, tickets: TicketClock) -> Redlock {
        Redlock {
            nodes,
            node_timeout,
            tickets,
        }
    }

    /// A waiting request's ticket: now, on the masters' clock (measured again on every
    /// master when the last measure is older than [`FRESH_FOR`](super::ticket::FRESH_FOR);
    /// each bounded by the per-node deadline).
    pub async fn ticket(&self, name: &str) -> u64 {
        let now = Instant::now();
        if let Some(ticket) = self.tickets.ticket_if_fresh(now) {
            return ticket;
        }
        let offsets = self
            .on_all(name, |node| {
                node.clock_offset_us(name, || self.tickets.client_now_us())
            })
            .await;
        self.tickets
            .record(offsets.into_iter().filter_map(Result::ok).collect(), now)
    }

    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs `operation` on every node at once, each bounded by the per-node deadline.
    async fn on_all<'a, T, F, Fut>(&'a self, name: &str, operation: F) -> Vec<Result<T, LockError>>
    where
        F: Fn(&'a Scripted) -> Fut,
        Fut: Future<Output = Result<T, LockError>> + 'a,
    {
        self.on_each(name, self.nodes.iter(), operation).await
    }

    /// [`Redlock::on_all`] on some of the nodes.
    async fn on_each<'a, T, F, Fut>(
        &'a self,
        name: &str,
        nodes: impl Iterator<Item = &'a Scripted>,
        operation: F,
    ) -> Vec<Result<T, LockError>>
    where
        F: Fn(&'a Scripted) -> Fut,
        Fut: Future<Output = Result<T, LockError>> + 'a,
    {
        let limit = self.node_timeout;
        join_all(nodes.map(|node| {
            let call = operation(node);
            async move {
                match tokio::time::timeout(limit, call).await {
                    Ok(result) => result,
                    Err(_) => Err(LockError::connection(
                        name,
                        format!("a Redlock node gave no answer within {limit:?}"),
                    )),
                }
            }
        }))
        .await
    }

    fn no_quorum(&self, name: &str, agreed: usize, failures: &[LockError]) -> LockError {
        LockError::NoQuorum {
            name: name.to_owned(),
            agreed,
            needed: self.quorum(),
            nodes: self.nodes.len(),
            reason: failures
                .first()
                .map_or_else(|| "nodes disagree".to_owned(), ToString::to_string),
        }
    }

    /// True/false from a majority of nodes; a `NoQuorum` error when too many failed to say.
    fn majority(
        &self,
        name: &str,
        results: Vec<Result<bool, LockError>>,
    ) -> Result<bool, LockError> {
        let mut yes = 0;
        let mut failures = Vec::new();
        for result in results {
            match result {
                Ok(true) => yes += 1,
                Ok(false) => {}
                Err(err) => failures.push(err),
            }
        }
        if yes >= self.quorum() {
            return Ok(true);
        }
        // Could the nodes that did not answer have made a majority?
        if yes + failures.len() >= self.quorum() && !failures.is_empty() {
            return Err(self.no_quorum(name, yes, &failures));
        }
        Ok(false)
    }
}

/// Clock drift allowed for over a TTL: 1% plus 2 ms, as in the Redlock analysis.
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

impl Backend for Redlock {
    async fn acquire(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        fencing: bool,
        kind: AttemptKind<'_>,
    ) -> Result<Attempt, LockError> {
        let started = Instant::now();
        // From the first node's answer on, our value may sit on some nodes: if this future
        // is dropped before it decides (a caller's deadline, a cancelled request), they are
        // cleaned up anyway, including nodes that granted before the drop while others
        // were still answering (armed before the calls: a node that already answered has
        // no undo of its own left). Each node's delete follows that node's SET on the same
        // connection, so it cannot arrive first; on a node our value never reached it
        // deletes nothing.
        let undo = Undo::new(|| {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                for node in &self.nodes {
                    node.release_in_background(&runtime, keys, value);
                }
            }
        });
        let results = self
            .on_all(&keys.name, |node| {
                node.acquire(keys, value, ttl, fencing, kind)
            })
            .await;
        let mut acquired = 0;
        let mut listened = false;
        let mut token = 0u64;
        let mut busy = None;
        let mut wrong_type = None;
        let mut failures = Vec::new();
        // The nodes where a queued attempt may have left us in line: those that said busy,
        // and those whose answer is unknown (an error or a per-node timeout: the script may
        // have run and queued us there).
        let mut still_queued = Vec::new();
        // The nodes that granted: ours to give back if the attempt fails.
        let mut granted = Vec::new();
        // Whether some node's answer is unknown (it may hold our value).
        let mut unknown = false;
        for (node, result) in self.nodes.iter().zip(results) {
            match result {
                Ok(Attempt::Acquired {
                    fencing_token,
                    listened: marked,
                }) => {
                    granted.push(node);
                    acquired += 1;
                    listened |= marked;
                    token = token.max(fencing_token.unwrap_or(0));
                }
                Ok(attempt @ Attempt::Busy { .. }) => {
                    if let Attempt::Busy { place: Some(_), .. } = attempt {
                        still_queued.push(node);
                    }
                    busy = busy.or(Some(attempt));
                }
                // A foreign value on a node is the caller's problem, not a vote; it fails
                // the attempt, which still undoes what it set on the other nodes below.
                Err(err @ LockError::WrongType { .. }) => wrong_type = wrong_type.or(Some(err)),
                Err(err) => {
                    still_queued.push(node);
                    unknown = true;
                    failures.push(err);
                }
            }
        }
        let valid = started.elapsed() + drift(ttl) < ttl;
        tracing::trace!(
            name = %keys.name,
            acquired,
            busy = busy.is_some(),
            failures = failures.len(),
            queued_on = still_queued.len(),
            valid,
            "redlock attempt"
        );
        if wrong_type.is_none()
            && acquired >= self.quorum()
            && valid
            && (!fencing || self.write_back_fence(keys, token).await)
        {
            undo.disarm();
            // Granted: out of the line on the minority too, lest the next release there
            // reserve the lock for us while the next waiter's turn has come.
            if let (AttemptKind::Queued(waiter), Ok(runtime)) =
                (kind, tokio::runtime::Handle::try_current())
            {
                for node in still_queued {
                    node.leave_queue_in_background(&runtime, keys, waiter.member);
                }
            }
            return Ok(Attempt::Acquired {
                fencing_token: fencing.then_some(token),
                listened,
            });
        }
        // Not granted: take our value back from every node that granted before saying so.
        // A node whose answer is unknown (an error, or the per-node deadline) is not waited
        // for a second time: the node's own undo already follows the attempt on its
        // connection (a compare-and-delete sent when its call was cut), and with such a node
        // the undo above stays armed and deletes our value on every node in the background
        // (a no-op where it is gone). So a slow or unreachable node costs a failed attempt
        // one per-node deadline, as it costs a granted one, not two. With every node busy,
        // there is nothing to take back.
        // A queued claim keeps its turn where it claimed: a claim that reached some masters
        // before the previous holder's release did is short of a majority only until the
        // release reaches the rest, which then tell this same head its turn (a reservation
        // kept so names the waiter, not this attempt's value, which the background undo
        // compares).
        let given_back = self
            .on_each(&keys.name, granted.into_iter(), |node| async move {
                match kind {
                    AttemptKind::Queued(waiter) => node.return_claim(keys, value, waiter).await,
                    _ => node.release(keys, value).await,
                }
            })
            .await;
        if !unknown && given_back.iter().all(Result::is_ok) {
            undo.disarm();
        }
        if let Some(err) = wrong_type {
            return Err(err);
        }
        if let Some(busy) = busy {
            return Ok(busy);
        }
        if acquired >= self.quorum() {
            // A majority, but it took too long to leave any validity: try again.
            return Ok(Attempt::busy_unknown());
        }
        Err(self.no_quorum(&keys.name, acquired, &failures))
    }

    async fn leave_queue(&self, keys: &LockKeys, waiter: &str) -> Result<(), LockError> {
        let results = self
            .on_all(&keys.name, |node| node.leave_queue(keys, waiter))
            .await;
        let left = results.iter().filter(|r| r.is_ok()).count();
        match results.into_iter().find_map(Result::err) {
            // An entry left behind on a node that did not answer expires with the wait.
            Some(err) if left < self.quorum() => Err(err),
            _ => Ok(()),
        }
    }

    async fn release(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        let results = self
            .on_all(&keys.name, |node| node.release(keys, value))
            .await;
        self.majority(&keys.name, results)
    }

    async fn release_unlistened(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        let results = self
            .on_all(&keys.name, |node| node.release_unlistened(keys, value))
            .await;
        self.majority(&keys.name, results)
    }

    async fn extend(&self, keys: &LockKeys, value: &str, ttl: Duration) -> Result<bool, LockError> {
        let results = self
            .on_all(&keys.name, |node| node.extend(keys, value, ttl))
            .await;
        self.majority(&keys.name, results)
    }

    async fn extend_many(
        &self,
        items: &[(&LockKeys, &str, Duration)],
    ) -> Vec<Result<bool, LockError>> {
        let name = items.first().map_or("", |(keys, _, _)| keys.name.as_str());
        let per_node = self.on_all(name, |node| async move {
            Ok::<_, LockError>(node.extend_many(items).await)
        });
        let per_node = per_node.await;
        (0..items.len())
            .map(|i| {
                let votes = per_node
                    .iter()
                    .map(|node| match node {
                        Ok(results) => match results.get(i) {
                            Some(Ok(held)) => Ok(*held),
                            Some(Err(err)) => {
                                Err(LockError::connection(&items[i].0.name, err.to_string()))
                            }
                            None => Err(LockError::connection(&items[i].0.name, "no reply")),
                        },
                        Err(err) => Err(LockError::connection(&items[i].0.name, err.to_string())),
                    })
                    .collect();
                self.majority(&items[i].0.name, votes)
            })
            .collect()
    }

    async fn inspect(&self, keys: &LockKeys) -> Result<RawState, LockError> {
        let results = self.on_all(&keys.name, |node| node.inspect(keys)).await;
        let mut states = Vec::new();
        let mut failures = Vec::new();
        for result in results {
            match result {
                Ok(state) => states.push(state),
                Err(err @ LockError::WrongType { .. }) => return Err(err),
                Err(err) => failures.push(err),
            }
        }
        if states.len() < self.quorum() {
            return Err(self.no_quorum(&keys.name, states.len(), &failures));
        }
        let fencing_counter = states.iter().filter_map(|s| s.fencing_counter).max();
        // The value a majority agrees on is the holder; anything less is no valid lock.
        for candidate in states.iter().filter_map(|s| s.value.as_ref()) {
            let holding: Vec<&RawState> = states
                .iter()
                .filter(|s| s.value.as_ref() == Some(candidate))
                .collect();
            if holding.len() >= self.quorum() {
                return Ok(RawState {
                    value: Some(candidate.clone()),
                    remaining: holding.iter().filter_map(|s| s.remaining).min(),
                    fencing_counter,
                    on_replicas: None,
                });
            }
        }
        Ok(RawState {
            value: None,
            remaining: None,
            fencing_counter,
            on_replicas: None,
        })
    }
}

impl Redlock {
    /// Marks the value on lock `keys` as listened for on every node (`mark_listened.lua`),
    /// so that its release is announced on the release channel (a multi-lock's waiter):
    /// the holder's remaining TTL in ms, or -2 when no majority holds the lock. `None` when
    /// fewer than a majority answered.
    pub async fn mark_listened(&self, keys: &LockKeys) -> Option<i64> {
        let results = self
            .on_all(&keys.name, |node| async move {
                node.server()
                    .run::<i64>(&MARK_LISTENED, &keys.name, &[&keys.lock], &[])
                    .await
            })
            .await;
        let answers: Vec<i64> = results.into_iter().filter_map(Result::ok).collect();
        if answers.len() < self.quorum() {
            return None;
        }
        let held: Vec<i64> = answers.into_iter().filter(|&pttl| pttl >= 0).collect();
        if held.len() < self.quorum() {
            return Some(-2);
        }
        held.into_iter().max()
    }

    /// Writes the drawn fencing token back to the nodes; true when a majority has it.
    async fn write_back_fence(&self, keys: &LockKeys, token: u64) -> bool {
        let results = self
            .on_all(&keys.name, |node| node.raise_fence(keys, token))
            .await;
        results.iter().filter(|r| r.is_ok()).count() >= self.quorum()
    }
}
