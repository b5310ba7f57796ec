//! The things being compared, behind one trait. A new contender is one module implementing
//! [`Contender`], one variant of [`Any`], and a line where the scenarios' lists are built
//! (`crate::lineup`).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

pub mod annotated;
pub mod blocking;
pub mod core;
pub mod handoff;
pub mod naive;
pub mod raw;
pub mod rslock;
pub mod semaphore;

/// How a scenario wants one lock taken.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub ttl: Duration,
    /// How long to keep trying while someone else holds the name; zero: try once.
    pub wait: Duration,
    /// Whether to watch, while the body runs, for the library telling the holder that its
    /// lock is lost (S5). Off elsewhere: watching has a cost (a timer per hold).
    pub watch_lost: bool,
}

/// What the library said when the lock was given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// We still held it, and it is free now.
    Held,
    /// The lock was no longer ours (it expired, and maybe someone else took it): the library
    /// reports the overrun, after the fact.
    Lost,
    /// The library does not say.
    Unknown,
}

/// One critical section, as the contender saw it.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub released: Released,
    /// When the library told the holder, while the body ran, that the lock was lost.
    pub lost_signal_at: Option<Instant>,
    /// The end of the lease's validity as the library computed it when the body began.
    pub valid_until: Option<Instant>,
}

impl Outcome {
    pub fn released(released: Released) -> Outcome {
        Outcome {
            released,
            lost_signal_at: None,
            valid_until: None,
        }
    }
}

/// Gives back many held leases when awaited; until then they stay held (and renewed).
pub type ReleaseAll = Pin<Box<dyn Future<Output = Result<HeldSummary, String>> + Send>>;

/// What a contender knows about its leases when it gives them back (renewal cost).
#[derive(Debug, Clone, Copy, Default)]
pub struct HeldSummary {
    /// Leases the library found lost (expired before renewal) by the end of the hold.
    pub lost: usize,
}

/// A lock implementation under test.
pub trait Contender: Send + Sync + 'static {
    /// The name printed in tables.
    fn label(&self) -> &str;

    /// Whether held locks are kept alive while the body runs (auto-renewal).
    fn renews(&self) -> bool {
        false
    }

    /// Takes `name` as `spec` says, runs `body` while holding it, and gives it back. `Err`
    /// when the lock could not be had (busy, timed out, Redis error); the body did not run.
    fn locked<B>(
        &self,
        name: &str,
        spec: Spec,
        body: B,
    ) -> impl Future<Output = Result<Outcome, String>> + Send
    where
        B: Future<Output = ()> + Send;

    /// Opens connections and loads scripts before a measurement starts.
    fn warm_up(&self) -> impl Future<Output = Result<(), String>> + Send {
        async move {
            let spec = Spec {
                ttl: Duration::from_secs(10),
                wait: Duration::from_secs(1),
                watch_lost: false,
            };
            self.locked("warm-up", spec, async {}).await.map(|_| ())
        }
    }

    /// Takes every name in `names` for `ttl` and keeps them alive until the returned future
    /// is awaited (the renewal-cost scenario). `None`: this contender has no renewal.
    fn hold_renewed(
        &self,
        names: Vec<String>,
        ttl: Duration,
    ) -> impl Future<Output = Option<Result<ReleaseAll, String>>> + Send {
        let _ = (names, ttl);
        async { None }
    }
}

/// Every contender, so that one list can mix them (static dispatch: no boxing on the
/// measured path).
pub enum Any {
    Raw(raw::Raw),
    Naive(naive::Naive),
    Core(core::Core),
    Annotated(annotated::Annotated),
    Rslock(rslock::Rslock),
    Semaphore(semaphore::Semaphore),
    Blocking(blocking::Blocking),
    /// Boxed: its pub/sub link makes it several times the size of the others.
    Handoff(Box<handoff::Handoff>),
}

macro_rules! each {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            Any::Raw($c) => $body,
            Any::Naive($c) => $body,
            Any::Core($c) => $body,
            Any::Annotated($c) => $body,
            Any::Rslock($c) => $body,
            Any::Semaphore($c) => $body,
            Any::Blocking($c) => $body,
            Any::Handoff($c) => $body,
        }
    };
}

impl Contender for Any {
    fn label(&self) -> &str {
        each!(self, c => c.label())
    }

    fn renews(&self) -> bool {
        each!(self, c => c.renews())
    }

    async fn locked<B>(&self, name: &str, spec: Spec, body: B) -> Result<Outcome, String>
    where
        B: Future<Output = ()> + Send,
    {
        each!(self, c => c.locked(name, spec, body).await)
    }

    async fn warm_up(&self) -> Result<(), String> {
        each!(self, c => c.warm_up().await)
    }

    async fn hold_renewed(
        &self,
        names: Vec<String>,
        ttl: Duration,
    ) -> Option<Result<ReleaseAll, String>> {
        each!(self, c => c.hold_renewed(names, ttl).await)
    }
}
