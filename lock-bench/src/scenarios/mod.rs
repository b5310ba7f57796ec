//! One module per scenario. Each measures its contenders in turn, repetition after
//! repetition, and returns a table of min/median/max figures.

use std::time::Duration;

pub mod loss;
pub mod renewal;
pub mod s10_fenced;
pub mod s1_latency;
pub mod s2_throughput;
pub mod s3_hot;
pub mod s4_redlock;
pub mod s5_overrun;
pub mod s6_holders;
pub mod s6_permits;
pub mod s7_hold;
pub mod s7_rwlock;
pub mod s7_writer;
pub mod s8_multi;
pub mod s9_cluster;

/// How long and how often to measure.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Per contender, per repetition (S1–S4).
    pub run_for: Duration,
    pub reps: usize,
    /// Concurrent tasks in S2.
    pub tasks: usize,
    /// Contender counts in S3.
    pub hot_contenders: Vec<usize>,
    /// Per contender over all repetitions (S5).
    pub overrun_for: Duration,
    /// Renewal cost: leases, their TTL, and how long they are held.
    pub renew_leases: usize,
    pub renew_ttl: Duration,
    pub renew_hold: Duration,
}

/// Runs `run(i)` for each of `count` contenders in turn, `reps` times, starting each
/// repetition one contender later so that no contender always runs first (or right after
/// the same neighbour). Returns the runs of each contender, in repetition order.
pub async fn interleaved<R>(
    count: usize,
    reps: usize,
    mut run: impl AsyncFnMut(usize) -> R,
) -> Vec<Vec<R>> {
    let mut runs: Vec<Vec<R>> = (0..count).map(|_| Vec::with_capacity(reps)).collect();
    for rep in 0..reps {
        for k in 0..count {
            let i = (k + rep) % count;
            runs[i].push(run(i).await);
        }
    }
    runs
}

/// Like [`interleaved`], but each repetition is cut into short slices run round-robin over
/// the contenders, each slice adding to that contender's accumulator for the repetition.
/// On a shared, noisy machine a burst of load then hits every contender about equally
/// instead of spoiling one contender's whole run. Returns one accumulator per contender
/// per repetition.
pub async fn sliced<A: Default>(
    count: usize,
    reps: usize,
    run_for: Duration,
    mut slice: impl AsyncFnMut(usize, Duration, &mut A),
) -> Vec<Vec<A>> {
    let slices = (run_for.as_millis() / SLICE.as_millis()).clamp(1, MAX_SLICES as u128) as u32;
    let each = run_for / slices;
    let mut runs: Vec<Vec<A>> = (0..count).map(|_| Vec::with_capacity(reps)).collect();
    for rep in 0..reps {
        let mut accs: Vec<A> = (0..count).map(|_| A::default()).collect();
        for s in 0..slices as usize {
            for k in 0..count {
                let i = (k + rep + s) % count;
                slice(i, each, &mut accs[i]).await;
            }
        }
        for (runs, acc) in runs.iter_mut().zip(accs) {
            runs.push(acc);
        }
    }
    runs
}

/// Shortest slice of [`sliced`], and the most slices per repetition.
const SLICE: Duration = Duration::from_millis(100);
const MAX_SLICES: u32 = 10;

/// Keeps the first error of a run for the report.
#[derive(Debug, Default, Clone)]
pub struct Failures {
    pub count: u64,
    pub first: Option<String>,
}

impl Failures {
    pub fn record(&mut self, err: String) {
        self.count += 1;
        self.first.get_or_insert(err);
    }

    /// Every run's failures together.
    pub fn of_runs<'a>(runs: impl IntoIterator<Item = &'a Failures>) -> Failures {
        let mut all = Failures::default();
        for failures in runs {
            all.merge(failures.clone());
        }
        all
    }

    pub fn merge(&mut self, other: Failures) {
        self.count += other.count;
        if self.first.is_none() {
            self.first = other.first;
        }
    }
}

/// Waits for every task of a run and adds up their failures.
pub async fn join_all(tasks: Vec<tokio::task::JoinHandle<Failures>>, failures: &mut Failures) {
    for task in tasks {
        match task.await {
            Ok(task_failures) => failures.merge(task_failures),
            Err(err) => failures.record(format!("task failed: {err}")),
        }
    }
}

/// What Redis counted since `before` (None when either snapshot failed), printed per
/// command when `LOCK_BENCH_COMMANDSTATS` is set (`label` says which run).
pub async fn calls_since(
    probe: &crate::probe::Probe,
    before: Option<crate::probe::Snapshot>,
    label: &str,
) -> Option<crate::probe::Delta> {
    let after = probe.snapshot().await.ok()?;
    let delta = after.delta_since(&before?);
    if std::env::var_os("LOCK_BENCH_COMMANDSTATS").is_some() {
        eprintln!("commandstats delta ({label}): {:?}", delta.per_command);
    }
    Some(delta)
}
