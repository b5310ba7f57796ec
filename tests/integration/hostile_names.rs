//! Hostile names on every deployment: names that begin with `}`, hold braces anywhere, end
//! in a derived key's suffix (`:q`, `:qe`, `:fence`), hold spaces, non-ASCII text and NUL
//! bytes, or are as long as a name may be; and prefixes with braces. Each is locked with a
//! waiter (the holder's value is then marked, so its release takes the queue's path),
//! fenced, taken as a semaphore permit and a read-write lock's sides, and in a multi-lock,
//! and every one of them must leave nothing behind. On a Redis Cluster every key of one name
//! must share one slot: a name whose hash tag comes out empty (`lock:{}job}`) used to spread
//! its keys over several slots (CROSSSLOT, or a release that fails and leaves the lock held
//! until its TTL).

use std::time::Duration;

use lock_core::{LockError, Locker, ScriptMode};
use lock_tests::{RedisCluster, RedisServer};

use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// Names that are fine on one Redis, and must be fine everywhere.
pub fn hostile_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "}job",
        "}",
        "}}",
        "{}",
        "}{",
        "{",
        "{}}x",
        "a}b{c",
        "{order-7}:x",
        ":q",
        "}:qe",
        "}:fence",
        "x}:sem",
        "} with spaces ",
        "}ünïcödé 日本 🦀",
        "\0",
        "\0}nul",
        "nul\0}",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    // As long as a name may be (lock_core::MAX_NAME_LEN bytes), beginning with `}`.
    names.push(format!(
        "}}{}",
        "é".repeat((lock_core::MAX_NAME_LEN - 1) / 2)
    ));
    names
}

/// What a deployment supports.
#[derive(Clone, Copy)]
struct Supports {
    /// Semaphores and read-write locks (not on Redlock, nor with WATCH/MULTI).
    permits: bool,
}

/// `Err` with what failed, for a report of every failing step.
fn step<T>(result: Result<T, LockError>, what: &str, name: &str) -> Result<T, String> {
    result.map_err(|err| format!("{what} of {name:?}: {err}"))
}

fn expect(ok: bool, what: &str, name: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what} ({name:?})"))
    }
}

/// Locked, with a waiter: the holder's value gets the listened-for mark, so the release
/// hands over through the queue (release_listened.lua); then nothing is left.
async fn with_a_waiter(locker: &Locker, other: &Locker, name: &str) -> Result<(), String> {
    let held = step(other.lock(name).ttl(30 * SECOND).await, "lock", name)?;
    let waiting = {
        let (locker, name) = (locker.clone(), name.to_owned());
        tokio::spawn(async move { locker.lock(name).ttl(30 * SECOND).wait(20 * SECOND).await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    if waiting.is_finished() {
        let early = waiting.await.map_err(|err| err.to_string())?;
        held.release().await.ok();
        return Err(format!(
            "the waiter of {name:?} ended while the lock was held: {early:?}"
        ));
    }
    let released = step(held.release().await, "release with a waiter", name)?;
    expect(
        released,
        "the holder still held the lock at its release",
        name,
    )?;
    let next = waiting.await.map_err(|err| err.to_string())?;
    let next = step(next, "the waiter", name)?;
    expect(
        next.name() == name,
        "the waiter's lease is of its name",
        name,
    )?;
    let released = step(next.release().await, "release after waiting", name)?;
    expect(
        released,
        "the waiter still held the lock at its release",
        name,
    )?;
    let left = step(other.inspect(name).await, "inspect", name)?;
    expect(
        left.is_none(),
        "the lock is free after its last release",
        name,
    )
}

/// Fenced twice: the second token is larger.
async fn fenced(locker: &Locker, other: &Locker, name: &str) -> Result<(), String> {
    let first = step(locker.lock(name).fencing().await, "fenced lock", name)?;
    let token = first.fencing_token().unwrap_or(0);
    step(first.release().await, "release of a fenced lock", name)?;
    let second = step(other.lock(name).fencing().await, "second fenced lock", name)?;
    let next = second.fencing_token().unwrap_or(0);
    step(second.release().await, "release of a fenced lock", name)?;
    expect(token > 0 && next > token, "fencing tokens grow", name)
}

/// Two permits of two, then busy; a read-write lock's two readers, then a waiting writer.
async fn permits(locker: &Locker, other: &Locker, name: &str) -> Result<(), String> {
    let semaphore = locker.semaphore(name, 2);
    let a = step(semaphore.try_acquire(30 * SECOND).await, "semaphore", name)?;
    let b = step(
        other.semaphore(name, 2).try_acquire(30 * SECOND).await,
        "semaphore's second permit",
        name,
    )?;
    let third = semaphore.try_acquire(30 * SECOND).await;
    expect(
        matches!(third, Err(LockError::LimitReached { .. })),
        "a third permit of two is busy",
        name,
    )?;
    let holders = step(semaphore.holders().await, "semaphore holders", name)?;
    expect(holders.holders.len() == 2, "two permit holders", name)?;
    expect(
        step(a.release().await, "permit release", name)?
            && step(b.release().await, "permit release", name)?,
        "the permits were still held at their release",
        name,
    )?;

    let r1 = step(
        locker.rwlock(name).read().ttl(30 * SECOND).await,
        "read lock",
        name,
    )?;
    let r2 = step(
        other.rwlock(name).read().ttl(30 * SECOND).await,
        "second read lock",
        name,
    )?;
    let writer = {
        let (other, name) = (other.clone(), name.to_owned());
        tokio::spawn(async move {
            other
                .rwlock(name)
                .write()
                .ttl(30 * SECOND)
                .wait(20 * SECOND)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The last reader out is of the other Locker: the writer's turn is a message (on a
    // Cluster, in the set's shard, on a channel named after the hostile name).
    step(r2.release().await, "reader's release", name)?;
    step(r1.release().await, "reader's release", name)?;
    let w = step(
        writer.await.map_err(|err| err.to_string())?,
        "write lock",
        name,
    )?;
    let released = step(w.release().await, "writer's release", name)?;
    expect(
        released,
        "the writer still held the lock at its release",
        name,
    )
}

/// A multi-lock of the name, a name that differs only after a brace, and a plain name.
async fn multi(locker: &Locker, other: &Locker, name: &str) -> Result<(), String> {
    let sibling = if name.len() + 2 <= lock_core::MAX_NAME_LEN {
        format!("{name}}}2")
    } else {
        "}2".to_owned()
    };
    let all = step(
        locker
            .lock_all([name, sibling.as_str(), "plain"])
            .ttl(30 * SECOND)
            .await,
        "multi-lock",
        name,
    )?;
    let busy = other.try_lock(name, SECOND).await;
    expect(
        matches!(busy, Err(LockError::Busy { .. })),
        "a name of a held multi-lock is busy",
        name,
    )?;
    let released = step(all.release().await, "multi-lock's release", name)?;
    expect(
        released,
        "the multi-lock was still held at its release",
        name,
    )?;
    for each in [name, sibling.as_str(), "plain"] {
        let left = step(other.inspect(each).await, "inspect", each)?;
        expect(left.is_none(), "free after the multi-lock's release", each)?;
    }
    Ok(())
}

/// Every operation on `name`, from two lockers (as two processes would have); what failed.
async fn exercise(locker: &Locker, other: &Locker, name: &str, supports: Supports) -> Vec<String> {
    let mut failed = Vec::new();
    failed.extend(with_a_waiter(locker, other, name).await.err());
    failed.extend(fenced(locker, other, name).await.err());
    if supports.permits {
        failed.extend(permits(locker, other, name).await.err());
    }
    failed.extend(multi(locker, other, name).await.err());
    failed
}

/// Panics with every step that failed, on every name.
fn assert_none_failed(failed: &[String]) {
    assert!(
        failed.is_empty(),
        "{} step(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

async fn exercise_all(locker: &Locker, other: &Locker, supports: Supports) {
    let mut failed = Vec::new();
    for name in hostile_names() {
        failed.extend(exercise(locker, other, &name, supports).await);
    }
    assert_none_failed(&failed);
}

const ALL: Supports = Supports { permits: true };
const LOCKS_ONLY: Supports = Supports { permits: false };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_on_one_redis() {
    let h = Harness::scripts();
    exercise_all(&h.locker, &h.second_locker(), ALL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_with_functions() {
    let h = Harness::functions();
    exercise_all(&h.locker, &h.second_locker(), ALL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_with_transactions() {
    let h = Harness::transactions();
    exercise_all(&h.locker, &h.second_locker(), LOCKS_ONLY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_on_redlock() {
    let h = Harness::redlock();
    exercise_all(&h.locker, &h.second_locker(), LOCKS_ONLY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_in_memory() {
    let h = Harness::memory();
    exercise_all(&h.locker, &h.second_locker(), ALL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_on_sentinel() {
    let master = RedisServer::start();
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    let on_sentinel = || {
        Locker::builder()
            .sentinel([sentinel.url()], "locks")
            .app_name("lock-tests")
            .build()
            .expect("sentinel locker")
    };
    exercise_all(&on_sentinel(), &on_sentinel(), ALL).await;
}

fn cluster_locker(cluster: &RedisCluster, prefix: &str, mode: ScriptMode) -> Locker {
    Locker::builder()
        .cluster(cluster.urls())
        .prefix(prefix)
        .script_mode(mode)
        .app_name("lock-tests")
        .build()
        .expect("cluster locker")
}

/// Three masters: a name's keys in different slots live on different nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let (a, b) = (
        cluster_locker(&cluster, "lock:", ScriptMode::Eval),
        cluster_locker(&cluster, "lock:", ScriptMode::Eval),
    );
    exercise_all(&a, &b, ALL).await;
}

/// One master, scripts as a Functions library: every slot on one node, so only the script's
/// declared keys (and Redis's cross-slot check) stand between a name and CROSSSLOT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_on_a_one_node_cluster_with_functions() {
    let cluster = RedisCluster::start_one_node();
    let (a, b) = (
        cluster_locker(&cluster, "lock:", ScriptMode::Functions),
        cluster_locker(&cluster, "lock:", ScriptMode::Functions),
    );
    exercise_all(&a, &b, ALL).await;
}

/// Prefixes with braces: a complete hash tag (every lock in one slot), an empty one, an
/// unclosed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_with_braces_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let mut failed = Vec::new();
    for prefix in ["app{}:", "{}", "{locks}:", "x{", "}{", "a}{}"] {
        let (a, b) = (
            cluster_locker(&cluster, prefix, ScriptMode::Eval),
            cluster_locker(&cluster, prefix, ScriptMode::Eval),
        );
        for name in ["job", "}job", "{}", "\0}x"] {
            let steps = exercise(&a, &b, name, ALL).await;
            failed.extend(steps.into_iter().map(|f| format!("prefix {prefix:?}: {f}")));
        }
    }
    assert_none_failed(&failed);
}
