//! Loss is final: once a holder is told its lease is lost, nothing makes it valid again,
//! and whatever proves the lock gone marks the lease lost at once.

use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_tests::RedisServer;

/// Regression (issue 13): an extension answered after the local validity had run out (in
/// the drift margin, or from a server whose clock runs slower than ours) revived a lease
/// whose `lost()` had already fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_after_the_loss_signal_does_not_revive_the_lease() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let lease = locker
        .lock("sticky")
        .ttl(Duration::from_millis(300))
        .await
        .expect("acquire");
    // The server keeps the key longer than our clock trusts it (a slow server clock, or the
    // drift margin stretched): the extension below still finds our token there.
    assert!(server
        .command(&["PEXPIRE", lease.key(), "60000"])
        .starts_with(":1"));
    tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("lost() fires at the end of the local validity");
    match lease.extend(Duration::from_secs(5)).await {
        Err(LockError::Lost { name }) => assert_eq!(name, "sticky"),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(lease.is_lost(), "told lost once, lost for good");
    // The release still removes our value (it is ours) and reports the truth about the lease.
    let _ = lease.release().await.expect("release");
    assert!(locker.inspect("sticky").await.expect("inspect").is_none());
}

/// Regression (issue 13): a WRONGTYPE answer to a renewal was retried as a transient error,
/// so the holder learnt of the loss only when its validity ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_replacing_the_lock_marks_the_lease_lost_at_the_next_renewal() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let lease = locker
        .lock("replaced")
        .ttl(Duration::from_secs(3))
        .auto_renew()
        .await
        .expect("acquire");
    let key = lease.key().to_owned();
    assert!(server.command(&["DEL", &key]).starts_with(":1"));
    assert!(server.command(&["HSET", &key, "f", "v"]).starts_with(':'));
    // The renewal runs a third of the TTL in (1 s); the validity would last until about
    // 2.97 s. Halfway between, the lease must already know.
    tokio::time::sleep_until((lease.acquired_at() + Duration::from_millis(2000)).into()).await;
    assert!(
        lease.is_lost(),
        "the renewal met WRONGTYPE and must report the loss"
    );
    // Releasing reports the foreign value and leaves it alone.
    assert!(matches!(
        lease.release().await,
        Err(LockError::WrongType { .. })
    ));
    assert!(server.command(&["TYPE", &key]).contains("hash"));
}

/// A manual extension that meets a foreign value marks the lease lost too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_meeting_a_foreign_value_marks_the_lease_lost() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let lease = locker
        .lock("replaced-by-hand")
        .ttl(Duration::from_secs(30))
        .await
        .expect("acquire");
    let key = lease.key().to_owned();
    assert!(server.command(&["DEL", &key]).starts_with(":1"));
    assert!(server.command(&["HSET", &key, "f", "v"]).starts_with(':'));
    assert!(matches!(
        lease.extend(Duration::from_secs(30)).await,
        Err(LockError::WrongType { .. })
    ));
    assert!(lease.is_lost());
}
