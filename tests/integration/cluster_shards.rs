//! Redis Cluster at scale: hand-off messages stay in the lock's shard (sharded pub/sub),
//! the notifier follows a slot that moves, and requests caught by a slot's migration go on
//! as soon as it ends.

use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_tests::cluster::bulk_strings;
use lock_tests::RedisCluster;

const SECOND: Duration = Duration::from_secs(1);

fn locker_on(cluster: &RedisCluster) -> Locker {
    Locker::builder()
        .cluster(cluster.urls())
        .app_name("lock-tests")
        .build()
        .expect("cluster locker")
}

/// The sharded channels matching `pattern` that node `index` has subscribers for.
fn shard_channels(cluster: &RedisCluster, index: usize, pattern: &str) -> Vec<String> {
    bulk_strings(&cluster.nodes[index].command(&["PUBSUB", "SHARDCHANNELS", pattern]))
}

/// Waits up to 10 s for `done`; false if it never held.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// Runs `rounds` rounds of `round` (given its Locker and a round number) on three Lockers at
/// once, then checks that the hand-off messages they caused stayed in the `whose` shard:
/// some sharded bus messages (its replica heard them), no broadcast one.
async fn assert_hand_offs_stay_in_the_shard<F, Fut>(
    cluster: &RedisCluster,
    rounds: usize,
    round: F,
    whose: &str,
) where
    F: Fn(Locker, usize) -> Fut + Send + Copy + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let lockers: Vec<Locker> = (0..3).map(|_| locker_on(cluster)).collect();
    let broadcast_before = cluster.bus_counter("cluster_stats_messages_publish_sent");
    let sharded_before = cluster.bus_counter("cluster_stats_messages_publishshard_sent");
    let tasks: Vec<_> = lockers
        .into_iter()
        .enumerate()
        .map(|(i, locker)| {
            tokio::spawn(async move {
                for n in 0..rounds {
                    round(locker.clone(), i + n).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("join");
    }
    let broadcast = cluster.bus_counter("cluster_stats_messages_publish_sent") - broadcast_before;
    let sharded = cluster.bus_counter("cluster_stats_messages_publishshard_sent") - sharded_before;
    assert!(
        sharded > 0,
        "turns were announced to waiters in the {whose} shard (its replica heard them)"
    );
    assert_eq!(
        broadcast, 0,
        "no hand-off message was broadcast to every node ({sharded} stayed in the {whose} shard)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_stay_in_the_locks_shard() {
    let cluster = RedisCluster::start(3, 1);
    let round = |locker: Locker, _| async move {
        let lease = locker
            .lock("hot")
            .ttl(5 * SECOND)
            .wait(20 * SECOND)
            .await
            .expect("acquire");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(lease.release().await.expect("release"));
    };
    assert_hand_offs_stay_in_the_shard(&cluster, 15, round, "lock's").await;
}

/// The permit sets' turns too: a semaphore's and a read-write lock's waiters of other
/// Lockers are told in the set's shard, not by a PUBLISH copied to every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_hand_offs_stay_in_the_sets_shard() {
    let cluster = RedisCluster::start(3, 1);
    let round = |locker: Locker, n: usize| async move {
        let permit = locker
            .semaphore("hot-permits", 1)
            .acquire()
            .ttl(5 * SECOND)
            .wait(20 * SECOND)
            .await
            .expect("a permit");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(permit.release().await.expect("release"));
        // Every third request on the read-write lock is a writer's.
        let rw = locker.rwlock("hot-rw");
        let request = if n.is_multiple_of(3) {
            rw.write()
        } else {
            rw.read()
        };
        let lease = request
            .ttl(5 * SECOND)
            .wait(20 * SECOND)
            .await
            .expect("a read or write lease");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(lease.release().await.expect("release"));
    };
    assert_hand_offs_stay_in_the_shard(&cluster, 12, round, "set's").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_on_many_names_takes_one_pubsub_connection_per_master() {
    let cluster = RedisCluster::start(3, 0);
    let holder = locker_on(&cluster);
    let waiter = locker_on(&cluster);
    let names: Vec<String> = (0..24).map(|i| format!("many:{i}")).collect();
    let mut leases = Vec::new();
    for name in &names {
        leases.push(
            holder
                .lock(name.as_str())
                .ttl(30 * SECOND)
                .await
                .expect("hold"),
        );
    }
    let waits: Vec<_> = names
        .iter()
        .map(|name| {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move {
                waiter
                    .lock(name.as_str())
                    .ttl(5 * SECOND)
                    .wait(30 * SECOND)
                    .await
            })
        })
        .collect();
    // (connections with sharded subscriptions, sharded subscriptions) over every node.
    let count = || {
        let mut connections = 0;
        let mut subscriptions = 0;
        for node in &cluster.nodes {
            for line in node.command(&["CLIENT", "LIST"]).lines() {
                let ssub = line
                    .split(' ')
                    .find_map(|field| field.strip_prefix("ssub="))
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(0);
                if ssub > 0 {
                    connections += 1;
                    subscriptions += ssub;
                }
            }
        }
        (connections, subscriptions)
    };
    let all_listening = eventually(|| count().1 == names.len()).await;
    let (connections, subscriptions) = count();
    assert!(
        all_listening,
        "each waiting name has a sharded subscription: {subscriptions} of {}",
        names.len()
    );
    assert!(
        connections <= 3,
        "{subscriptions} subscriptions on {connections} connections: at most one per master"
    );
    drop(leases);
    for wait in waits {
        let _lease = wait
            .await
            .expect("join")
            .expect("acquired once the holder let go");
    }
}

/// The waiter waits for `name` (held by `holder`) on a task of its own, until the test
/// checks where it listens, then the holder lets go and the waiter must get its turn.
async fn wait_while_held(
    cluster: &RedisCluster,
    holder: &Locker,
    waiter: &Locker,
    name: &str,
    master: usize,
    check: impl FnOnce(&str),
) {
    let lease = holder.lock(name).ttl(60 * SECOND).await.expect("hold");
    let pattern = format!("{}:t:*", lease.key());
    let (waiter, owned) = (waiter.clone(), name.to_owned());
    let waiting = tokio::spawn(async move {
        let lease = waiter
            .lock(owned.as_str())
            .ttl(5 * SECOND)
            .wait(50 * SECOND)
            .await?;
        lease.release().await.map(drop)
    });
    assert!(
        eventually(|| !shard_channels(cluster, master, &pattern).is_empty()).await,
        "the waiter listens for its turn on the slot's master {master} (SSUBSCRIBE {pattern})"
    );
    tokio::task::block_in_place(|| check(lease.key()));
    assert!(lease.release().await.expect("release"), "still held");
    tokio::time::timeout(20 * SECOND, waiting)
        .await
        .expect("the waiter got its turn")
        .expect("join")
        .expect("acquired and released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_notifications_follow_a_moving_slot() {
    let cluster = RedisCluster::start(3, 0);
    let holder = locker_on(&cluster);
    let waiter = locker_on(&cluster);
    let key = "lock:{mover}".to_owned();
    let from = cluster.master_of(&key);
    let to = (from + 1) % 3;
    // Moved while the waiter waits: it follows the slot to its new master.
    wait_while_held(&cluster, &holder, &waiter, "mover", from, |key| {
        let pattern = format!("{key}:t:*");
        cluster.move_slot(key, to);
        let followed = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            !shard_channels(&cluster, to, &pattern).is_empty()
        });
        assert!(
            followed,
            "after the slot moved, the waiter listens on its new master"
        );
        assert!(shard_channels(&cluster, from, &pattern).is_empty());
    })
    .await;
    // Moved back while nobody waits (the subscription lingers after the last waiter): the
    // next wait subscribes where the slot is now, not where it was.
    tokio::task::block_in_place(|| cluster.move_slot(&key, from));
    wait_while_held(&cluster, &holder, &waiter, "mover", from, |_| {}).await;
}

/// A semaphore's waiter listens for its turn in the set's shard, and follows the slot too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_turns_follow_a_moving_slot() {
    let cluster = RedisCluster::start(3, 0);
    let holder = locker_on(&cluster);
    let waiter = locker_on(&cluster);
    let permit = holder
        .semaphore("mover-permits", 1)
        .acquire()
        .ttl(60 * SECOND)
        .await
        .expect("hold the only permit");
    let key = "lock:{mover-permits}:sem";
    let pattern = format!("{key}:t:*");
    let from = cluster.master_of(key);
    let to = (from + 1) % 3;
    let waiting = tokio::spawn(async move {
        let permit = waiter
            .semaphore("mover-permits", 1)
            .acquire()
            .ttl(5 * SECOND)
            .wait(50 * SECOND)
            .await?;
        permit.release().await.map(drop)
    });
    assert!(
        eventually(|| !shard_channels(&cluster, from, &pattern).is_empty()).await,
        "the waiter listens for its turn on the set's master {from} (SSUBSCRIBE {pattern})"
    );
    tokio::task::block_in_place(|| cluster.move_slot(key, to));
    assert!(
        eventually(|| !shard_channels(&cluster, to, &pattern).is_empty()).await,
        "after the slot moved, the waiter listens on its new master"
    );
    assert!(shard_channels(&cluster, from, &pattern).is_empty());
    assert!(permit.release().await.expect("release"), "still held");
    tokio::time::timeout(20 * SECOND, waiting)
        .await
        .expect("the waiter got its turn")
        .expect("join")
        .expect("acquired and released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_caught_by_a_slot_migration_go_on_when_it_ends() {
    let cluster = RedisCluster::start(3, 0);
    let holder = locker_on(&cluster);
    let waiter = locker_on(&cluster);
    let lease = holder
        .lock("migrating")
        .ttl(30 * SECOND)
        .await
        .expect("hold");
    let key = lease.key().to_owned();
    let to = (cluster.master_of(&key) + 1) % 3;
    // While the slot is half moved, the waiter's queued attempt and the holder's release
    // (scripts on the lock's keys, some of them missing) get TRYAGAIN.
    let moving = cluster.start_slot_move(&key, to);
    let waiting = tokio::spawn(async move {
        waiter
            .lock("migrating")
            .ttl(5 * SECOND)
            .wait(SECOND)
            .await
            .map(drop)
    });
    let released = tokio::spawn(async move { lease.release().await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    tokio::task::block_in_place(|| cluster.finish_slot_move(&moving));
    assert!(
        released.await.expect("join").expect("released"),
        "the release went through once the slot settled"
    );
    waiting.await.expect("join").expect(
        "a 1 s wait was enough: the request went on when the migration ended, not after \
         redis-rs's default 1.28 s pause before a retry",
    );
}

// The release pops the head from the queue in the same step as it reserves the lock, so
// when the head was the only waiter the queue key is gone while its claim runs; while the
// slot migrates Redis refuses a script whose declared keys are partly present (TRYAGAIN,
// "Multiple keys request during rehashing of slot"), until the migration ends. This test
// holds the migration open until the claim ends: the claim must declare the lock key only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_while_its_slot_migrates_is_not_refused() {
    let cluster = RedisCluster::start(3, 0);
    let holder = locker_on(&cluster);
    let waiter = locker_on(&cluster);
    // Fencing, so that every key the waiter's queued attempt declares exists (the lock,
    // its fencing counter, the queue and its entries): the script then runs on the slot's
    // old master while the slot migrates, and the claim empties the queue there.
    let lease = holder
        .lock("claimed")
        .ttl(30 * SECOND)
        .fencing()
        .await
        .expect("hold");
    let key = lease.key().to_owned();
    let queue = format!("{key}:q");
    let from = cluster.master_of(&key);
    let waiting = tokio::spawn(async move {
        waiter
            .lock("claimed")
            .ttl(5 * SECOND)
            .wait(20 * SECOND)
            .await
            .map(drop)
    });
    assert!(
        eventually(|| cluster.nodes[from]
            .command(&["ZCARD", &queue])
            .contains(":1"))
        .await,
        "the waiter queued"
    );
    let moving = cluster.start_slot_move(&key, (from + 1) % 3);
    assert!(lease.release().await.expect("release"));
    let claimed = tokio::time::timeout(20 * SECOND, waiting)
        .await
        .expect("the waiter ended")
        .expect("join");
    tokio::task::block_in_place(|| cluster.finish_slot_move(&moving));
    claimed.expect(
        "the claim went through: it emptied the queue, and touched it no more (Redis refuses \
         a key that a script emptied while its slot migrates)",
    );
}

// A fencing acquisition declares the lock key and its fencing counter; on a free lock fenced
// before, the counter is there and the lock key is not, and while the slot migrates Redis
// refuses such a script (TRYAGAIN) until the migration ends. Without a wait the request
// says so; with one it retries through the migration, however long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_while_its_slot_migrates_names_the_migration_or_outwaits_it() {
    let cluster = RedisCluster::start(3, 0);
    let locker = locker_on(&cluster);
    let lease = locker
        .lock("fenced")
        .ttl(30 * SECOND)
        .fencing()
        .await
        .expect("the first lease");
    let key = lease.key().to_owned();
    let first = lease.fencing_token();
    assert!(lease.release().await.expect("release"));
    let moving = cluster.start_slot_move(&key, (cluster.master_of(&key) + 1) % 3);
    let err = locker
        .lock("fenced")
        .ttl(5 * SECOND)
        .fencing()
        .wait(Duration::ZERO)
        .await
        .map(drop)
        .expect_err("refused while the slot migrates");
    assert!(matches!(err, LockError::SlotMigrating { .. }), "{err:?}");
    assert!(
        err.to_string().contains("hash slot is being moved"),
        "the message names the migration: {err}"
    );
    let waiting = tokio::spawn({
        let locker = locker.clone();
        async move {
            locker
                .lock("fenced")
                .ttl(5 * SECOND)
                .fencing()
                .wait(20 * SECOND)
                .await
                .map(|lease| lease.fencing_token())
        }
    });
    // Longer than the cluster client's own retries (0.66 s at most).
    tokio::time::sleep(2 * SECOND).await;
    tokio::task::block_in_place(|| cluster.finish_slot_move(&moving));
    let token = tokio::time::timeout(20 * SECOND, waiting)
        .await
        .expect("the waiter ended")
        .expect("join")
        .expect("the request retried until the migration ended");
    assert!(
        token > first,
        "the token after the move, {token:?}, is above {first:?}"
    );
}

// A lock taken without fencing has no fencing counter, and a waiter's queued attempt
// declared that key all the same: while the slot migrated, Redis refused every such
// attempt (TRYAGAIN) until the migration ended. Likewise a release that declares the
// queue's key after the last waiter left it. Here a waiter joins the queue while the slot
// migrates, and both waiters take their turns and release before the migration ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_queue_and_take_their_turns_while_the_slot_migrates() {
    let cluster = RedisCluster::start(3, 0);
    let holder = locker_on(&cluster);
    let lease = holder
        .lock("unfenced")
        .ttl(30 * SECOND)
        .await
        .expect("hold");
    let key = lease.key().to_owned();
    let queue = format!("{key}:q");
    let from = cluster.master_of(&key);
    let take_turn = |locker: Locker| async move {
        let lease = locker
            .lock("unfenced")
            .ttl(5 * SECOND)
            .wait(20 * SECOND)
            .await?;
        lease.release().await
    };
    let first = tokio::spawn(take_turn(locker_on(&cluster)));
    assert!(
        eventually(|| cluster.nodes[from]
            .command(&["ZCARD", &queue])
            .contains(":1"))
        .await,
        "the first waiter queued"
    );
    let moving = cluster.start_slot_move(&key, (from + 1) % 3);
    let second = tokio::spawn(take_turn(locker_on(&cluster)));
    assert!(
        eventually(|| cluster.nodes[from]
            .command(&["ZCARD", &queue])
            .contains(":2"))
        .await,
        "the second waiter queued while the slot migrates"
    );
    assert!(lease.release().await.expect("release"));
    for (waiter, turn) in [("first", first), ("second", second)] {
        let released = tokio::time::timeout(20 * SECOND, turn)
            .await
            .expect("the waiter ended")
            .expect("join");
        assert!(
            released.unwrap_or_else(|err| panic!("the {waiter} waiter's turn: {err}")),
            "the {waiter} waiter released its own lease"
        );
    }
    tokio::task::block_in_place(|| cluster.finish_slot_move(&moving));
}
