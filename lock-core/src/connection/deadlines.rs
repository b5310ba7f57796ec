//! The command timeout of a connection this Locker opened itself, without a timer per
//! command.
//!
//! redis-rs bounds each command with a timer of its own (its response timeout): a tokio
//! timer entered in the runtime's wheel at the command's first poll and taken out when the
//! command ends. On the uncontended lock and release that was about 2,000 of a cycle's
//! 23,700 client instructions (callgrind, `lock-bench/examples/throughput_loop.rs`), about
//! 9%. The shared connection of a Locker given a URL (and of each Redlock node, and of a
//! Sentinel's master) is opened without that timeout and bounded here instead:
//!
//! - a command still waiting for its reply after its first poll files its deadline and its
//!   waker with [`Deadlines`], in a list of the polling thread's own (a lock no other thread
//!   takes but to remove a command that ended there, or the task below);
//! - one task per connection sleeps until the earliest deadline filed, fails the commands
//!   whose deadline has passed (the error redis-rs's timeout gives: an I/O error of kind
//!   `TimedOut`), and sleeps until the next one; a command filed with a deadline sooner than
//!   the one it sleeps until wakes it;
//! - a command that ends (answered, or its future dropped) takes its entry out.
//!
//! While commands flow the task wakes about once per command timeout (the deadline it
//! sleeps until is the oldest command's, long answered by then), and not at all while none
//! waits. A deadline is kept as precisely as a tokio timer keeps one: the task sleeps
//! until it, on the runtime's timer. The task runs on the runtime of the command that
//! started it; a Locker used from several runtimes has its deadlines kept there until that
//! runtime shuts down, and then on the runtime of the next command filed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use slab::Slab;
use thread_local::ThreadLocal;
use tokio::sync::Notify;
use tokio::time::Instant;

/// `next` while the task looks through the lists: every command filed meanwhile tells it.
const LOOKING: u64 = 0;

/// `next` when nothing is filed: the first command filed tells the task.
const NOTHING: u64 = u64::MAX;

/// The deadlines of one connection's commands waiting for a reply; cheap to clone (all
/// clones share one set, and one task).
#[derive(Clone)]
pub(crate) struct Deadlines {
    shared: Arc<Shared>,
}

struct Shared {
    /// Each thread's filed commands, apart so that a thread's filing touches no cache line
    /// another thread writes.
    threads: ThreadLocal<Filings>,
    /// When the task wakes next, in nanoseconds since `origin` ([`LOOKING`], [`NOTHING`]).
    next: AtomicU64,
    origin: Instant,
    /// Tells the task of a deadline sooner than `next` (or that the set was dropped).
    wake: Arc<Notify>,
    /// The task runs. Cleared when it ends, its runtime's shutdown included, so that the
    /// next command filed starts another on its own runtime.
    running: AtomicBool,
}

/// One thread's list, on a cache line of its own (128 bytes: two lines are fetched
/// together on x86).
#[repr(align(128))]
struct Filings(Mutex<Slab<Filed>>);

struct Filed {
    due: Instant,
    waker: Waker,
    /// The task found it past its deadline and woke it.
    expired: bool,
}

impl Filings {
    fn lock(&self) -> MutexGuard<'_, Slab<Filed>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The task sleeps on `wake`: let it find the set gone, and end.
        self.wake.notify_one();
    }
}

impl Deadlines {
    pub fn new() -> Deadlines {
        Deadlines {
            shared: Arc::new(Shared {
                threads: ThreadLocal::new(),
                next: AtomicU64::new(NOTHING),
                origin: Instant::now(),
                wake: Arc::new(Notify::new()),
                running: AtomicBool::new(false),
            }),
        }
    }

    /// `command` bounded by `timeout`: past it, the command fails as redis-rs's response
    /// timeout fails it (an I/O error of kind `TimedOut`) and its reply, if one comes, is
    /// dropped.
    pub fn bound<'a, F>(&'a self, timeout: Duration, command: F) -> Bounded<'a, F> {
        Bounded {
            command,
            deadlines: self,
            timeout,
            filed: None,
        }
    }

    /// Commands filed and not yet ended (for tests).
    #[cfg(test)]
    fn filed(&self) -> usize {
        self.shared
            .threads
            .iter()
            .map(|filings| filings.lock().len())
            .sum()
    }

    fn file(&self, timeout: Duration, waker: &Waker) -> Ticket<'_> {
        let due = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        let filings = self
            .shared
            .threads
            .get_or(|| Filings(Mutex::new(Slab::new())));
        let key = filings.lock().insert(Filed {
            due,
            waker: waker.clone(),
            expired: false,
        });
        // Filed before `next` and `running` are read; the task writes `next` before it
        // looks through the lists. One of the two sees the other.
        fence(Ordering::SeqCst);
        let at = self.shared.nanos(due);
        let next = self.shared.next.load(Ordering::Relaxed);
        if next == LOOKING || at < next {
            self.shared.wake.notify_one();
        }
        if !self.shared.running.load(Ordering::Relaxed) {
            self.start();
        }
        Ticket { filings, key }
    }

    /// Starts the task on the current runtime unless one runs.
    #[inline(never)]
    fn start(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.shared.running.swap(true, Ordering::SeqCst) {
            return;
        }
        let watch = Watch {
            shared: Arc::downgrade(&self.shared),
            wake: Arc::clone(&self.shared.wake),
        };
        runtime.spawn(watch.run());
    }
}

impl Shared {
    fn nanos(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(nanos)
            .unwrap_or(NOTHING - 1)
            .clamp(1, NOTHING - 1)
    }

    /// Fails the commands past their deadline at `now`; the earliest deadline left.
    fn expire(&self, now: Instant) -> Option<Instant> {
        let mut earliest: Option<Instant> = None;
        let mut expired = Vec::new();
        for filings in self.threads.iter() {
            let mut filed = filings.lock();
            for (_, entry) in filed.iter_mut().filter(|(_, entry)| !entry.expired) {
                if entry.due <= now {
                    entry.expired = true;
                    expired.push(entry.waker.clone());
                } else if earliest.is_none_or(|earliest| entry.due < earliest) {
                    earliest = Some(entry.due);
                }
            }
        }
        for waker in expired {
            waker.wake();
        }
        earliest
    }
}

/// The task of one set of deadlines.
struct Watch {
    shared: Weak<Shared>,
    wake: Arc<Notify>,
}

impl Watch {
    async fn run(self) {
        loop {
            let notified = self.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            shared.next.store(LOOKING, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let earliest = shared.expire(Instant::now());
            let next = earliest.map_or(NOTHING, |due| shared.nanos(due));
            shared.next.store(next, Ordering::SeqCst);
            drop(shared);
            match earliest {
                Some(due) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due) => {}
                        () = notified => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

impl Drop for Watch {
    /// Ended, or dropped with its runtime: the next command filed starts another.
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.running.store(false, Ordering::SeqCst);
        }
    }
}

/// A command's place in its thread's list, taken out when dropped.
struct Ticket<'a> {
    filings: &'a Filings,
    key: usize,
}

impl Ticket<'_> {
    /// Whether the task failed the command; otherwise `waker` is the one to wake.
    fn expired(&self, waker: &Waker) -> bool {
        let mut filed = self.filings.lock();
        let Some(entry) = filed.get_mut(self.key) else {
            return false;
        };
        if entry.expired {
            return true;
        }
        if !entry.waker.will_wake(waker) {
            entry.waker = waker.clone();
        }
        false
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut filed = self.filings.lock();
        if filed.contains(self.key) {
            filed.remove(self.key);
        }
    }
}

pin_project_lite::pin_project! {
    /// A command bounded by [`Deadlines::bound`].
    pub(crate) struct Bounded<'a, F> {
        #[pin]
        command: F,
        deadlines: &'a Deadlines,
        timeout: Duration,
        filed: Option<Ticket<'a>>,
    }
}

impl<T, F> Future for Bounded<'_, F>
where
    F: Future<Output = redis::RedisResult<T>>,
{
    type Output = redis::RedisResult<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(reply) = this.command.poll(cx) {
            *this.filed = None;
            return Poll::Ready(reply);
        }
        match this.filed {
            None => *this.filed = Some(this.deadlines.file(*this.timeout, cx.waker())),
            Some(ticket) => {
                if ticket.expired(cx.waker()) {
                    *this.filed = None;
                    return Poll::Ready(Err(timed_out()));
                }
            }
        }
        Poll::Pending
    }
}

/// What redis-rs's response timeout fails a command with.
fn timed_out() -> redis::RedisError {
    std::io::Error::from(std::io::ErrorKind::TimedOut).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never() -> impl Future<Output = redis::RedisResult<()>> {
        std::future::pending()
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_that_gets_no_reply_fails_at_its_deadline_as_redis_rs_would_fail_it() {
        let deadlines = Deadlines::new();
        let started = Instant::now();
        let err = deadlines
            .bound(Duration::from_secs(3), never())
            .await
            .expect_err("a command that never answers cannot succeed");
        assert!(err.is_timeout(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert_eq!(deadlines.filed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sooner_deadline_filed_later_wakes_the_task_sooner() {
        let deadlines = Deadlines::new();
        let started = Instant::now();
        let long = deadlines.bound(Duration::from_secs(10), never());
        let short = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            deadlines.bound(Duration::from_millis(200), never()).await
        };
        tokio::pin!(long);
        tokio::select! {
            _ = &mut long => panic!("the 10 s command ended first"),
            ended = short => assert!(ended.is_err_and(|err| err.is_timeout())),
        }
        assert_eq!(started.elapsed(), Duration::from_millis(205));
        // Still bounded by its own deadline.
        let err = long.await.expect_err("never answered");
        assert!(err.is_timeout());
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_answered_or_dropped_in_time_leaves_nothing_filed() {
        let deadlines = Deadlines::new();
        let answered = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<_, redis::RedisError>(7)
        };
        let reply = deadlines.bound(Duration::from_secs(1), answered).await;
        assert_eq!(reply.ok(), Some(7));
        assert_eq!(deadlines.filed(), 0);
        let dropped = tokio::time::timeout(
            Duration::from_millis(10),
            deadlines.bound(Duration::from_secs(1), never()),
        )
        .await;
        assert!(dropped.is_err());
        assert_eq!(deadlines.filed(), 0);
        // Nothing is failed after its command ended: the task finds nothing at 1 s.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(deadlines.filed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_ends_with_the_connection_that_started_it() {
        let deadlines = Deadlines::new();
        let err = deadlines
            .bound(Duration::from_millis(10), never())
            .await
            .expect_err("never answered");
        assert!(err.is_timeout());
        let metrics = tokio::runtime::Handle::current().metrics();
        assert_eq!(
            metrics.num_alive_tasks(),
            1,
            "the task waits for the next deadline"
        );
        drop(deadlines);
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            metrics.num_alive_tasks(),
            0,
            "the task outlived its deadlines"
        );
    }

    #[test]
    fn a_runtime_shut_down_under_the_task_leaves_the_next_runtime_its_own() {
        let deadlines = Deadlines::new();
        for _ in 0..2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a runtime");
            let err = runtime
                .block_on(deadlines.bound(Duration::from_millis(50), never()))
                .expect_err("never answered");
            assert!(err.is_timeout());
            drop(runtime);
            assert!(!deadlines.shared.running.load(Ordering::SeqCst));
        }
    }
}
