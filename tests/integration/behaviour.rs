//! The behavioural suite: every check runs against every backend (Lua scripts, WATCH/MULTI
//! on a server with scripting removed, and in-process memory).

use std::future::IntoFuture as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockError, Locker, MAX_NAME_LEN, MAX_TTL};

use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// Polls until `name` is free, up to `limit`; true if it became free.
pub async fn freed_within(locker: &Locker, name: &str, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if locker.inspect(name).await.expect("inspect").is_none() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

async fn mutual_exclusion(h: Harness) {
    let other = h.second_locker();
    let lease = h
        .locker
        .try_lock("m", 10 * SECOND)
        .await
        .expect("first acquire");
    match other.try_lock("m", 10 * SECOND).await {
        Err(LockError::Busy {
            name,
            holder,
            retry_after,
            ..
        }) => {
            assert_eq!(name, "m");
            // Another locker reads the holder's label; the same one (in memory) names its
            // own lease as such.
            let expected = if h.shares_locker() {
                "a lease of this Locker, in this process"
            } else {
                "lock-tests@"
            };
            assert!(
                holder.as_deref().is_some_and(|h| h.contains(expected)),
                "holder label is reported: {holder:?}"
            );
            assert!(retry_after.is_some_and(|left| left <= 10 * SECOND));
        }
        other => panic!("second acquire must be Busy, got {other:?}"),
    }
    assert!(lease.release().await.expect("release"));
    let second = other
        .try_lock("m", 10 * SECOND)
        .await
        .expect("free after release");
    assert!(second.release().await.expect("release"));
}

async fn expired_holder_cannot_touch_next_holder(h: Harness) {
    let other = h.second_locker();
    let stale = h
        .locker
        .try_lock("e", Duration::from_millis(300))
        .await
        .expect("acquire");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(stale.is_lost(), "validity ran out locally");
    let current = other
        .try_lock("e", 10 * SECOND)
        .await
        .expect("free after TTL");
    assert_ne!(current.token(), stale.token());

    match stale.extend(10 * SECOND).await {
        Err(LockError::Lost { name }) => assert_eq!(name, "e"),
        other => panic!("extend by an expired holder must be Lost, got {other:?}"),
    }
    assert!(
        !stale.release().await.expect("release"),
        "release of an expired lease is false"
    );
    assert!(
        current.is_held().await.expect("is_held"),
        "the new holder keeps its lock"
    );
    assert!(current.release().await.expect("release"));
}

async fn ttl_frees_a_crashed_holder(h: Harness) {
    let crashed = h
        .locker
        .try_lock("c", Duration::from_millis(300))
        .await
        .expect("acquire");
    std::mem::forget(crashed); // no release, no drop: as if the process died
    let other = h.second_locker();
    // From another task: on the same locker (in memory), as another process would.
    let lease = tokio::spawn(
        other
            .lock("c")
            .ttl(10 * SECOND)
            .wait(5 * SECOND)
            .into_future(),
    )
    .await
    .expect("join")
    .expect("the crashed holder's lock frees itself");
    assert!(lease.release().await.expect("release"));
}

async fn wait_deadline_is_respected(h: Harness) {
    let other = h.second_locker();
    let _held = h.locker.try_lock("w", 30 * SECOND).await.expect("acquire");
    let wait = Duration::from_millis(200);
    let started = Instant::now();
    // From another task, as another process would (see `ttl_frees_a_crashed_holder`).
    let waited = tokio::spawn(other.lock("w").ttl(SECOND).wait(wait).into_future());
    match waited.await.expect("join") {
        Err(LockError::Timeout {
            name,
            waited,
            holder,
            ..
        }) => {
            assert_eq!(name, "w");
            assert!(
                waited >= wait,
                "gave up after {waited:?}, before its wait of {wait:?}"
            );
            assert!(holder.is_some());
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    // Bounded, not fast: it must not wait out the holder's 30 s TTL.
    assert!(started.elapsed() < 10 * SECOND);
}

async fn waiter_gets_the_lock_after_release(h: Harness) {
    let other = h.second_locker();
    let held = h.locker.try_lock("r", 30 * SECOND).await.expect("acquire");
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.release().await.expect("release")
    });
    // From another task: this one took the lease it handed to the releaser, and on the same
    // locker (in memory) a request of this task for it is refused as this task's.
    let lease = tokio::spawn(other.lock("r").ttl(SECOND).wait(10 * SECOND).into_future())
        .await
        .expect("join")
        .expect("the waiter gets the lock once it is released, long before the TTL");
    assert!(releaser.await.expect("join"));
    assert!(lease.release().await.expect("release"));
}

async fn dropping_a_lease_releases_it(h: Harness) {
    {
        let _lease = h.locker.try_lock("d", 30 * SECOND).await.expect("acquire");
    }
    assert!(
        freed_within(&h.locker, "d", 5 * SECOND).await,
        "a dropped lease is released in the background, not after its 30 s TTL"
    );
}

async fn using_releases_on_error(h: Harness) {
    let result = h
        .locker
        .using("we", |_| async {
            Err::<(), LockError>(LockError::Config("business failure".into()))
        })
        .await;
    assert!(matches!(result, Err(LockError::Config(_))), "{result:?}");
    assert!(h.locker.inspect("we").await.expect("inspect").is_none());
}

async fn using_releases_on_panic(h: Harness) {
    let locker = h.locker.clone();
    let task = tokio::spawn(async move {
        locker
            .using("wp", |_| async {
                panic!("boom inside the critical section");
                #[allow(unreachable_code)]
                Ok::<(), LockError>(())
            })
            .await
    });
    let joined = task.await;
    assert!(joined.expect_err("the panic reaches the caller").is_panic());
    assert!(
        h.locker.inspect("wp").await.expect("inspect").is_none(),
        "released before the panic was resumed"
    );
}

async fn bad_input_is_rejected_before_any_call(h: Harness) {
    let locker = &h.locker;
    let long = "n".repeat(MAX_NAME_LEN + 1);
    assert!(matches!(
        locker.try_lock("", SECOND).await,
        Err(LockError::InvalidName { .. })
    ));
    assert!(matches!(
        locker.try_lock(long.as_str(), SECOND).await,
        Err(LockError::InvalidName { .. })
    ));
    assert!(matches!(
        locker.try_lock("ok", Duration::ZERO).await,
        Err(LockError::InvalidDuration { what: "ttl", .. })
    ));
    assert!(matches!(
        locker.try_lock("ok", MAX_TTL + SECOND).await,
        Err(LockError::InvalidDuration { what: "ttl", .. })
    ));
    let lease = locker.try_lock("ok", SECOND).await.expect("acquire");
    assert!(matches!(
        lease.extend(Duration::ZERO).await,
        Err(LockError::InvalidDuration { .. })
    ));
    assert!(lease
        .is_held()
        .await
        .expect("still held after a refused extend"));
    assert!(matches!(
        locker.inspect("").await,
        Err(LockError::InvalidName { .. })
    ));
    assert!(locker
        .inspect("never-taken")
        .await
        .expect("inspect")
        .is_none());
}

/// Takes "f" `times` times with fencing; each token must exceed the last one seen.
pub async fn fencing_grows(locker: &Locker, last: &mut u64, times: usize) {
    for _ in 0..times {
        let lease = locker
            .lock("f")
            .ttl(SECOND)
            .fencing()
            .await
            .expect("acquire");
        let token = lease.fencing_token().expect("fencing was asked for");
        assert!(token > *last, "{token} after {last}");
        *last = token;
        lease.release().await.expect("release");
    }
}

async fn fencing_tokens_strictly_increase(h: Harness) {
    fencing_grows(&h.locker, &mut 0, 5).await;
    let plain = h.locker.try_lock("f", SECOND).await.expect("acquire");
    assert_eq!(plain.fencing_token(), None, "fencing is opt-in");
    plain.release().await.expect("release");
    assert_eq!(
        h.locker.inspect("f").await.expect("inspect"),
        None,
        "no holder once released"
    );
}

async fn inspect_reports_the_holder(h: Harness) {
    let lease = h
        .locker
        .lock("i")
        .ttl(10 * SECOND)
        .fencing()
        .await
        .expect("acquire");
    let info = h.locker.inspect("i").await.expect("inspect").expect("held");
    assert_eq!(info.name, "i");
    assert_eq!(info.key, "lock:{i}");
    let holder = info.holder.expect("label stored");
    assert!(holder.contains(&std::process::id().to_string()), "{holder}");
    assert!(info
        .remaining
        .is_some_and(|left| left <= 10 * SECOND && left > SECOND));
    assert_eq!(info.fencing_counter, lease.fencing_token());
    lease.release().await.expect("release");
}

async fn extend_keeps_the_lock_past_its_first_ttl(h: Harness) {
    let other = h.second_locker();
    // A 2 s lease extended every 500 ms until it is 5 s old: held past twice its first TTL
    // only through the extensions, and each extension may come 1.5 s late (a loaded
    // machine stalling the test process) without losing it. (A 1 s lease extended every
    // 400 ms was lost to stalls over 600 ms.)
    let ttl = 2 * SECOND;
    let begun = Instant::now();
    let lease = h.locker.try_lock("x", ttl).await.expect("acquire");
    let mut extensions = 0;
    while begun.elapsed() < ttl * 5 / 2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        lease.extend(ttl).await.expect("still ours");
        extensions += 1;
    }
    assert!(extensions >= 2, "{extensions} extensions");
    assert!(!lease.is_lost());
    assert!(
        lease.is_held().await.expect("is_held"),
        "past twice its first TTL"
    );
    assert!(matches!(
        other.try_lock("x", SECOND).await,
        Err(LockError::Busy { .. })
    ));
    assert!(lease.release().await.expect("release"));
}

async fn lost_fires_at_the_end_of_validity(h: Harness) {
    let lease = h
        .locker
        .try_lock("l", Duration::from_millis(300))
        .await
        .expect("acquire");
    let fired = Arc::new(AtomicBool::new(false));
    let handle = lease.handle();
    let flag = fired.clone();
    let watcher = tokio::spawn(async move {
        handle.lost().await;
        flag.store(true, Ordering::SeqCst);
    });
    tokio::time::timeout(5 * SECOND, watcher)
        .await
        .expect("lost() fires once the 100 ms lease has run out")
        .expect("join");
    assert!(fired.load(Ordering::SeqCst));
    assert!(lease.is_lost());
    // Local validity ends a drift margin before Redis expires the key; let Redis catch up.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!lease.release().await.expect("release"));
}

async fn names_are_data_not_code(h: Harness) {
    for name in [
        "quote'\"",
        "new\nline",
        "{braces}",
        "ünïcødé ✓",
        "a b",
        "]]--[[",
        "lock:{x}",
    ] {
        let lease = h.locker.try_lock(name, 10 * SECOND).await.expect("acquire");
        let info = h
            .locker
            .inspect(name)
            .await
            .expect("inspect")
            .expect("held");
        assert_eq!(info.name, name);
        assert!(matches!(
            h.second_locker().try_lock(name, SECOND).await,
            Err(LockError::Busy { .. })
        ));
        assert!(lease.release().await.expect("release"), "{name:?}");
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
        suite!(functions: $($check),*);
    };
}

suite_for_every_backend!(
    mutual_exclusion,
    expired_holder_cannot_touch_next_holder,
    ttl_frees_a_crashed_holder,
    wait_deadline_is_respected,
    waiter_gets_the_lock_after_release,
    dropping_a_lease_releases_it,
    using_releases_on_error,
    using_releases_on_panic,
    bad_input_is_rejected_before_any_call,
    fencing_tokens_strictly_increase,
    inspect_reports_the_holder,
    extend_keeps_the_lock_past_its_first_ttl,
    lost_fires_at_the_end_of_validity,
    names_are_data_not_code,
);
