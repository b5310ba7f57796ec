//! The engine: what every clone of one `Locker` shares, and the machinery behind the
//! facade's `.await`s. The layer between the public API (`Locker`, `LockRequest`, `Lease`,
//! the primitives) and the backends.
//!
//! - [`acquire`]: one acquisition, from the fast path (one `SET`) to [`turn`], the slow
//!   path: waiting in this Locker's local queue, then in the lock's Redis-side queue or on
//!   its release channel, until the lock is ours or the deadline passes.
//! - [`held`]: the state of one held lock (validity, loss, release), shared by a lease, its
//!   handles and the renewer.
//! - [`renew`]: the one task per Locker that extends auto-renewed leases in batches.
//! - [`local`]: per-name state inside this Locker (local waiters, the local holder).
//! - [`deadlock`]: deadlock detection around a wait whose task holds other leases.
//! - [`background`]: work left running (background releases), counted for `shutdown`.
//! - [`watch`]: a held lease told at once when its key changes on the server (key
//!   tracking), and the check of the server's eviction policy; [`granted`]: the leases
//!   granted and not yet due to be read there, and the clock thread that says when one is;
//!   [`server_check`]: whether the server could evict lock keys, and what follows.
//!
//! Nothing here knows the public types; it reaches Redis only through the backends.

pub(crate) mod acquire;
mod attempt;
pub(crate) mod background;
pub(crate) mod deadlock;
mod granted;
pub(crate) mod held;
pub(crate) mod local;
pub(crate) mod renew;
mod server_check;
mod turn;
pub(crate) mod validity;
pub(crate) mod watch;

#[cfg(feature = "tower")]
pub(crate) use attempt::THIS_LOCKER;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{queue_member, AnyBackend};
use crate::connection::notifier::Notifier;
use crate::engine::background::Background;
use crate::engine::held::{Grant, Held};
use crate::engine::local::{LocalNames, Owner};
use crate::engine::renew::Renewer;
use crate::engine::watch::LossWatch;
use crate::fence::FenceWatch;
use crate::LockError;

/// A Locker's settings, resolved by the builder.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub prefix: String,
    pub default_ttl: Duration,
    pub default_wait: Duration,
    pub label: Option<String>,
    pub fencing: bool,
    pub command_timeout: Duration,
    /// How long a waiting request keeps trying while Redis does not answer.
    pub unreachable_timeout: Duration,
}

/// What the clones of one `Locker` share.
pub(crate) struct Engine {
    /// Shared with the renewal task, which outlives no lease it renews.
    backend: Arc<AnyBackend>,
    settings: Settings,
    local: Arc<LocalNames>,
    /// Release notifications; `None` when the locker has no URL to open a pub/sub
    /// connection with (built from a pool) or needs none (memory).
    notifier: Option<Notifier>,
    /// Waiters stand in the lock's Redis-side queue and are told their turn on the
    /// notifier's own channel (one Redis or a Cluster, on Lua scripts, with a notifier);
    /// otherwise they subscribe to each lock's release channel, or poll.
    queued_waits: bool,
    /// Redlock: notifiers on the other masters, with the same own channel, so that a
    /// waiter hears its turn from any master (the first one may be down or behind).
    other_masters: Vec<Notifier>,
    /// This Locker's member in waiter queues (see `backend::queue_member`), when it queues.
    queue_member: Option<String>,
    /// Every command this locker sends answers or fails within the command timeout (the
    /// connections were configured here): an attempt that ends well before a request's
    /// deadline needs no timer of its own.
    commands_bounded: bool,
    renewer: Arc<Renewer>,
    background: Arc<Background>,
    /// The highest fencing token handed out per name, to tell one that went backward.
    fences: FenceWatch,
    /// Key tracking of held leases and the eviction check (one Redis by URL, Sentinel, a
    /// Cluster).
    watch: Option<Arc<LossWatch>>,
}

impl Engine {
    pub fn new(
        backend: AnyBackend,
        settings: Settings,
        notifier: Option<Notifier>,
        commands_bounded: bool,
    ) -> Engine {
        // The queue needs the scripts, and a channel to be told on.
        let queued_waits = notifier.is_some()
            && matches!(backend, AnyBackend::Scripted(_) | AnyBackend::Redlock(_));
        let queue_member = notifier
            .as_ref()
            .filter(|_| queued_waits)
            .map(|notifier| queue_member(notifier.own_channel(), settings.label.as_deref()));
        Engine {
            queue_member,
            backend: Arc::new(backend),
            settings,
            local: Arc::default(),
            notifier,
            queued_waits,
            other_masters: Vec::new(),
            commands_bounded,
            renewer: Arc::default(),
            background: Arc::default(),
            fences: FenceWatch::default(),
            watch: None,
        }
    }

    /// Held leases are watched, and the server checked, by `watch`.
    pub fn watched_by(mut self, watch: Option<Arc<LossWatch>>) -> Engine {
        self.renewer = Arc::new(Renewer::watched(watch.clone()));
        self.watch = watch;
        self
    }

    /// Before an acquisition of `name` (a lock, permits, a multi-lock) begun at `begun`
    /// with `wait`: the server check (see [`LossWatch::server_ready`]), within the
    /// request's own time (its wait, or the command timeout for a try). A check the server
    /// did not answer by then ends the request: no time is left for an attempt.
    pub async fn server_ready(
        &self,
        name: &str,
        begun: Instant,
        wait: Duration,
    ) -> Result<(), LockError> {
        let Some(watch) = &self.watch else {
            return Ok(());
        };
        let own_time = if wait.is_zero() {
            self.settings.command_timeout
        } else {
            wait
        };
        if watch.server_ready(name, begun + own_time).await? {
            return Ok(());
        }
        Err(LockError::connection(
            name,
            format!(
                "no answer to the server check of EvictionCheck::Refuse within the request's \
                 {own_time:?} (its wait, or the command timeout for a try)"
            ),
        ))
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn backend(&self) -> &AnyBackend {
        &self.backend
    }

    /// The check that this Locker's fencing tokens never go backward.
    pub fn fences(&self) -> &FenceWatch {
        &self.fences
    }

    pub fn local(&self) -> &Arc<LocalNames> {
        &self.local
    }

    pub fn notifier(&self) -> Option<&Notifier> {
        self.notifier.as_ref()
    }

    /// Redlock: waiters are told their turn by the other masters too (see
    /// [`Engine::other_masters`]).
    pub fn told_by_other_masters(mut self, notifiers: Vec<Notifier>) -> Engine {
        self.other_masters = notifiers;
        self
    }

    /// The notifiers of Redlock's other masters (empty elsewhere).
    pub fn other_masters(&self) -> &[Notifier] {
        &self.other_masters
    }

    /// This Locker's member in waiter queues (set when waiters use them).
    pub fn queue_member(&self) -> Option<&str> {
        self.queue_member.as_deref()
    }

    /// The notifier, when waiters use the Redis-side waiter queue.
    pub fn queue_notifier(&self) -> Option<&Notifier> {
        self.notifier.as_ref().filter(|_| self.queued_waits)
    }

    /// Whether one attempt, started now, certainly ends before `deadline` without a timer of
    /// its own: the connection set-up and each of its at most `commands` commands are bounded
    /// by the command timeout. True saves a timer per uncontended acquisition.
    pub fn attempt_ends_before(&self, deadline: Instant, commands: u32) -> bool {
        self.commands_bounded
            && Instant::now() + self.settings.command_timeout * (commands + 1) < deadline
    }

    /// Whether every command this locker sends answers or fails within the command timeout
    /// (it configured the connections itself).
    pub fn commands_bounded(&self) -> bool {
        self.commands_bounded
    }

    /// Whether a try started now ends within the command timeout without a timer of its
    /// own (see `AnyBackend::try_is_bounded`). True saves a timer per try.
    pub fn try_ends_in_time(&self) -> bool {
        self.commands_bounded && self.backend.try_is_bounded()
    }

    /// Runs `work` in the background, counted for `shutdown`; false outside a tokio runtime
    /// (nothing runs then).
    pub fn spawn_background(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        self.background.spawn(work)
    }

    /// Completes once no background work is left.
    pub async fn idle(&self) {
        self.background.idle().await;
    }

    /// A fresh lease's state: this locker's local holder of its name, owned by `owner`
    /// (the code that awaited the request), renewed in the background if it asked to be.
    pub fn hold(&self, grant: Grant, owner: Owner) -> Arc<Held> {
        let renew = grant.renew;
        let held = Held::new(grant, owner, self.settings.unreachable_timeout);
        if let Some(renewal) = renew {
            self.renewer
                .register(&self.backend, &self.background, &held, renewal.max_hold);
        }
        if let Some(watch) = &self.watch {
            watch.register(&held);
        }
        held
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.backend)
            .field("settings", &self.settings)
            .finish()
    }
}
