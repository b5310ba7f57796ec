//! Issue 39, item 5: on a Redis Cluster, a waiter's sharded subscription follows its
//! slot's master through failovers (`CLUSTER FAILOVER`, its `FORCE` and `TAKEOVER` forms,
//! and a master killed for good), so that no release's wake-up is lost: the waiter gets
//! its turn within milliseconds of the release, not from its own safety-net timer.
//!
//! A failover demotes the slot's master to a replica, which drops its shard channels'
//! subscribers with a `sunsubscribe` push; re-subscribed at once, the channel used to land
//! on the same node (its cluster client still took it for the master, and a replica
//! accepts SSUBSCRIBE), where a release published on the new master arrives only once the
//! new master counts the node among its replicas. A master killed for good left the
//! subscription with nowhere to go at all.

use std::time::{Duration, Instant};

use lock_core::{LockError, Locker, ReplicaSync};
use lock_tests::cluster::bulk_strings;
use lock_tests::RedisCluster;

use crate::failover::{replica_of, until_replica_online};

const SECOND: Duration = Duration::from_secs(1);

/// The longest a release may take to reach its waiter. Normal: a few milliseconds. A lost
/// wake-up is caught by the waiter's safety-net timer only, whose pauses start at
/// 0.25-0.5 s and double; each run lets them grow first ([`SAFETY_NET_GROWS`]).
const BOUND: Duration = Duration::from_millis(300);

/// How long a waiter waits before its master fails: its safety-net pauses have grown to
/// 0.5-1 s or more by then, so that a lost wake-up shows as a gap well above [`BOUND`].
const SAFETY_NET_GROWS: Duration = Duration::from_millis(1200);

/// Failover runs in [`wake_ups_survive_repeated_failovers`].
const RUNS: usize = 21;

/// What a run waits for: a lock, a semaphore's permit, or a read-write lock (the holder
/// writes, the waiter reads).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Lock,
    Permit,
    Read,
}

impl Kind {
    /// The key whose slot the waiter's turn is announced in.
    pub(crate) fn key(self, name: &str) -> String {
        match self {
            Kind::Lock => format!("lock:{{{name}}}"),
            Kind::Permit => format!("lock:{{{name}}}:sem"),
            Kind::Read => format!("lock:{{{name}}}:rw"),
        }
    }
}

/// A held lock, permit, or read-write lock's lease.
pub(crate) enum Held {
    Lock(lock_core::Lease),
    Permit(lock_core::Permit),
    Rw(lock_core::RwLease),
}

impl Held {
    pub(crate) async fn release(self) -> Result<bool, LockError> {
        match self {
            Held::Lock(lease) => lease.release().await,
            Held::Permit(permit) => permit.release().await,
            Held::Rw(lease) => lease.release().await,
        }
    }
}

pub(crate) async fn hold(locker: &Locker, kind: Kind, name: &str) -> Held {
    let ttl = 60 * SECOND;
    match kind {
        Kind::Lock => Held::Lock(locker.lock(name).ttl(ttl).await.expect("hold")),
        Kind::Permit => Held::Permit(
            locker
                .semaphore(name, 1)
                .acquire()
                .ttl(ttl)
                .await
                .expect("hold the only permit"),
        ),
        Kind::Read => Held::Rw(
            locker
                .rwlock(name)
                .write()
                .ttl(ttl)
                .await
                .expect("hold the write lease"),
        ),
    }
}

/// Waits for `name` (`kind`) on a task of its own: the instant it was granted, once it
/// released it again.
fn wait_on_task(
    locker: &Locker,
    kind: Kind,
    name: &str,
) -> tokio::task::JoinHandle<Result<Instant, LockError>> {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move {
        let (ttl, wait) = (5 * SECOND, 20 * SECOND);
        let (granted, held) = match kind {
            Kind::Lock => {
                let lease = locker.lock(name.as_str()).ttl(ttl).wait(wait).await?;
                (Instant::now(), Held::Lock(lease))
            }
            Kind::Permit => {
                let permit = locker
                    .semaphore(name.as_str(), 1)
                    .acquire()
                    .ttl(ttl)
                    .wait(wait)
                    .await?;
                (Instant::now(), Held::Permit(permit))
            }
            Kind::Read => {
                let lease = locker
                    .rwlock(name.as_str())
                    .read()
                    .ttl(ttl)
                    .wait(wait)
                    .await?;
                (Instant::now(), Held::Rw(lease))
            }
        };
        held.release().await.map_err(|err| {
            eprintln!("the waiter's release failed: {err:?}");
            err
        })?;
        Ok(granted)
    })
}

/// The holder's locker: its grants acknowledged by a replica (so that a killed master's
/// lease lives on with the promoted one).
pub(crate) fn holder_on(cluster: &RedisCluster) -> Locker {
    Locker::builder()
        .cluster(cluster.urls())
        .command_timeout(SECOND)
        .unreachable_timeout(30 * SECOND)
        .build()
        .expect("cluster locker")
}

/// The waiter's locker: no replica check, so that nothing but its wake-up stands between
/// a release and its grant (a promoted master's replica resyncing would hold it up).
fn waiter_on(cluster: &RedisCluster) -> Locker {
    Locker::builder()
        .cluster(cluster.urls())
        .command_timeout(SECOND)
        .unreachable_timeout(30 * SECOND)
        .replica_sync(ReplicaSync::Off)
        .build()
        .expect("cluster locker")
}

/// Whether node `index` has a subscriber of a shard channel matching `pattern`.
fn listens_on(cluster: &RedisCluster, index: usize, pattern: &str) -> bool {
    !bulk_strings(&cluster.nodes[index].command(&["PUBSUB", "SHARDCHANNELS", pattern])).is_empty()
}

/// Polls `done` every 5 ms for up to 30 s; panics with `what` if it never held.
fn until(what: &str, done: impl FnMut() -> bool) {
    assert!(within(30 * SECOND, done), "{what}");
}

/// Polls `done` every 5 ms for up to `limit`; whether it held.
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn role(cluster: &RedisCluster, index: usize) -> String {
    bulk_strings(&cluster.nodes[index].command(&["ROLE"]))
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// Hands node `master`'s slots to its replica `replica` with `CLUSTER FAILOVER [option]`,
/// and returns as soon as the old master calls itself a replica (it dropped its shard
/// channels' subscribers then).
fn fail_over(cluster: &RedisCluster, master: usize, replica: usize, option: Option<&str>) {
    let mut args = vec!["CLUSTER", "FAILOVER"];
    args.extend(option);
    let reply = cluster.nodes[replica].command(&args);
    assert!(reply.contains("OK"), "CLUSTER FAILOVER answered {reply:?}");
    until(
        "the replica took over and the old master stepped down",
        || role(cluster, replica) == "master" && role(cluster, master) == "slave",
    );
}

/// What one wait across a fault showed.
#[derive(Debug)]
struct Run {
    /// The waiter listened on the slot's master before the fault (within 5 s of waiting).
    on_master: bool,
    /// How long after the release the waiter got its turn; its error if it never did.
    gap: Result<Duration, LockError>,
}

impl Run {
    fn failed(&self) -> bool {
        !self.on_master || !matches!(self.gap, Ok(gap) if gap <= BOUND)
    }
}

/// One wait across one fault: the holder holds `name`, the waiter waits for it (and
/// should listen on the slot's master, node `master`), `fault` takes the master away, and
/// the holder releases at once.
async fn across(
    cluster: &RedisCluster,
    (holder, waiter): (&Locker, &Locker),
    (kind, name): (Kind, &str),
    master: usize,
    fault: impl FnOnce(),
) -> Run {
    let key = kind.key(name);
    let held = hold(holder, kind, name).await;
    let waiting = wait_on_task(waiter, kind, name);
    let pattern = format!("{key}:t:*");
    let on_master = tokio::task::block_in_place(|| {
        within(5 * SECOND, || listens_on(cluster, master, &pattern))
    });
    tokio::time::sleep(SAFETY_NET_GROWS).await;
    tokio::task::block_in_place(fault);
    assert!(held.release().await.expect("release"), "still held");
    let released = Instant::now();
    let granted = tokio::time::timeout(60 * SECOND, waiting)
        .await
        .expect("the waiter ended")
        .expect("join");
    Run {
        on_master,
        gap: granted.map(|granted| granted.saturating_duration_since(released)),
    }
}

/// Twenty-one failovers of the waited-for slot's master, while a waiter waits (a lock, a
/// semaphore's permit, a read-write lock's read side, in turn), each followed at once by
/// the release: every waiter gets its turn within [`BOUND`] of its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_survive_repeated_failovers() {
    let cluster = RedisCluster::start(3, 1);
    let (holder, waiter) = (holder_on(&cluster), waiter_on(&cluster));
    let kinds = [Kind::Lock, Kind::Permit, Kind::Read];
    let options = [None, Some("FORCE"), Some("TAKEOVER")];
    let mut outcomes = Vec::new();
    for run in 0..RUNS {
        let (kind, option) = (kinds[run % 3], options[(run / 3) % 3]);
        let key = kind.key("fo");
        let master = cluster.master_of(&key);
        let replica = replica_of(&cluster, master);
        // In sync, so that a plain `CLUSTER FAILOVER` can go ahead.
        tokio::task::block_in_place(|| until_replica_online(&cluster.nodes[master]));
        let outcome = across(&cluster, (&holder, &waiter), (kind, "fo"), master, || {
            fail_over(&cluster, master, replica, option);
        })
        .await;
        eprintln!("run {run}: {kind:?}, CLUSTER FAILOVER {option:?}: {outcome:?}");
        outcomes.push((run, kind, option, outcome));
        tokio::task::block_in_place(|| cluster.wait_until_ok());
    }
    let failed: Vec<_> = outcomes.iter().filter(|(.., run)| run.failed()).collect();
    assert!(
        failed.is_empty(),
        "in {} of {RUNS} runs the waiter did not listen on the slot's master, or got its \
         turn more than {BOUND:?} after the release (a lost wake-up, caught by its own \
         timer): {failed:?}; every run: {outcomes:?}",
        failed.len()
    );
}

/// The slot's master killed for good (a lock, a semaphore's permit and a read-write lock's
/// read side, each in a shard of its own): once its replica took over, a release there
/// wakes the waiter at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_survive_a_master_killed_for_good() {
    let mut cluster = RedisCluster::start(3, 1);
    let (holder, waiter) = (holder_on(&cluster), waiter_on(&cluster));
    // A name per kind, each in a shard of its own: (kind, name, master, replica), looked up
    // while every node still answers.
    let mut runs: Vec<(Kind, String, usize, usize)> = Vec::new();
    for (kind, n) in [Kind::Lock, Kind::Permit, Kind::Read].into_iter().zip(0..) {
        let (name, master) = (0..)
            .map(|i| format!("killed{n}-{i}"))
            .map(|name| {
                let master = cluster.master_of(&kind.key(&name));
                (name, master)
            })
            .find(|(_, master)| runs.iter().all(|run| run.2 != *master))
            .expect("a name in a shard of its own");
        let replica = replica_of(&cluster, master);
        runs.push((kind, name, master, replica));
    }
    let mut outcomes = Vec::new();
    for (kind, name, master, replica) in &runs {
        let (master, replica) = (*master, *replica);
        tokio::task::block_in_place(|| until_replica_online(&cluster.nodes[master]));
        let outcome = {
            let cluster = &cluster;
            across(cluster, (&holder, &waiter), (*kind, name), master, || {
                cluster.nodes[master].signal("-KILL");
                until("the replica took over the killed master's slots", || {
                    role(cluster, replica) == "master"
                        && (0..cluster.nodes.len())
                            .filter(|&i| runs.iter().all(|run| run.2 != i))
                            .all(|i| {
                                cluster.nodes[i]
                                    .command(&["CLUSTER", "INFO"])
                                    .contains("cluster_state:ok")
                            })
                });
            })
            .await
        };
        eprintln!("{kind:?}, its master killed: {outcome:?}");
        outcomes.push((*kind, outcome));
        // Reaped, and never started again.
        cluster.nodes[master].kill();
    }
    let failed: Vec<_> = outcomes.iter().filter(|(_, run)| run.failed()).collect();
    assert!(
        failed.is_empty(),
        "a waiter did not listen on the slot's master, or got its turn more than {BOUND:?} \
         after the release: {failed:?}; every run: {outcomes:?}"
    );
}
