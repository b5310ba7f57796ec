//! `#[redis_locked]` calls nested on one task: reentrant while the outer lease is held, and
//! refused once it is lost.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use lock_core::{current_lease, redis_locked, LockError, Locker};
use lock_tests::RedisServer;

#[redis_locked(key = "reentry:{id}", ttl = "600ms", wait = "0s", locker = locker)]
async fn nested_write(locker: &Locker, id: u32, writes: &AtomicU32) -> Result<(), LockError> {
    writes.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Loses its lock to `rival` mid-body, then calls `nested_write` on the same key.
#[redis_locked(key = "reentry:{id}", ttl = "600ms", wait = "0s", locker = locker)]
async fn outer_losing_its_lock(
    locker: &Locker,
    id: u32,
    server: &RedisServer,
    rival: &Locker,
    wait_for_loss_signal: bool,
    writes: &AtomicU32,
    nested: &Mutex<Option<Result<(), LockError>>>,
) -> Result<(), LockError> {
    let lease = current_lease().expect("a lease inside the body");
    // An operator's DEL (or a failover that lost the write), then another process takes it.
    assert!(server.command(&["DEL", lease.key()]).starts_with(":1"));
    let theirs = rival
        .try_lock(format!("reentry:{id}"), Duration::from_secs(5))
        .await
        .expect("the rival takes the deleted lock");
    if wait_for_loss_signal {
        // The renewer (every 200 ms) finds the lock gone and fires `lost()`.
        tokio::time::timeout(Duration::from_secs(3), lease.lost())
            .await
            .expect("the loss was signalled");
    }
    let result = nested_write(locker, id, writes).await;
    *nested.lock().expect("mutex") = Some(result);
    assert!(theirs.release().await.expect("rival release"));
    Ok(())
}

/// Regression (issue 13): the reentrancy check looked only for a lease of the same name on
/// the task, never at whether it was lost, so the nested critical section ran while another
/// process held the lock, and returned `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_never_runs_on_a_lost_lease() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let rival = Locker::from_url(&server.url()).expect("rival locker, as another process");
    for (id, wait_for_loss_signal) in [(1, true), (2, false)] {
        let writes = AtomicU32::new(0);
        let nested = Mutex::new(None);
        let outer = outer_losing_its_lock(
            &locker,
            id,
            &server,
            &rival,
            wait_for_loss_signal,
            &writes,
            &nested,
        )
        .await;
        assert_eq!(
            writes.load(Ordering::SeqCst),
            0,
            "case {id}: the nested body ran beside the rival"
        );
        match nested.lock().expect("mutex").take() {
            Some(Err(LockError::Lost { name })) => assert_eq!(name, format!("reentry:{id}")),
            other => panic!("case {id}: expected the nested call to be Lost, got {other:?}"),
        }
        // The outer body finished: by default its result stands (the loss is reported).
        assert!(outer.is_ok(), "case {id}: {outer:?}");
    }
}

#[redis_locked(key = "reentry:held", wait = "0s", locker = locker)]
async fn outer_holding(locker: &Locker, writes: &AtomicU32) -> Result<(), LockError> {
    nested_held(locker, writes).await
}

#[redis_locked(key = "reentry:held", wait = "0s", locker = locker)]
async fn nested_held(locker: &Locker, writes: &AtomicU32) -> Result<(), LockError> {
    writes.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_on_a_held_lease_is_reentrant() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let writes = AtomicU32::new(0);
    outer_holding(&locker, &writes).await.expect("both run");
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    assert!(locker
        .inspect("reentry:held")
        .await
        .expect("inspect")
        .is_none());
}
