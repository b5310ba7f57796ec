//! Issue 40: fencing tokens never go backward. The counter beside a lock
//! (`<prefix>{name}:fence`) can be lost (a server restarted empty, `FLUSHALL`, a deleted
//! key, a slot moved without it) or be behind (a promoted replica that missed the last
//! grants); the next token is then drawn from the server's clock, above every earlier one.
//! The failovers of Sentinel and Cluster with a lagging replica are in `failover.rs`.

use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_tests::{RedisCluster, RedisServer};

use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// A fenced acquisition of `name`, released at once: its token. Retries while the locker
/// reconnects (after a restart).
async fn token_of(locker: &Locker, name: &str) -> u64 {
    for _ in 0..100 {
        match locker.lock(name).ttl(10 * SECOND).fencing().await {
            Ok(lease) => {
                let token = lease.fencing_token().expect("a fenced lease has a token");
                assert!(lease.release().await.expect("release"));
                return token;
            }
            Err(LockError::Connection { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    panic!("no fenced grant of {name:?} within 5 s");
}

/// Three tokens in a row: each above the one before.
async fn three_tokens(locker: &Locker, name: &str) -> u64 {
    let mut last = 0;
    for _ in 0..3 {
        let token = token_of(locker, name).await;
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    last
}

async fn tokens_increase_across_losses(mut h: Harness) {
    let name = "stock:17";
    let key = "lock:{stock:17}:fence";
    let before = three_tokens(&h.locker, name).await;
    let server = h.server.as_mut().expect("a Redis harness");

    server.restart(); // empty: persistence is off
    let after_restart = token_of(&h.locker, name).await;
    assert!(
        after_restart > before,
        "a server restarted empty drew {after_restart} after {before}"
    );

    let server = h.server.as_ref().expect("a Redis harness");
    server.command(&["FLUSHALL"]);
    let after_flush = token_of(&h.locker, name).await;
    assert!(
        after_flush > after_restart,
        "after FLUSHALL: {after_flush} after {after_restart}"
    );

    server.command(&["DEL", key]);
    let after_del = token_of(&h.locker, name).await;
    assert!(
        after_del > after_flush,
        "after the counter's DEL: {after_del} after {after_flush}"
    );

    // A counter far ahead of the clock (set by hand, or drawn on a server whose clock ran
    // ahead) is followed, not overtaken by the clock.
    let ahead = after_del + 3_600_000_000;
    server.command(&["SET", key, &ahead.to_string()]);
    assert_eq!(token_of(&h.locker, name).await, ahead + 1);
    assert_eq!(token_of(&h.locker, name).await, ahead + 2);
    let stored = server.command(&["GET", key]);
    assert!(stored.contains(&(ahead + 2).to_string()), "{stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_restart_flush_and_delete_scripts() {
    tokens_increase_across_losses(Harness::scripts()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_restart_flush_and_delete_functions() {
    tokens_increase_across_losses(Harness::functions()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_restart_flush_and_delete_transactions() {
    tokens_increase_across_losses(Harness::transactions()).await;
}

/// Queued grants and claims draw their tokens by the same rule: a holder, a waiter that
/// queues behind it and is handed the lock, after the counter was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_handed_the_lock_draws_above_a_lost_counter() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("a Redis harness");
    let before = three_tokens(&h.locker, "q").await;
    server.command(&["DEL", "lock:{q}:fence"]);
    let holder = h.locker.lock("q").ttl(10 * SECOND).await.expect("acquire");
    let other = h.second_locker();
    let waiter = tokio::spawn(async move {
        other
            .lock("q")
            .ttl(10 * SECOND)
            .wait(10 * SECOND)
            .fencing()
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(holder.release().await.expect("release"));
    let lease = waiter.await.expect("join").expect("the waiter's turn");
    let token = lease.fencing_token().expect("token");
    assert!(token > before, "a queued grant drew {token} after {before}");
}

/// A replica that missed the last grants, promoted: its counter is behind the tokens the
/// old master handed out, and its clock puts the next token above them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_that_missed_grants_draws_above_them() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    let on_master = Harness::locker_for(&master, lock_core::Protocol::Scripts);
    let first = token_of(&on_master, "job").await;
    // The replica has the counter...
    let started = std::time::Instant::now();
    while !replica
        .command(&["GET", "lock:{job}:fence"])
        .contains(&first.to_string())
    {
        assert!(
            started.elapsed() < 30 * SECOND,
            "the counter reached the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ... then stops following: the master's next grants never reach it.
    replica.command(&["REPLICAOF", "NO", "ONE"]);
    let last = three_tokens(&on_master, "job").await;
    let on_promoted = Harness::locker_for(&replica, lock_core::Protocol::Scripts);
    let token = token_of(&on_promoted, "job").await;
    assert!(
        token > last,
        "the promoted replica drew {token} after the old master's {last}"
    );
}

/// On a Cluster, a lock's slot moved to another master (its keys with it) and a counter
/// lost on the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_a_slot_move_and_a_lost_counter() {
    let cluster = RedisCluster::start(3, 0);
    let locker = Locker::builder()
        .cluster(cluster.urls())
        .app_name("lock-tests")
        .build()
        .expect("cluster locker");
    let key = "lock:{moved}:fence";
    let before = three_tokens(&locker, "moved").await;
    let from = cluster.master_of(key);
    let to = (from + 1) % 3;
    tokio::task::block_in_place(|| cluster.move_slot(key, to));
    let after_move = token_of(&locker, "moved").await;
    assert!(
        after_move > before,
        "after the move: {after_move} after {before}"
    );
    assert_eq!(cluster.master_of(key), to);
    cluster.nodes[to].command(&["DEL", key]);
    let after_loss = token_of(&locker, "moved").await;
    assert!(
        after_loss > after_move,
        "after the counter's loss: {after_loss} after {after_move}"
    );
}

/// Redlock: masters restarted empty, every one of them, still draw above the tokens the
/// majorities handed out before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_tokens_increase_across_restarted_masters() {
    let mut h = Harness::redlock();
    let before = three_tokens(&h.locker, "r").await;
    for node in &mut h.nodes {
        node.restart();
    }
    let after = token_of(&h.locker, "r").await;
    assert!(after > before, "{after} after {before}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tokens_follow_the_same_rule() {
    let h = Harness::memory();
    let first = three_tokens(&h.locker, "m").await;
    // Microseconds since the epoch: a token says when it was drawn.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros();
    let first = u128::from(first);
    assert!(first <= now && now - first < 60_000_000, "{first} vs {now}");
    assert!(first < 1 << 53, "exact in JSON");
}

/// Tokens from one Redis are microseconds on its clock, below 2^53.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_the_servers_clock_in_microseconds() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("a Redis harness");
    let token = token_of(&h.locker, "clock").await;
    let time = lock_tests::cluster::bulk_strings(&server.command(&["TIME"]));
    let now: u64 = time[0].parse::<u64>().expect("seconds") * 1_000_000
        + time[1].parse::<u64>().expect("micros");
    assert!(token <= now && now - token < 60_000_000, "{token} vs {now}");
    assert!(token < 1 << 53);
}
