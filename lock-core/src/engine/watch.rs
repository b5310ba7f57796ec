//! A lost lease noticed at once: the loss watch of one `Locker`, and its server check.
//!
//! Every lease this Locker is granted is registered here; once it has been held for
//! [`BATCH`], its lock key is read on the Locker's watch connection
//! ([`crate::connection::watcher`], `CLIENT TRACKING on`), in batches: the keys that came
//! due together go in one `MGET`, so an acquisition costs at most one extra call and
//! usually a fraction of one, and a lease released within [`BATCH`] costs none (a loss
//! before the read is found by the read). From then on the server pushes an invalidation
//! when the key changes (deleted, overwritten, expired, evicted, flushed). The leases held
//! on an invalidated key re-read it (one batched `MGET` again, which also tracks it anew)
//! and are marked lost if it no longer holds their value. A push about a key whose lease
//! has ended (our own release) costs nothing.
//!
//! Our own renewals change the key too (`PEXPIRE` counts as a modification): their
//! pushes lead to a re-read that finds our value, so no lease is ever told falsely, at
//! one batched read per renewal round.
//!
//! On a Redis Cluster there is one watch connection per master
//! ([`crate::connection::watch_nodes`]), each key read on its slot's master; a key that
//! could not be read there (its slot moved or is moving, its master failed) is read again
//! after a short pause, never judged on what was not read.
//!
//! Silence is never taken for "still held": when a watch connection drops, misses its
//! heartbeat (a `PING` every [`HEARTBEAT`] while leases are watched, `ROLE` on a
//! Cluster's masters, answered within the command timeout), is retired at a Sentinel
//! switch of master, or the server reports a flush, every watched lease re-reads its key
//! at once (on a new connection, on the master the Sentinels name now, retried with a
//! growing pause while the server is away). A server that refuses tracking (no RESP3,
//! `CLIENT TRACKING` forbidden) leaves the Locker with renewal-time detection, said once
//! in a warning.
//!
//! The server check ([`crate::engine::server_check`]): when the watch connection opens, it
//! reads `maxmemory-policy`; a server that could evict lock keys is reported once (warning
//! and metric) or, with [`EvictionCheck::Refuse`], makes acquisitions fail with
//! `Misconfigured`. The watch opens the connection for it, at the first acquisition.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::connection::connect::Dial;
#[cfg(feature = "cluster")]
use crate::connection::watch_nodes::{NodeWatchers, Seeds};
use crate::connection::watcher::{Eviction, WatchError, WatchListener, Watcher};
use crate::engine::granted::{Granted, BATCH};
use crate::engine::held::Held;
use crate::engine::server_check::ServerCheck;
use crate::eviction::EvictionCheck;
use crate::token::is_ours;
use crate::undo::Undo;
use crate::LockError;

/// The longest pause between re-reads while the server does not answer.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How often the watch connections are pinged while leases are watched (the heartbeat): a
/// connection that only listens would never find out that it died silently (a stalled
/// server, a network stall that ate a push).
const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long the watch task waits for a new lease once nothing is watched, before it ends
/// (and the next grant spawns it again).
const LINGER: Duration = Duration::from_secs(1);

/// The watch connections: one server's (or the Sentinels' master's), or one per master of
/// a Cluster.
enum Watchers {
    One(Watcher),
    #[cfg(feature = "cluster")]
    Nodes(NodeWatchers),
}

/// What one read found per key: `Some(value)` when read (`None` inside: absent), `None`
/// when the key could not be read this time (read it again).
type Found = Vec<Option<Option<Vec<u8>>>>;

impl Watchers {
    async fn ensure_open(&self) -> Result<(), WatchError> {
        match self {
            Watchers::One(watcher) => watcher.ensure_open().await,
            #[cfg(feature = "cluster")]
            Watchers::Nodes(nodes) => nodes.ensure_open().await,
        }
    }

    async fn read(&self, keys: &[&str]) -> Result<Found, WatchError> {
        match self {
            Watchers::One(watcher) => Ok(watcher.read(keys).await?.into_iter().map(Some).collect()),
            #[cfg(feature = "cluster")]
            Watchers::Nodes(nodes) => nodes.read(keys).await,
        }
    }

    /// The heartbeat; false if a connection missed it (or a Cluster node is no longer a
    /// master): every lease must look again.
    async fn heartbeat(&self) -> bool {
        match self {
            Watchers::One(watcher) => watcher.ping().await.is_ok(),
            #[cfg(feature = "cluster")]
            Watchers::Nodes(nodes) => nodes.heartbeat().await,
        }
    }
}

pub(crate) struct LossWatch {
    watcher: Watchers,
    /// Whether leases are watched (`track_keys`); off, the watcher only checks eviction.
    track: bool,
    state: Mutex<State>,
    /// Leases granted and not yet [`BATCH`] old, by the thread that granted them: a grant
    /// touches no lock or cache line another thread writes. The clock thread tells the
    /// task when one is due.
    granted: Arc<Granted>,
    /// The task runs or was told to start: later grants need not tell it (cleared when it
    /// is about to end; without the clock thread, at each of its looks).
    nudged: AtomicBool,
    /// Tracking was refused and said so: leases are no longer watched.
    off: AtomicBool,
    wake: Arc<Notify>,
    server: ServerCheck,
    /// Renewal rounds in flight: the keys they change are pushed back one by one, and are
    /// read once the round is over, all in one read.
    renewing: AtomicUsize,
    /// The heartbeat task runs (while the watch task does).
    beating: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Lock key -> the leases filed on it (at most one live, usually). Only the task files
    /// leases (in `take`), and it reads and judges in turn, so a read judges only leases
    /// filed before it was sent.
    leases: HashMap<String, Vec<Weak<Held>>>,
    /// Keys to read: just granted, or invalidated.
    pending: HashSet<String>,
    /// Re-read every watched key (connection lost or reopened, database flushed).
    all: bool,
    running: bool,
}

impl LossWatch {
    /// The loss watch of a Locker on the server `dial` reaches, or `None` when it has
    /// nothing to do (`track` off and the check off) or cannot open a connection there.
    pub fn new(
        dial: &Dial,
        timeout: Duration,
        track: bool,
        check: EvictionCheck,
    ) -> Option<Arc<LossWatch>> {
        if !track && check == EvictionCheck::Off {
            return None;
        }
        let client = Watcher::dial_for(dial)?;
        Some(LossWatch::with(track, check, |listener| {
            Watchers::One(Watcher::new(client, timeout, track, listener))
        }))
    }

    /// The loss watch of a Locker on the Redis Cluster that `seeds` reach: one watch
    /// connection per master. `None` as for [`LossWatch::new`].
    #[cfg(feature = "cluster")]
    pub fn on_cluster(
        seeds: &[redis::Client],
        timeout: Duration,
        track: bool,
        check: EvictionCheck,
    ) -> Option<Arc<LossWatch>> {
        if !track && check == EvictionCheck::Off {
            return None;
        }
        let seeds = Seeds::new(seeds)?;
        Some(LossWatch::with(track, check, |listener| {
            Watchers::Nodes(NodeWatchers::new(seeds, timeout, track, listener))
        }))
    }

    fn with(
        track: bool,
        check: EvictionCheck,
        watchers: impl FnOnce(Weak<dyn WatchListener>) -> Watchers,
    ) -> Arc<LossWatch> {
        let wake = Arc::new(Notify::new());
        Arc::new_cyclic(|weak: &Weak<LossWatch>| {
            let listener: Weak<dyn WatchListener> = weak.clone();
            LossWatch {
                watcher: watchers(listener),
                track,
                state: Mutex::default(),
                granted: Granted::new(Arc::clone(&wake), track),
                nudged: AtomicBool::new(false),
                off: AtomicBool::new(false),
                wake,
                server: ServerCheck::new(check),
                renewing: AtomicUsize::new(0),
                beating: AtomicBool::new(false),
            }
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Watches a fresh lease's key from now on (one batched read).
    pub fn register(self: &Arc<Self>, held: &Arc<Held>) {
        if !self.track || self.off.load(Ordering::Relaxed) {
            return;
        }
        let acquired = held.acquired_at();
        self.granted
            .push(acquired.checked_add(BATCH).unwrap_or(acquired), held);
        // Pushed (and fenced, in `push`) before `nudged` is read; the task clears `nudged`
        // before it looks at the lists. One of the two sees the other.
        if !self.nudged.load(Ordering::Relaxed) && !self.nudged.swap(true, Ordering::SeqCst) {
            self.start();
        }
    }

    /// Starts the task if it is not running; wakes it otherwise.
    #[inline(never)]
    fn start(self: &Arc<Self>) {
        let mut state = self.state();
        if state.running {
            drop(state);
            self.wake.notify_one();
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Told nobody: the next grant tries again.
            self.nudged.store(false, Ordering::SeqCst);
            return;
        };
        state.running = true;
        drop(state);
        self.spawn_tasks(&runtime);
    }

    /// Takes the leases granted that are due to be read (the task's).
    fn take_granted(&self, now: Instant) -> Vec<Weak<Held>> {
        if !self.granted.clocked() {
            // No clock thread: the task looks on its own timer, and a grant after this
            // look must tell it (it may be about to wait for nothing but a grant).
            self.nudged.store(false, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        }
        if self.off.load(Ordering::Relaxed) {
            // Refused meanwhile: a grant that slipped in is not watched.
            self.granted.clear();
            return Vec::new();
        }
        self.granted.take_due(now)
    }

    /// No lease granted waits to be due.
    fn none_granted(&self) -> bool {
        self.granted.is_empty()
    }

    /// Spawns the watch task, and the heartbeat unless it runs. Not inlined: the tasks'
    /// futures are built here, not in the stack frame of every [`LossWatch::register`]
    /// (see `out_of_line.rs`).
    #[inline(never)]
    fn spawn_tasks(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        runtime.spawn(run(Arc::downgrade(self)));
        if !self.beating.swap(true, Ordering::AcqRel) {
            runtime.spawn(heartbeat(Arc::downgrade(self)));
        }
    }

    /// Before an acquisition: with [`EvictionCheck::Refuse`], `Misconfigured` while the
    /// server could evict locks (the first acquisition waits for the check, until `by`: the
    /// end of the request's own time; false if the server did not answer by then); with
    /// `Warn`, the first acquisition starts the check in the background.
    pub async fn server_ready(
        self: &Arc<Self>,
        name: &str,
        by: Instant,
    ) -> Result<bool, LockError> {
        match self.server.mode() {
            EvictionCheck::Off => Ok(true),
            EvictionCheck::Warn => {
                if self.server.start() {
                    let watch = Arc::clone(self);
                    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                        // Dropped with its runtime (before its first poll, too): the next
                        // acquisition checks.
                        let mark = Arc::clone(self);
                        let unfinished = Undo::new(move || mark.server.unstarted());
                        runtime.spawn(async move {
                            if let Err(WatchError::Refused(reason)) =
                                watch.watcher.ensure_open().await
                            {
                                watch.refused(&reason);
                            }
                            unfinished.disarm();
                        });
                    } else {
                        self.server.unstarted();
                    }
                }
                Ok(true)
            }
            EvictionCheck::Refuse => {
                // Boxed, and built out of line: opening the watch connection is a future of
                // several kilobytes, awaited once, and every acquisition's future (and the
                // stack frame of its polls) would otherwise be sized for it.
                if self.server.unknown() {
                    let opening = crate::out_of_line::boxed(|| {
                        tokio::time::timeout_at(by.into(), self.watcher.ensure_open())
                    });
                    match opening.await {
                        // No answer within the request's time: the request says so, and the
                        // next acquisition checks again.
                        Err(_elapsed) => return Ok(false),
                        Ok(Err(WatchError::Refused(reason))) => self.refused(&reason),
                        // Failed (a timeout of its own, a refused connection) as the
                        // request's time ran out.
                        Ok(Err(_)) if Instant::now() >= by => return Ok(false),
                        Ok(_) => {}
                    }
                }
                self.server.verdict(name).map(|()| true)
            }
        }
    }

    /// The server refused the watch connection's set-up for good.
    fn refused(&self, reason: &str) {
        let mut state = self.state();
        if self.off.swap(true, Ordering::SeqCst) {
            return;
        }
        state.leases.clear();
        state.pending.clear();
        drop(state);
        self.granted.clear();
        if self.track {
            tracing::warn!(
                reason,
                "the server refuses key tracking (RESP3 CLIENT TRACKING): a lease whose key \
                 is deleted or overwritten is noticed at its next renewal or at the end of \
                 its validity, not at once"
            );
        }
    }

    /// A renewal round starts: what it changes is read once it ends ([`LossWatch::renewed`]).
    pub fn renewing(&self) {
        self.renewing.fetch_add(1, Ordering::AcqRel);
    }

    /// A renewal round ended (its replies applied).
    pub fn renewed(&self) {
        if self.renewing.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.wake.notify_one();
        }
    }

    /// The keys to read now, or `None` when nothing waits (or a renewal round is in
    /// flight: its keys are read when it ends).
    fn take(&self) -> Option<Vec<String>> {
        if self.renewing.load(Ordering::Acquire) > 0 {
            return None;
        }
        // File the leases granted that are still held and at least [`BATCH`] old (from the
        // start of the attempt that took them); younger ones wait in their lists, so that a
        // lease released within `BATCH` of its grant is never read (nor its release pushed
        // back).
        let granted = self.take_granted(Instant::now());
        let mut state = self.state();
        for weak in granted {
            let Some(lease) = weak.upgrade().filter(|lease| !lease.has_ended()) else {
                continue;
            };
            let key = &lease.keys.lock;
            state.pending.insert(key.clone());
            state.leases.entry(key.clone()).or_default().push(weak);
        }
        let keys: Vec<String> = if std::mem::take(&mut state.all) {
            state.pending.clear();
            state.leases.keys().cloned().collect()
        } else {
            state.pending.drain().collect()
        };
        let live: Vec<String> = keys
            .into_iter()
            .filter(|key| {
                let Some(entries) = state.leases.get_mut(key) else {
                    return false;
                };
                entries.retain(|weak| weak.upgrade().is_some_and(|l| !l.has_ended()));
                if entries.is_empty() {
                    state.leases.remove(key);
                    return false;
                }
                true
            })
            .collect();
        Some(live).filter(|live| !live.is_empty())
    }

    /// Applies a read (keys and their values): a lease filed before it was sent whose key
    /// no longer holds its value is lost.
    fn judge(&self, read: Vec<(String, Option<Vec<u8>>)>) {
        let mut lost = Vec::new();
        {
            let mut state = self.state();
            for (key, value) in read {
                let key = &key;
                let Some(entries) = state.leases.get_mut(key) else {
                    continue;
                };
                entries.retain(|weak| {
                    let Some(lease) = weak.upgrade() else {
                        return false;
                    };
                    if lease.has_ended() {
                        return false;
                    }
                    let ours = value
                        .as_deref()
                        .is_some_and(|stored| is_ours(stored, &lease.value));
                    if !ours {
                        lost.push(lease);
                    }
                    ours
                });
                if entries.is_empty() {
                    state.leases.remove(key);
                }
            }
        }
        for lease in lost {
            if lease.has_ended() {
                continue;
            }
            crate::metrics::tracked_loss(&lease.keys.name);
            tracing::warn!(name = %lease.keys.name, "the server reports the lock's key changed and it no longer holds this lease's token: deleted, overwritten, expired, evicted or flushed");
            lease.mark_lost();
        }
    }

    /// Puts `keys` back to be read again (the read failed).
    fn retry(&self, keys: Vec<String>) {
        let mut state = self.state();
        state.pending.extend(keys);
    }

    /// Ends the task when nothing is watched; true if it ended.
    fn idle(&self) -> bool {
        let mut state = self.state();
        // A grant after this is told to start a task (see `register`).
        self.nudged.store(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if state.watches_nothing() && self.none_granted() {
            state.running = false;
            return true;
        }
        false
    }

    /// No lease is watched, nor waits to be.
    fn watches_nothing(&self) -> bool {
        self.state().watches_nothing() && self.none_granted()
    }
}

impl State {
    fn watches_nothing(&self) -> bool {
        self.leases.is_empty() && self.pending.is_empty() && !self.all
    }
}

/// The watch task: reads what is pending, judges the leases, and sleeps until told. Its
/// mark is taken back if it is dropped with its runtime, even before its first poll (the
/// guard is made here, not in the task's body, which an unpolled task never reaches).
fn run(weak: Weak<LossWatch>) -> impl std::future::Future<Output = ()> + Send {
    let mark = weak.clone();
    let unfinished = Undo::new(move || {
        if let Some(watch) = mark.upgrade() {
            let mut state = watch.state();
            state.running = false;
            watch.nudged.store(false, Ordering::SeqCst);
        }
    });
    async move {
        watch_loop(weak).await;
        unfinished.disarm();
    }
}

/// The heartbeat task (see [`beat_loop`]); its mark is taken back as the watch task's is.
fn heartbeat(weak: Weak<LossWatch>) -> impl std::future::Future<Output = ()> + Send {
    let mark = weak.clone();
    let unfinished = Undo::new(move || {
        if let Some(watch) = mark.upgrade() {
            watch.beating.store(false, Ordering::SeqCst);
        }
    });
    async move {
        beat_loop(weak).await;
        unfinished.disarm();
    }
}

/// The watch task's work, until nothing is left to watch.
async fn watch_loop(weak: Weak<LossWatch>) {
    let mut pause = Duration::from_millis(20);
    // The task starts with a lease just granted. The clock thread tells it when that lease
    // is due; without the clock, it looks on its own timer, the first time once the lease
    // may be due.
    if weak.upgrade().is_some_and(|watch| !watch.granted.clocked()) {
        tokio::time::sleep(BATCH).await;
    }
    loop {
        let Some(watch) = weak.upgrade() else { return };
        let wake = Arc::clone(&watch.wake);
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let Some(keys) = watch.take() else {
            let young = !watch.none_granted();
            let nothing_watched = !young && watch.state().watches_nothing();
            let clocked = watch.granted.clocked();
            drop(watch);
            if young && !clocked {
                // Leases too young to read, and no clock thread to say when they are due:
                // look again once they are old enough (the keys pushed meanwhile join that
                // read).
                tokio::time::sleep(BATCH).await;
                continue;
            }
            if nothing_watched {
                // Nothing left to watch: wait a while for the next grant before ending, so
                // that a Locker that keeps taking short leases tells a running task (a
                // wake) rather than spawns one per batch. The heartbeat pings nobody
                // meanwhile.
                if tokio::time::timeout(LINGER, notified).await.is_err() {
                    let Some(watch) = weak.upgrade() else { return };
                    if watch.idle() {
                        return;
                    }
                    continue;
                }
            } else {
                notified.await;
            }
            // Told that a lease is due (the clock tells only then, and those due with it
            // are due now): read at once. Told of keys pushed back: let the others pushed
            // with them join their read.
            let due = weak
                .upgrade()
                .is_some_and(|watch| watch.granted.any_due(Instant::now()));
            if !due {
                tokio::time::sleep(BATCH).await;
            }
            continue;
        };
        let borrowed: Vec<&str> = keys.iter().map(String::as_str).collect();
        match watch.watcher.read(&borrowed).await {
            Ok(found) => {
                let mut read = Vec::with_capacity(keys.len());
                let mut unread = Vec::new();
                for (key, value) in keys.into_iter().zip(found) {
                    match value {
                        Some(value) => read.push((key, value)),
                        None => unread.push(key),
                    }
                }
                watch.judge(read);
                if unread.is_empty() {
                    pause = Duration::from_millis(20);
                    continue;
                }
                // A Cluster slot that moved, is moving, or whose master failed: read again
                // once the slot map is read again.
                tracing::debug!(
                    keys = unread.len(),
                    "some watched lock keys could not be read; retrying"
                );
                watch.retry(unread);
                drop(watch);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_RETRY_PAUSE);
            }
            Err(WatchError::Refused(reason)) => {
                watch.refused(&reason);
                let mut state = watch.state();
                state.running = false;
                return;
            }
            Err(WatchError::Failed(err) | WatchError::Redirected(err)) => {
                tracing::debug!(%err, "re-reading watched lock keys failed; retrying");
                watch.retry(keys);
                drop(watch);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_RETRY_PAUSE);
            }
        }
    }
}

/// The heartbeat task, beside the watch task and for as long as it runs: every
/// [`HEARTBEAT`] while a lease is watched, each watch connection is asked for a sign of life (on its own task, so
/// that a master that does not answer delays no push from the others); a connection that
/// misses it is retired, and every lease looks again.
async fn beat_loop(weak: Weak<LossWatch>) {
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        let Some(watch) = weak.upgrade() else { return };
        if !watch.state().running {
            watch.beating.store(false, Ordering::Release);
            // A watch task started meanwhile found this one still beating: go on for it.
            if !watch.state().running || watch.beating.swap(true, Ordering::AcqRel) {
                return;
            }
            continue;
        }
        // The watch task waits for a grant with nothing to watch: no connection to check.
        if watch.watches_nothing() {
            continue;
        }
        if !watch.watcher.heartbeat().await {
            // Silence proves nothing: every lease looks again, on a new connection,
            // retried while the server is away.
            watch.everything(None);
        }
    }
}

impl WatchListener for LossWatch {
    fn invalidated(&self, keys: Vec<Vec<u8>>) {
        let mut state = self.state();
        let mut any = false;
        for key in keys {
            let Ok(key) = String::from_utf8(key) else {
                continue;
            };
            if state.leases.contains_key(&key) {
                state.pending.insert(key);
                any = true;
            }
        }
        if any {
            drop(state);
            self.wake.notify_one();
        }
    }

    fn everything(&self, _generation: Option<u64>) {
        let mut state = self.state();
        if state.leases.is_empty() {
            return;
        }
        state.all = true;
        drop(state);
        self.wake.notify_one();
    }

    fn opened(&self, generation: u64, eviction: Result<Eviction, String>) {
        if generation > 1 {
            // A new connection: what the old one tracked is no longer tracked.
            self.everything(None);
        }
        self.server.read(eviction);
    }
}
