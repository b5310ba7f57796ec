//! The process-wide default locker. `set_default_locker` is global, so this file is its own
//! test binary with a single test: nothing else in the process can set or observe it.

use lock_core::{redis_locked, set_default_locker, LockError, Locker};

#[redis_locked(key = "report:{day}", ttl = "5s", wait = "0s")]
async fn report(day: u32) -> Result<u32, LockError> {
    Ok(day)
}

#[tokio::test]
async fn without_then_with_a_default_locker() {
    match report(1).await {
        Err(LockError::NoDefaultLocker { name }) => assert_eq!(name, "report:1"),
        other => panic!("expected NoDefaultLocker, got {other:?}"),
    }

    let locker = Locker::memory();
    set_default_locker(locker.clone());
    let _held = locker
        .try_lock("report:2", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    // The default locker is really the one in use: report:2 is busy there.
    assert!(matches!(report(2).await, Err(LockError::Busy { .. })));
    assert_eq!(report(3).await.unwrap(), 3);
}
