//! Leases granted and not yet due to be read by the loss watch ([`crate::engine::watch`]):
//! each thread's list of them, and the one clock thread of the process that tells a
//! Locker's watch task when one comes due.
//!
//! A lease is read on the watch connection once it has been held [`BATCH`]; most short
//! leases are released before and cost nothing there. Someone has to look at the leases
//! granted every [`BATCH`] while any wait, and a timer of the async runtime that fires
//! that often is not free: each firing wakes a worker that would otherwise have slept
//! through, and it moves work between the runtime's threads (a task sleeping 2 ms in a
//! loop beside 64 tasks taking and releasing locks costs them 12-15% of their rate on two
//! cores, 12 context switches per firing; the same loop on a thread of its own costs
//! nothing measurable). So the looking is done by a plain thread: it wakes every
//! [`BATCH`] while a list holds a lease, tells a Locker's watch task only when one of its
//! leases is due, and parks when every list is empty; the grant that fills a list again
//! unparks it. If that thread cannot be started, the watch task looks on its own timer,
//! as it would have.

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use thread_local::ThreadLocal;
use tokio::sync::Notify;

use crate::engine::held::Held;

/// A granted lease is read once it is this old (from the start of the attempt that took
/// it); keys that wait to be read gather this long, so that they share one read.
pub(crate) const BATCH: Duration = Duration::from_millis(2);

/// How many of its oldest leases a grant drops from its thread's list when they are gone
/// (released and dropped): short leases leave the list on the thread that took them, and
/// are freed there, rather than by the watch task.
const PRUNED_PER_GRANT: usize = 2;

/// One lease granted: when it is due to be read, and the lease.
struct Entry<L> {
    due: Instant,
    lease: Weak<L>,
}

/// One thread's leases granted and not yet due, in the order granted, on a cache line of
/// its own.
#[repr(align(128))]
struct List<L>(Mutex<VecDeque<Entry<L>>>);

impl<L> List<L> {
    fn new() -> List<L> {
        List(Mutex::new(VecDeque::new()))
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Entry<L>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The leases one Locker was granted and has not read yet, by thread, and the watch task's
/// wake-up, told when one comes due. (A lease is a [`Held`]; the unit tests use others.)
pub(crate) struct Granted<L: Send + Sync = Held> {
    lists: ThreadLocal<List<L>>,
    wake: Arc<Notify>,
    /// The clock thread looks at these lists (false: it could not be started, and the watch
    /// task looks on its own timer).
    clocked: bool,
}

impl<L: Send + Sync + 'static> Granted<L> {
    /// The lists of a Locker whose watch task waits on `wake`, looked at by the clock if
    /// `tracked` (false: the Locker does not track keys, no lease is ever pushed, and no
    /// clock thread is started for it).
    pub fn new(wake: Arc<Notify>, tracked: bool) -> Arc<Granted<L>> {
        let clocked = tracked && clock().is_some();
        let granted = Arc::new(Granted {
            lists: ThreadLocal::new(),
            wake,
            clocked,
        });
        if clocked {
            let mut watched = watched();
            // Those of Lockers dropped while the clock was parked.
            watched.retain(|granted| Arc::strong_count(granted) > 1);
            watched.push(Arc::clone(&granted) as Arc<dyn Clocked>);
        }
        granted
    }

    /// Whether the clock thread tells the watch task when a lease comes due.
    pub fn clocked(&self) -> bool {
        self.clocked
    }

    /// Adds a lease just granted, due to be read at `due`; drops the oldest gone leases of
    /// this thread's list on the way.
    pub fn push(&self, due: Instant, lease: &Arc<L>) {
        {
            let mut list = self.lists.get_or(List::new).lock();
            for _ in 0..PRUNED_PER_GRANT {
                if list
                    .front()
                    .is_none_or(|oldest| oldest.lease.strong_count() != 0)
                {
                    break;
                }
                list.pop_front();
            }
            list.push_back(Entry {
                due,
                lease: Arc::downgrade(lease),
            });
        }
        // Pushed before `PARKED` is read; the clock sets it before it looks at the lists a
        // last time. One of the two sees the other.
        fence(Ordering::SeqCst);
        if PARKED.load(Ordering::Relaxed) && PARKED.swap(false, Ordering::SeqCst) {
            clock().map(Thread::unpark);
        }
    }

    /// Takes the leases due by `now` from every thread's list: those at the front of a
    /// list, up to its first lease not due yet (a lease behind it waits for it, at most
    /// [`BATCH`] after its own grant).
    pub fn take_due(&self, now: Instant) -> Vec<Weak<L>> {
        let mut due = Vec::new();
        for list in self.lists.iter() {
            let mut list = list.lock();
            while list.front().is_some_and(|oldest| oldest.due <= now) {
                if let Some(entry) = list.pop_front() {
                    due.push(entry.lease);
                }
            }
        }
        due
    }

    /// Forgets every lease (tracking was refused).
    pub fn clear(&self) {
        for list in self.lists.iter() {
            list.lock().clear();
        }
    }

    /// No lease waits in any list.
    pub fn is_empty(&self) -> bool {
        self.lists.iter().all(|list| list.lock().is_empty())
    }

    /// Whether a lease is due by `now`.
    pub fn any_due(&self, now: Instant) -> bool {
        self.look(now).0
    }
}

/// What the clock looks at: one Locker's lists.
trait Clocked: Send + Sync {
    /// Whether a lease is due by `now`, and whether any waits at all.
    fn look(&self, now: Instant) -> (bool, bool);

    /// No lease waits in any list.
    fn is_empty(&self) -> bool;

    /// Tells the watch task that a lease is due.
    fn tell(&self);
}

impl<L: Send + Sync + 'static> Clocked for Granted<L> {
    fn look(&self, now: Instant) -> (bool, bool) {
        let (mut due, mut waiting) = (false, false);
        for list in self.lists.iter() {
            let list = list.lock();
            if let Some(oldest) = list.front() {
                waiting = true;
                due |= oldest.due <= now;
            }
        }
        (due, waiting)
    }

    fn is_empty(&self) -> bool {
        Granted::is_empty(self)
    }

    fn tell(&self) {
        self.wake.notify_one();
    }
}

/// The clock thread parks (every list was empty when it last looked): the next grant
/// unparks it.
static PARKED: AtomicBool = AtomicBool::new(false);

/// Every Locker's lists; a Locker's leave when the clock holds the last reference.
static WATCHED: Mutex<Vec<Arc<dyn Clocked>>> = Mutex::new(Vec::new());

fn watched() -> MutexGuard<'static, Vec<Arc<dyn Clocked>>> {
    WATCHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The clock thread, started with the first Locker that tracks keys; `None` if it could
/// not be started.
fn clock() -> Option<&'static Thread> {
    static CLOCK: OnceLock<Option<Thread>> = OnceLock::new();
    CLOCK
        .get_or_init(|| {
            match std::thread::Builder::new()
                .name("lock-core-clock".to_owned())
                .spawn(tick)
            {
                Ok(handle) => Some(handle.thread().clone()),
                Err(err) => {
                    tracing::warn!(%err, "could not start lock-core's clock thread: each Locker's loss watch looks at its leases on a timer of its runtime instead");
                    None
                }
            }
        })
        .as_ref()
}

/// The clock: every [`BATCH`] while a lease waits in a list, tells each Locker with a
/// lease due; parks while every list is empty.
fn tick() {
    loop {
        let now = Instant::now();
        let mut waiting = false;
        {
            let mut watched = watched();
            watched.retain(|granted| Arc::strong_count(granted) > 1);
            for granted in watched.iter() {
                let (due, waits) = granted.look(now);
                if due {
                    granted.tell();
                }
                waiting |= waits;
            }
        }
        if waiting {
            std::thread::sleep(BATCH);
            continue;
        }
        PARKED.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if watched().iter().any(|granted| !granted.is_empty()) {
            PARKED.store(false, Ordering::SeqCst);
            continue;
        }
        // An unpark between the look above and here is kept: `park` returns at once.
        std::thread::park();
        PARKED.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    /// Long enough for any wait of these tests on a loaded machine; none waits it out
    /// unless the clock fails to tell.
    const PATIENCE: Duration = Duration::from_secs(10);

    async fn told(wake: &Notify) -> Instant {
        match tokio::time::timeout(PATIENCE, wake.notified()).await {
            Ok(()) => Instant::now(),
            Err(_) => panic!("the clock did not tell the lease due"),
        }
    }

    /// Forgets a tell left over from an earlier tick.
    fn forget_told(wake: &Notify) {
        let _ = wake.notified().now_or_never();
    }

    #[tokio::test]
    async fn a_lease_is_told_once_due_and_not_before() {
        let wake = Arc::new(Notify::new());
        let granted = Granted::<u32>::new(Arc::clone(&wake), true);
        assert!(granted.clocked());
        let lease = Arc::new(7);
        let due = Instant::now() + Duration::from_millis(40);
        granted.push(due, &lease);
        assert!(granted.take_due(Instant::now()).is_empty());
        let at = told(&wake).await;
        assert!(at >= due, "told {:?} before the lease was due", due - at);
        let taken = granted.take_due(at);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].upgrade().as_deref(), Some(&7));
        assert!(granted.is_empty());
    }

    #[test]
    fn only_the_front_of_a_list_up_to_its_first_lease_not_due_is_taken() {
        let granted = Granted::<u32>::new(Arc::new(Notify::new()), true);
        let now = Instant::now();
        let leases: Vec<Arc<u32>> = (0..4).map(Arc::new).collect();
        granted.push(now, &leases[0]);
        granted.push(now, &leases[1]);
        granted.push(now + Duration::from_secs(3600), &leases[2]);
        granted.push(now, &leases[3]);
        let taken: Vec<u32> = granted
            .take_due(now)
            .iter()
            .filter_map(|lease| lease.upgrade().map(|lease| *lease))
            .collect();
        assert_eq!(taken, [0, 1]);
        assert!(!granted.any_due(now));
        let rest: Vec<u32> = granted
            .take_due(now + Duration::from_secs(3600))
            .iter()
            .filter_map(|lease| lease.upgrade().map(|lease| *lease))
            .collect();
        assert_eq!(rest, [2, 3]);
    }

    #[test]
    fn a_grant_drops_the_gone_leases_at_the_front_of_its_list() {
        let granted = Granted::<u32>::new(Arc::new(Notify::new()), true);
        let later = Instant::now() + Duration::from_secs(3600);
        for value in 0..3 {
            granted.push(later, &Arc::new(value));
        }
        let kept = Arc::new(3);
        granted.push(later, &kept);
        // Each of the last two grants dropped two gone leases: only `kept` is left.
        let left = granted.take_due(later);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].upgrade().as_deref(), Some(&3));
    }

    #[tokio::test]
    async fn a_grant_after_the_clock_parked_is_told() {
        let wake = Arc::new(Notify::new());
        let granted = Granted::<u32>::new(Arc::clone(&wake), true);
        let lease = Arc::new(1);
        granted.push(Instant::now(), &lease);
        let at = told(&wake).await;
        assert_eq!(granted.take_due(at).len(), 1);
        // With every list empty the clock parks (unless a test beside this one keeps a
        // lease in a list of its own).
        let start = Instant::now();
        while !PARKED.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(1) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        forget_told(&wake);
        granted.push(Instant::now(), &lease);
        told(&wake).await;
        assert_eq!(granted.take_due(Instant::now()).len(), 1);
    }
}
