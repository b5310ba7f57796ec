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
    // Redis applied that extension (the key was ours): the lock, held for nobody, is given
    // back at once rather than kept for the 5 s asked.
    assert!(
        locker.inspect("sticky").await.expect("inspect").is_none(),
        "a lease lost to a late extension must not keep its lock"
    );
    // The release finds it gone and says so.
    assert!(!lease.release().await.expect("release"));
}

/// How long the tests below stall the server: the lease's validity (about 2.97 s of a 3 s
/// TTL) runs out meanwhile, and its renewal, sent a third of the TTL in and queued behind
/// the stall, runs after it and finds the hold still ours (its end was moved far out
/// before the stall). Redis applies it, and its reply comes after the validity ran out.
const STALL: Duration = Duration::from_millis(3000);
const TTL: Duration = Duration::from_secs(3);

/// Polls `gone` every 20 ms until it is true, for up to `within`.
async fn gone_within(within: Duration, mut gone: impl FnMut() -> bool) -> bool {
    let until = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < until {
        if gone() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gone()
}

/// Polls until `key` is gone from `server`, for up to `within`; whether it went.
async fn key_gone_within(server: &RedisServer, key: &str, within: Duration) -> bool {
    gone_within(within, || {
        server.command(&["EXISTS", key]).starts_with(":0")
    })
    .await
}

/// A renewal that Redis applied but answered after the lease's validity had run out: the
/// lease is lost (loss is final), and its lock, ours in Redis for a TTL more, is given back
/// at once. Before, it stayed held by nobody until the lease was released or its TTL ran
/// out, and every waiter waited for that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_answered_after_the_validity_gives_the_lock_back() {
    let server = RedisServer::start_debuggable();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let lease = locker
        .lock("late-renewal")
        .ttl(TTL)
        .auto_renew()
        .await
        .expect("acquire");
    let key = lease.key().to_owned();
    assert!(server
        .command(&["PEXPIRE", &key, "60000"])
        .starts_with(":1"));
    tokio::time::sleep_until((lease.acquired_at() + Duration::from_millis(300)).into()).await;
    let stall = server.stall(STALL);
    tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("lost at the end of its validity, during the stall");
    stall.join().expect("stall");
    // The renewal ran after the stall and set a 3 s TTL: without the give-back, the key
    // stays until then.
    assert!(
        key_gone_within(&server, &key, Duration::from_millis(1500)).await,
        "the lock of a lease lost to a late renewal is still held: {}",
        server.command(&["PTTL", &key])
    );
    assert!(lease.is_lost());
    assert!(
        !lease.release().await.expect("release"),
        "it was given back"
    );
}

/// The same for a semaphore's permit: its renewal applied late gives the permit back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_renewal_answered_after_the_validity_gives_the_permit_back() {
    let server = RedisServer::start_debuggable();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let permit = locker
        .semaphore("late-permit", 1)
        .acquire()
        .ttl(TTL)
        .auto_renew()
        .await
        .expect("permit");
    let holders = "lock:{late-permit}:sem";
    let member = |server: &RedisServer| {
        server
            .command(&["ZRANGE", holders, "0", "-1"])
            .lines()
            .find(|line| line.contains(permit.token()))
            .map(str::to_owned)
    };
    let mine = member(&server).expect("the permit's member");
    // Its end far out, and the set's own expiry with it: the renewal finds it ours.
    let time = server.command(&["TIME"]);
    let seconds: u64 = time
        .lines()
        .nth(2)
        .and_then(|s| s.trim().parse().ok())
        .expect("TIME");
    let far = (seconds * 1000 + 60_000).to_string();
    assert!(server
        .command(&["ZADD", holders, "XX", &far, &mine])
        .starts_with(':'));
    assert!(server
        .command(&["PEXPIRE", holders, "60000"])
        .starts_with(":1"));
    tokio::time::sleep_until((permit.acquired_at() + Duration::from_millis(300)).into()).await;
    let stall = server.stall(STALL);
    tokio::time::timeout(Duration::from_secs(10), permit.lost())
        .await
        .expect("lost at the end of its validity, during the stall");
    stall.join().expect("stall");
    assert!(
        gone_within(Duration::from_millis(1500), || member(&server).is_none()).await,
        "the permit of a guard lost to a late renewal is still held"
    );
    assert!(permit.is_lost());
    assert!(
        !permit.release().await.expect("release"),
        "it was given back"
    );
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

/// An extension dropped at any await (its command unsent, its late reply unread, or its
/// give-back in flight) leaves nothing behind once the lease is dropped: the key of a lease
/// lost to it goes, rather than living for the TTL the extension asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_dropped_at_any_await_leaves_no_lock_behind_the_lease() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    for step in 0..8u64 {
        let name = format!("dropped-extend-{step}");
        let lease = locker
            .lock(&name)
            .ttl(Duration::from_millis(300))
            .await
            .expect("acquire");
        let key = lease.key().to_owned();
        assert!(server
            .command(&["PEXPIRE", &key, "60000"])
            .starts_with(":1"));
        tokio::time::timeout(Duration::from_secs(3), lease.lost())
            .await
            .expect("lost at the end of its validity");
        // Dropped after `step` × 150 µs: from before its command is sent to after its reply.
        let _ = tokio::time::timeout(
            Duration::from_micros(step * 150),
            lease.extend(Duration::from_secs(30)),
        )
        .await;
        drop(lease);
        assert!(
            key_gone_within(&server, &key, Duration::from_secs(2)).await,
            "step {step}: the lock of a dropped lease is still held: {}",
            server.command(&["PTTL", &key])
        );
    }
}
