//! Lease auto-renewal: one background task per `Locker` extends every auto-renewed lease
//! before it can expire, in batches (one pipelined round trip per tick), and reports the
//! ones Redis no longer holds for us as lost at once.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::backend::{AnyBackend, Backend as _};
use crate::engine::background::Background;
use crate::engine::held::Held;
use crate::engine::watch::LossWatch;
use crate::undo::Undo;
use crate::LockError;

/// Leases are extended once a third of their TTL has passed, so two renewals can fail
/// before the lease runs out.
const RENEW_AFTER: u32 = 3;

/// The fewest entries at which a registration looks for those of leases gone.
const PRUNE_AT_LEAST: usize = 64;

/// Leases due within this share of their TTL join the current batch, so that leases taken
/// at slightly different times are renewed together.
const BATCH_WINDOW: u32 = 6;

#[derive(Default)]
pub(crate) struct Renewer {
    state: Mutex<State>,
    wake: Notify,
    /// Told when a round starts and ends: the server pushes back every key a round
    /// extends, and the watch reads them once, after the round.
    watch: Option<Arc<LossWatch>>,
}

#[derive(Default)]
struct State {
    leases: Vec<Entry>,
    /// The number of entries at which a registration drops those of leases gone (see
    /// [`Renewer::register`]).
    prune_at: usize,
    running: bool,
    /// When the task will look next on its own; a new lease due later needs no wake-up.
    next_wake: Option<Instant>,
}

struct Entry {
    lease: Weak<Held>,
    serial: u64,
    next_due: Instant,
    /// The `max_hold` cap: renewal stops here.
    stop_at: Option<Instant>,
}

impl Renewer {
    /// A renewer whose rounds `watch` hears of.
    pub fn watched(watch: Option<Arc<LossWatch>>) -> Renewer {
        Renewer {
            watch,
            ..Renewer::default()
        }
    }

    /// Starts renewing `lease` on `backend` (on the renewal task, started if needed).
    pub fn register(
        self: &Arc<Self>,
        backend: &Arc<AnyBackend>,
        background: &Arc<Background>,
        lease: &Arc<Held>,
        max_hold: Option<Duration>,
    ) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Short leases are gone long before the task looks again (a third of a TTL): drop
        // their entries each time the list has doubled, so that it holds at most about
        // twice the leases alive, and their memory is freed on a thread that takes leases
        // rather than in one burst by the task.
        let State {
            leases, prune_at, ..
        } = &mut *state;
        prune_gone(leases, prune_at, |entry| entry.lease.strong_count() != 0);
        state.leases.push(Entry {
            lease: Arc::downgrade(lease),
            serial: lease.serial,
            next_due: lease.acquired_at() + lease.ttl / RENEW_AFTER,
            stop_at: max_hold.map(|cap| lease.acquired_at() + cap),
        });
        if state.running {
            let due = lease.acquired_at() + lease.ttl / RENEW_AFTER;
            // Waking the task costs more than registering; most leases are due after its
            // next look anyway.
            if state.next_wake.is_none_or(|wake| due < wake) {
                drop(state);
                self.wake.notify_one();
            }
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(name = %lease.keys.name, "auto-renewal needs a tokio runtime; the lease will expire after its TTL");
            state.leases.pop();
            return;
        };
        state.running = true;
        runtime.spawn(run(
            Arc::clone(backend),
            Arc::clone(background),
            Arc::clone(self),
        ));
    }
}

/// Drops the entries no longer `alive` once `entries` has reached `prune_at`, and sets the
/// next threshold at twice what is left (at least [`PRUNE_AT_LEAST`]): amortized, a
/// constant cost per entry pushed.
fn prune_gone<T>(entries: &mut Vec<T>, prune_at: &mut usize, alive: impl Fn(&T) -> bool) {
    if entries.len() >= *prune_at {
        entries.retain(alive);
        *prune_at = (entries.len() * 2).max(PRUNE_AT_LEAST);
    }
}

/// Tells the watch that a round ended, once its replies are applied (or the round was
/// dropped).
struct RoundEnd<'a>(Option<&'a LossWatch>);

impl RoundEnd<'_> {
    fn start(watch: Option<&LossWatch>) -> RoundEnd<'_> {
        if let Some(watch) = watch {
            watch.renewing();
        }
        RoundEnd(watch)
    }
}

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        if let Some(watch) = self.0 {
            watch.renewed();
        }
    }
}

/// The renewal task. It holds the backend only while it has leases to renew, and ends when
/// the last one is released, dropped, lost or capped.
fn run(
    backend: Arc<AnyBackend>,
    background: Arc<Background>,
    renewer: Arc<Renewer>,
) -> impl std::future::Future<Output = ()> + Send {
    // Dropped with its runtime, even before its first poll: the next renewed lease starts
    // another task (a mark left saying "running" would leave every later lease unrenewed,
    // to expire under its holder). Made here, not in the task's body, which an unpolled
    // task never reaches.
    let mark = Arc::clone(&renewer);
    let unfinished = Undo::new(move || {
        let mut state = mark.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.running = false;
        state.next_wake = None;
    });
    renew_loop(backend, background, renewer, unfinished)
}

async fn renew_loop<F: FnOnce()>(
    backend: Arc<AnyBackend>,
    background: Arc<Background>,
    renewer: Arc<Renewer>,
    unfinished: Undo<F>,
) {
    loop {
        let Some((due, next_wake)) = next_batch(&renewer) else {
            // Said so itself (in `next_batch`, under the state's lock).
            unfinished.disarm();
            return;
        };
        if !due.is_empty() {
            renew(&backend, &background, &renewer, due).await;
            continue;
        }
        let wake = renewer.wake.notified();
        tokio::select! {
            () = wake => {}
            () = tokio::time::sleep_until(next_wake.into()) => {}
        }
    }
}

/// The leases to renew now, and when to look next; `None` when there is nothing left.
fn next_batch(renewer: &Renewer) -> Option<(Vec<Arc<Held>>, Instant)> {
    let now = Instant::now();
    let mut state = renewer.state.lock().unwrap_or_else(PoisonError::into_inner);
    state.leases.retain(|entry| {
        let Some(lease) = entry.lease.upgrade() else {
            return false;
        };
        if lease.is_finished() || lease.is_marked_lost() {
            return false;
        }
        if entry.stop_at.is_some_and(|stop| now >= stop) {
            tracing::warn!(name = %lease.keys.name, "max_hold reached: renewal stops and the lease will expire");
            return false;
        }
        true
    });
    if state.leases.is_empty() {
        state.running = false;
        state.next_wake = None;
        return None;
    }
    let mut due = Vec::new();
    let mut next_wake = now + Duration::from_secs(3600);
    for entry in &state.leases {
        let Some(lease) = entry.lease.upgrade() else {
            continue;
        };
        if entry.next_due <= now + lease.ttl / BATCH_WINDOW {
            due.push(lease);
        } else {
            next_wake = next_wake.min(entry.next_due);
        }
    }
    // Renewing now means looking again right after; otherwise the task sleeps until then.
    state.next_wake = due.is_empty().then_some(next_wake);
    Some((due, next_wake))
}

async fn renew(
    backend: &Arc<AnyBackend>,
    background: &Arc<Background>,
    renewer: &Renewer,
    due: Vec<Arc<Held>>,
) {
    let sent_at = Instant::now();
    let items: Vec<_> = due
        .iter()
        .map(|lease| (&lease.keys, lease.value.as_str(), lease.ttl))
        .collect();
    let _round = RoundEnd::start(renewer.watch.as_deref());
    let results = backend.extend_many(&items).await;
    let mut late = Vec::new();
    {
        let mut state = renewer.state.lock().unwrap_or_else(PoisonError::into_inner);
        for (lease, result) in due.iter().zip(results) {
            let next_due = match result {
                Ok(true) if lease.extended(sent_at, lease.ttl) => {
                    crate::metrics::renewal(&lease.keys.name, "renewed");
                    sent_at + lease.ttl / RENEW_AFTER
                }
                Ok(true) if lease.is_finished() => {
                    // Released or dropped while the renewal was in flight: the release that
                    // follows it on the connection deletes the lock; nothing to apply.
                    continue;
                }
                Ok(true) => {
                    // The reply came after the lease's validity had run out locally: its holder
                    // may have been told it was lost, and loss is final. The lock, ours in
                    // Redis for a TTL more, is given back below (`Held::give_back_late`).
                    crate::metrics::renewal(&lease.keys.name, "lost");
                    lease.mark_lost();
                    late.push(Arc::clone(lease));
                    continue;
                }
                Ok(false) | Err(LockError::WrongType { .. }) => {
                    // Expired, deleted, replaced by a foreign value, or the server restarted
                    // empty: tell the holder now.
                    crate::metrics::renewal(&lease.keys.name, "lost");
                    lease.mark_lost();
                    continue;
                }
                Err(err) => {
                    crate::metrics::renewal(&lease.keys.name, "error");
                    // Try again soon; if Redis stays away, the lease's validity runs out and
                    // `lost()` fires on its own.
                    tracing::debug!(name = %lease.keys.name, %err, "renewal failed; retrying");
                    sent_at + (lease.ttl / 10).min(Duration::from_millis(200))
                }
            };
            if let Some(entry) = state.leases.iter_mut().find(|e| e.serial == lease.serial) {
                entry.next_due = next_due;
            }
        }
    }
    // In tasks of their own, counted for `shutdown`: this task renews every other lease of
    // the Locker, which must not wait for a give-back's round trip (a whole command
    // timeout against a server that stopped answering).
    for lease in late {
        let backend = Arc::clone(backend);
        if !background.spawn(async move { lease.give_back_late(&backend).await }) {
            tracing::debug!(
                "no runtime to give back a lease lost to a late renewal; its TTL will free it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_of_short_leases_keeps_the_list_near_the_leases_alive() {
        let long: Vec<Arc<u32>> = (0..10).map(Arc::new).collect();
        let mut entries: Vec<Weak<u32>> = long.iter().map(Arc::downgrade).collect();
        let mut prune_at = 0;
        for i in 0..10_000 {
            prune_gone(&mut entries, &mut prune_at, |weak| weak.strong_count() != 0);
            let short = Arc::new(100 + i);
            entries.push(Arc::downgrade(&short));
            drop(short);
            assert!(
                entries.len() <= 2 * long.len() + PRUNE_AT_LEAST + 1,
                "{} entries for {} leases alive",
                entries.len(),
                long.len()
            );
        }
        let kept: Vec<u32> = entries
            .iter()
            .filter_map(|weak| weak.upgrade())
            .map(|l| *l)
            .collect();
        assert_eq!(
            kept,
            (0..10).collect::<Vec<u32>>(),
            "every lease alive is kept"
        );
    }
}
