//! S3, hot name: N contenders loop on ONE name, each holding it about 1 ms. Acquisitions per
//! second, the hand-off gap (from a holder starting its release to the next, different,
//! holder entering its critical section), the share of self re-acquisitions (barging),
//! Jain's fairness index over contenders, Redis calls per acquisition (INFO commandstats
//! deltas, which count the calls scripts make too), commands per acquisition
//! (`total_commands_processed`; Redis 7 counts scripts' inner calls there too, so it
//! matches the calls column: the wire figure is round trips), and round trips per acquisition (the
//! server's read events on client sockets, `total_reads_processed`: one per request a
//! client sends, or per pipeline). On Redlock the server counts are summed over the masters
//! and divided by their number: per node.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{interleaved, Failures, Settings};
use crate::contenders::{Any, Contender as _, Spec};
use crate::probe::Probe;
use crate::stats::{jain, Samples, Spread};

const SPEC: Spec = Spec {
    ttl: Duration::from_secs(5),
    wait: Duration::from_secs(10),
    watch_lost: false,
};
const HOLD: Duration = Duration::from_millis(1);

/// One group of contenders racing for the name: the same contender several times (tasks of
/// one process) or distinct ones (separate processes).
pub struct Group {
    pub label: String,
    pub members: Vec<Arc<Any>>,
    /// The masters of a Redlock group, whose counts are read per node; empty: the single
    /// Redis of the scenario's probe.
    pub nodes: Vec<Probe>,
}

/// S3 figures of one run.
#[derive(Debug, Clone)]
pub struct Hot {
    pub acquisitions_per_s: f64,
    pub handoff_p50_us: f64,
    pub handoff_p99_us: f64,
    pub self_reacquire: f64,
    pub jain: f64,
    pub redis_calls_per_acquisition: f64,
    pub commands_per_acquisition: f64,
    pub round_trips_per_acquisition: f64,
    /// Redis CPU (`used_cpu_user + used_cpu_sys`, INFO cpu) per acquisition, in µs: the
    /// server's whole cost of a cycle, its network I/O included. Per node on Redlock.
    pub redis_cpu_us_per_acquisition: f64,
    /// The longest time from asking for the lock to entering the critical section.
    pub max_wait_ms: f64,
    pub failures: Failures,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    who: usize,
    /// When the contender asked for the lock.
    asked: Instant,
    entered: Instant,
    leaving: Instant,
}

pub async fn measure(group: &Group, run_for: Duration, probe: &Probe) -> Hot {
    let n = group.members.len();
    let mut failures = Failures::default();
    for member in &group.members {
        if let Err(err) = member.warm_up().await {
            failures.record(format!("warm-up: {err}"));
        }
    }
    let holds = Arc::new(Mutex::new(Vec::with_capacity(50_000)));
    let probes = if group.nodes.is_empty() {
        std::slice::from_ref(probe)
    } else {
        &group.nodes[..]
    };
    let mut before = Vec::with_capacity(probes.len());
    for probe in probes {
        before.push(probe.snapshot().await.ok());
    }
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for (who, contender) in group.members.iter().cloned().enumerate() {
        let holds = holds.clone();
        tasks.push(tokio::spawn(async move {
            let mut failures = Failures::default();
            while started.elapsed() < run_for {
                let holds = holds.clone();
                let asked = Instant::now();
                let body = async move {
                    let entered = Instant::now();
                    tokio::time::sleep(HOLD).await;
                    let leaving = Instant::now();
                    holds
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Hold {
                            who,
                            asked,
                            entered,
                            leaving,
                        });
                };
                if let Err(err) = contender.locked("s3", SPEC, body).await {
                    failures.record(err);
                }
            }
            failures
        }));
    }
    super::join_all(tasks, &mut failures).await;
    let elapsed = started.elapsed().as_secs_f64();
    let mut counts = Some(Counts {
        calls: 0,
        commands: 0,
        reads: 0,
        cpu_s: 0.0,
    });
    for (i, (probe, before)) in probes.iter().zip(before).enumerate() {
        let label = format!("{}, N={n}, node {i}", group.label);
        let delta = super::calls_since(probe, before, &label).await;
        counts = counts.zip(delta).map(|(sum, d)| Counts {
            calls: sum.calls + d.calls,
            commands: sum.commands + d.commands.saturating_sub(1),
            // The probe's own INFO request is one read of the window.
            reads: sum.reads + d.reads.saturating_sub(1),
            cpu_s: sum.cpu_s + d.cpu_s,
        });
    }
    let nodes = probes.len() as u64;
    let counts = counts.map(|sum| Counts {
        calls: sum.calls / nodes,
        commands: sum.commands / nodes,
        reads: sum.reads / nodes,
        cpu_s: sum.cpu_s / nodes as f64,
    });
    let mut log = std::mem::take(&mut *holds.lock().unwrap_or_else(PoisonError::into_inner));
    log.sort_by_key(|hold| hold.entered);
    summarize(&log, n, elapsed, counts, failures)
}

/// What the server counted over a measurement window.
#[derive(Debug, Clone, Copy)]
struct Counts {
    calls: u64,
    commands: u64,
    reads: u64,
    cpu_s: f64,
}

fn summarize(
    log: &[Hold],
    n: usize,
    elapsed: f64,
    counts: Option<Counts>,
    failures: Failures,
) -> Hot {
    let mut per_contender = vec![0u64; n];
    let mut gaps = Samples::with_capacity(log.len());
    let mut self_reacquires = 0u64;
    for (i, hold) in log.iter().enumerate() {
        per_contender[hold.who] += 1;
        if let Some(previous) = i.checked_sub(1).map(|p| log[p]) {
            if previous.who == hold.who {
                self_reacquires += 1;
            } else {
                gaps.push(
                    hold.entered
                        .saturating_duration_since(previous.leaving)
                        .as_nanos() as u64,
                );
            }
        }
    }
    let acquisitions = log.len() as u64;
    let max_wait = log
        .iter()
        .map(|hold| hold.entered.saturating_duration_since(hold.asked))
        .max()
        .unwrap_or_default();
    Hot {
        max_wait_ms: max_wait.as_secs_f64() * 1000.0,
        acquisitions_per_s: acquisitions as f64 / elapsed,
        handoff_p50_us: gaps.quantile_us(0.50),
        handoff_p99_us: gaps.quantile_us(0.99),
        self_reacquire: self_reacquires as f64 / acquisitions.max(1) as f64,
        jain: jain(&per_contender),
        redis_calls_per_acquisition: counts
            .map_or(f64::NAN, |c| c.calls as f64 / acquisitions.max(1) as f64),
        commands_per_acquisition: counts
            .map_or(f64::NAN, |c| c.commands as f64 / acquisitions.max(1) as f64),
        round_trips_per_acquisition: counts
            .map_or(f64::NAN, |c| c.reads as f64 / acquisitions.max(1) as f64),
        redis_cpu_us_per_acquisition: counts
            .map_or(f64::NAN, |c| c.cpu_s * 1e6 / acquisitions.max(1) as f64),
        failures,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub contenders: usize,
    pub acquisitions_per_s: Spread,
    pub handoff_p50_us: Spread,
    pub handoff_p99_us: Spread,
    pub self_reacquire: Spread,
    pub jain: Spread,
    pub redis_calls_per_acquisition: Spread,
    pub commands_per_acquisition: Spread,
    pub round_trips_per_acquisition: Spread,
    pub redis_cpu_us_per_acquisition: Spread,
    pub max_wait_ms: Spread,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub rows: Vec<Row>,
}

/// S3 for each contender count: `groups(n)` builds the groups racing with `n` members.
pub async fn run(
    settings: &Settings,
    probe: &Probe,
    mut groups: impl AsyncFnMut(usize) -> Result<Vec<Group>, String>,
) -> Result<Table, String> {
    let mut rows = Vec::new();
    for &n in &settings.hot_contenders {
        let groups = groups(n).await?;
        let runs = interleaved(groups.len(), settings.reps, async |i| {
            measure(&groups[i], settings.run_for, probe).await
        })
        .await;
        for (group, runs) in groups.iter().zip(&runs) {
            let mut failures = Failures::default();
            for run in runs {
                failures.merge(run.failures.clone());
            }
            rows.push(Row {
                contender: group.label.clone(),
                contenders: n,
                acquisitions_per_s: Spread::pick(runs, |r| r.acquisitions_per_s),
                handoff_p50_us: Spread::pick(runs, |r| r.handoff_p50_us),
                handoff_p99_us: Spread::pick(runs, |r| r.handoff_p99_us),
                self_reacquire: Spread::pick(runs, |r| r.self_reacquire),
                jain: Spread::pick(runs, |r| r.jain),
                redis_calls_per_acquisition: Spread::pick(runs, |r| r.redis_calls_per_acquisition),
                commands_per_acquisition: Spread::pick(runs, |r| r.commands_per_acquisition),
                round_trips_per_acquisition: Spread::pick(runs, |r| r.round_trips_per_acquisition),
                redis_cpu_us_per_acquisition: Spread::pick(runs, |r| {
                    r.redis_cpu_us_per_acquisition
                }),
                max_wait_ms: Spread::pick(runs, |r| r.max_wait_ms),
                failures: failures.count,
                first_error: failures.first,
            });
        }
    }
    Ok(Table { rows })
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| contender | N | acquisitions/s | hand-off p50 µs | hand-off p99 µs | self re-acquire | Jain | Redis calls/acq | commands/acq | round trips/acq | Redis CPU µs/acq | max wait ms |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                row.contenders,
                row.acquisitions_per_s.show(0),
                row.handoff_p50_us.show(0),
                row.handoff_p99_us.show(0),
                row.self_reacquire.show(3),
                row.jain.show(3),
                row.redis_calls_per_acquisition.show(1),
                row.commands_per_acquisition.show(1),
                row.round_trips_per_acquisition.show(1),
                row.redis_cpu_us_per_acquisition.show(1),
                row.max_wait_ms.show(1),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoffs_count_only_changes_of_holder() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let log = [
            Hold {
                who: 0,
                asked: at(0),
                entered: at(0),
                leaving: at(1),
            },
            Hold {
                who: 0,
                asked: at(0),
                entered: at(2),
                leaving: at(3),
            },
            Hold {
                who: 1,
                asked: at(0),
                entered: at(5),
                leaving: at(6),
            },
            Hold {
                who: 0,
                asked: at(0),
                entered: at(6),
                leaving: at(7),
            },
        ];
        let counts = Counts {
            calls: 20,
            commands: 16,
            reads: 12,
            cpu_s: 0.0001,
        };
        let hot = summarize(&log, 2, 1.0, Some(counts), Failures::default());
        assert_eq!(hot.acquisitions_per_s, 4.0);
        assert_eq!(hot.self_reacquire, 0.25);
        assert_eq!(hot.redis_calls_per_acquisition, 5.0);
        assert_eq!(hot.commands_per_acquisition, 4.0);
        assert_eq!(hot.round_trips_per_acquisition, 3.0);
        assert!((hot.redis_cpu_us_per_acquisition - 25.0).abs() < 1e-9);
        assert_eq!(hot.max_wait_ms, 6.0);
        // Gaps: 2 ms (0 -> 1) and 0 ms (1 -> 0); the self re-acquisition is not a hand-off.
        assert_eq!(hot.handoff_p99_us, 2000.0);
        assert!((hot.jain - 0.8).abs() < 1e-9);
    }
}
