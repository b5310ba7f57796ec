//! Scheduled runs (ShedLock's model): a minimum hold keeps a released lock until its end on
//! every backend, a tick another replica took is `Tick::Skipped` (not an error), and
//! replicas of one job, their timers offset, run each tick once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockError, Locker, Tick};

use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// Released long before its minimum hold: the lock stays, for no longer than the hold, and
/// frees itself then; without a hold, a release frees it at once.
async fn a_minimum_hold_outlives_an_early_release(h: Harness) {
    let hold = 2 * SECOND;
    let other = h.second_locker();
    let lease = h
        .locker
        .lock("hourly")
        .ttl(30 * SECOND)
        .hold_at_least(hold)
        .await
        .expect("acquire");
    assert!(lease.release().await.expect("release"), "still ours");
    match other.try_lock("hourly", SECOND).await {
        Err(LockError::Busy { .. }) => {}
        other => panic!("the minimum hold should keep the lock, got {other:?}"),
    }
    let info = h
        .locker
        .inspect("hourly")
        .await
        .expect("inspect")
        .expect("the key is left to expire");
    if let Some(remaining) = info.remaining {
        assert!(
            remaining <= hold,
            "left to expire at the hold's end, not at the TTL's: {remaining:?}"
        );
        tokio::time::sleep(remaining + Duration::from_millis(50)).await;
    } else {
        // Redlock's inspection reports no single TTL: wait out the hold.
        tokio::time::sleep(hold + Duration::from_millis(100)).await;
    }
    let next = other
        .try_lock("hourly", SECOND)
        .await
        .expect("free once the hold is over");
    assert!(next.release().await.expect("release"));
    assert!(
        other.try_lock("hourly", SECOND).await.is_ok(),
        "without a minimum hold, a release frees the lock at once"
    );
}

/// A dropped lease (a job that panicked or was cancelled) keeps the minimum hold too.
async fn a_dropped_lease_keeps_the_minimum_hold(h: Harness) {
    let lease = h
        .locker
        .lock("dropped")
        .hold_at_least(5 * SECOND)
        .await
        .expect("acquire");
    drop(lease);
    assert!(
        h.locker.shutdown(5 * SECOND).await,
        "the background release has run"
    );
    let other = h.second_locker();
    assert!(matches!(
        other.try_lock("dropped", SECOND).await,
        Err(LockError::Busy { .. })
    ));
}

/// `run_once`: the job runs where the lock is free; where it is taken the tick is skipped,
/// with the holder named, and the job does not run.
async fn run_once_skips_a_taken_tick(h: Harness) {
    let other = h.second_locker();
    let ran = h
        .locker
        .lock("report")
        .hold_at_least(10 * SECOND)
        .run_once(|_| async { Ok::<_, LockError>(42) })
        .await
        .expect("run");
    assert_eq!(ran, Tick::Ran(42));
    let mut ran_again = false;
    let skipped = other
        .lock("report")
        .hold_at_least(10 * SECOND)
        .run_once(|_| async {
            ran_again = true;
            Ok::<_, LockError>(0)
        })
        .await
        .expect("a skipped tick is not an error");
    assert!(!ran_again, "the job must not run on a taken tick");
    match skipped {
        Tick::Skipped { holder, .. } => {
            assert!(
                holder.as_deref().is_some_and(|h| h.contains("lock-tests")),
                "{holder:?}"
            );
        }
        Tick::Ran(_) => panic!("ran on a taken tick"),
    }
    // Errors that are not contention stay errors.
    let bad = other
        .lock("report2")
        .hold_at_least(Duration::ZERO)
        .run_once(|_| async { Ok::<_, LockError>(()) })
        .await;
    assert!(
        matches!(
            bad,
            Err(LockError::InvalidDuration {
                what: "hold_at_least",
                ..
            })
        ),
        "{bad:?}"
    );
}

/// Several replicas, each with its own Locker (as separate processes have) and its own
/// timer, the timers offset as unsynchronised clocks are: each tick runs exactly once.
async fn each_tick_runs_once_across_offset_replicas(h: Harness) {
    let period = Duration::from_millis(800);
    let ticks = 5u32;
    let offsets_ms = [0u64, 60, 150, 250];
    let runs: Arc<Mutex<BTreeMap<u32, Vec<usize>>>> = Arc::default();
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut replicas = Vec::new();
    for (replica, offset) in offsets_ms.into_iter().enumerate() {
        let locker = h.second_locker();
        let runs = Arc::clone(&runs);
        replicas.push(tokio::spawn(async move {
            let first = start + Duration::from_millis(offset);
            let mut timer = tokio::time::interval_at(first, period);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for tick in 0..ticks {
                timer.tick().await;
                let runs = Arc::clone(&runs);
                let outcome = locker
                    .lock("jobs:every-tick")
                    .hold_at_least(period * 3 / 4)
                    .run_once(|_| async move {
                        // A job much shorter than the offsets between replicas.
                        runs.lock()
                            .expect("runs")
                            .entry(tick)
                            .or_default()
                            .push(replica);
                        Ok::<_, LockError>(())
                    })
                    .await;
                let _tick = outcome.expect("a tick runs or is skipped, never fails");
            }
        }));
    }
    for replica in replicas {
        replica.await.expect("replica");
    }
    let runs = runs.lock().expect("runs");
    for tick in 0..ticks {
        let ran_on = runs.get(&tick).cloned().unwrap_or_default();
        assert_eq!(ran_on.len(), 1, "tick {tick} ran on replicas {ran_on:?}");
    }
}

macro_rules! suite {
    ($backend:ident: $($check:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(crate::harness::Harness::$backend()).await;
                }
            )*
        }
    };
}

macro_rules! suite_for_every_backend {
    ($($check:ident),* $(,)?) => {
        suite!(scripts: $($check),*);
        suite!(transactions: $($check),*);
        suite!(memory: $($check),*);
        suite!(redlock: $($check),*);
    };
}

suite_for_every_backend!(
    a_minimum_hold_outlives_an_early_release,
    a_dropped_lease_keeps_the_minimum_hold,
    run_once_skips_a_taken_tick,
    each_tick_runs_once_across_offset_replicas,
);

/// `Locker::run_once`, the short form, and `Tick`'s helpers.
#[tokio::test]
async fn locker_run_once_and_tick_helpers() {
    let locker = Locker::memory();
    let tick = locker
        .run_once("cleanup", |_| async { Ok::<_, LockError>(7) })
        .await
        .expect("run");
    assert_eq!(tick.clone().ran(), Some(7));
    assert!(!tick.is_skipped());
    let busy: Result<(), LockError> = Err(LockError::Busy {
        name: "cleanup".into(),
        holder: Some("a@b:1".into()),
        retry_after: None,
        wait_setting: Default::default(),
    });
    assert!(Tick::from_result(busy).expect("skipped").is_skipped());
    let lost: Result<(), LockError> = Err(LockError::Lost {
        name: "cleanup".into(),
    });
    assert!(Tick::from_result(lost).is_err());
}

/// `#[redis_locked(hold_at_least = "..")]` on real Redis: the first replica runs, the
/// second (another Locker, as another process) gets `Busy` at once without running the
/// body, and the lock stays until the hold's end although the body ended at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macro_holds_at_least_and_skips_without_waiting() {
    use std::sync::atomic::{AtomicU32, Ordering};

    #[lock_core::redis_locked(key = "jobs:macro", hold_at_least = "3s", locker = locker)]
    async fn job(locker: &Locker, runs: &AtomicU32) -> Result<(), LockError> {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    let h = Harness::scripts();
    let other = h.second_locker();
    let runs = AtomicU32::new(0);
    assert_eq!(
        Tick::from_result(job(&h.locker, &runs).await).expect("run"),
        Tick::Ran(())
    );
    let second = job(&other, &runs).await;
    // `Busy`, not `Timeout`: a taken tick is not waited for (the locker's wait is 10 s).
    assert!(matches!(second, Err(LockError::Busy { .. })), "{second:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let remaining = h
        .locker
        .inspect("jobs:macro")
        .await
        .expect("inspect")
        .and_then(|info| info.remaining)
        .expect("left to expire");
    assert!(remaining <= 3 * SECOND, "{remaining:?}");
}
