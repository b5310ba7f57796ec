//! S6, semaphore hand-off: 64 tasks loop on ONE semaphore of 8 permits, each holding its
//! permit about 1 ms. Acquisitions per second, how busy the permits were (occupancy), the
//! hand-off gap (from a holder starting its release to the next waiter entering with the
//! freed permit), the most holders seen at once (never above the permits), Jain's fairness
//! index over the tasks, Redis calls and round trips per acquisition (INFO deltas, as in
//! S3), and the longest wait. Beside it, for scale, the same 64 tasks on 8 plain locks
//! (task `i` on name `i mod 8`): the same capacity, sharded by hand.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{interleaved, Failures, Settings};
use crate::contenders::{Any, Contender as _, Spec};
use crate::probe::Probe;
use crate::stats::{jain, most_at_once, Samples, Spread};

const SPEC: Spec = Spec {
    ttl: Duration::from_secs(5),
    wait: Duration::from_secs(10),
    watch_lost: false,
};
const HOLD: Duration = Duration::from_millis(1);

/// Tasks racing, and the permits they share.
pub const TASKS: usize = 64;
pub const PERMITS: usize = 8;

/// One group of tasks: `members[i]` is task `i`'s contender (one shared instance, or one
/// each); task `i` takes name `names[i % names.len()]`, whose capacity is `capacity`.
pub struct Group {
    pub label: String,
    pub members: Vec<Arc<Any>>,
    pub names: Vec<String>,
    /// Holders one name admits at once (8 for the semaphore, 1 for a lock).
    pub capacity: usize,
}

/// S6 figures of one run.
#[derive(Debug, Clone)]
pub struct Permits {
    pub acquisitions_per_s: f64,
    /// Time held over the time available (run time x total capacity).
    pub occupancy: f64,
    pub handoff_p50_us: f64,
    pub handoff_p99_us: f64,
    /// The most holds of one name in progress at once.
    pub peak_holders: usize,
    pub jain: f64,
    pub redis_calls_per_acquisition: f64,
    pub round_trips_per_acquisition: f64,
    /// Redis's own execution time per acquisition (commandstats `usec`).
    pub redis_exec_us_per_acquisition: f64,
    pub max_wait_ms: f64,
    pub failures: Failures,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    who: usize,
    name: usize,
    asked: Instant,
    entered: Instant,
    leaving: Instant,
}

pub async fn measure(group: &Group, run_for: Duration, probe: &Probe) -> Permits {
    let mut failures = Failures::default();
    for member in &group.members {
        if let Err(err) = member.warm_up().await {
            failures.record(format!("warm-up: {err}"));
        }
    }
    let holds = Arc::new(Mutex::new(Vec::with_capacity(50_000)));
    let before = probe.snapshot().await.ok();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(group.members.len());
    for (who, contender) in group.members.iter().cloned().enumerate() {
        let holds = holds.clone();
        let name_index = who % group.names.len().max(1);
        let name = group.names.get(name_index).cloned().unwrap_or_default();
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
                            name: name_index,
                            asked,
                            entered,
                            leaving,
                        });
                };
                if let Err(err) = contender.locked(&name, SPEC, body).await {
                    failures.record(err);
                }
            }
            failures
        }));
    }
    super::join_all(tasks, &mut failures).await;
    let elapsed = started.elapsed().as_secs_f64();
    let delta = super::calls_since(probe, before, &group.label).await;
    let counts = delta.map(|d| Counts {
        calls: d.calls,
        // The probe's own INFO request is one read of the window.
        reads: d.reads.saturating_sub(1),
        exec_us: d.exec_us,
    });
    let log = std::mem::take(&mut *holds.lock().unwrap_or_else(PoisonError::into_inner));
    let shape = Shape {
        tasks: group.members.len(),
        names: group.names.len(),
        capacity: group.capacity,
        elapsed,
    };
    summarize(&log, shape, counts, failures)
}

/// What the server counted over a measurement window.
#[derive(Debug, Clone, Copy)]
struct Counts {
    calls: u64,
    reads: u64,
    exec_us: f64,
}

/// The size of the race.
#[derive(Debug, Clone, Copy)]
struct Shape {
    tasks: usize,
    names: usize,
    capacity: usize,
    elapsed: f64,
}

fn summarize(log: &[Hold], shape: Shape, counts: Option<Counts>, failures: Failures) -> Permits {
    let mut per_task = vec![0u64; shape.tasks];
    let mut gaps = Samples::with_capacity(log.len());
    let mut peak_holders = 0;
    let mut held = Duration::ZERO;
    for name in 0..shape.names.max(1) {
        let mut entries: Vec<Instant> = Vec::new();
        let mut leavings: Vec<Instant> = Vec::new();
        for hold in log.iter().filter(|h| h.name == name) {
            entries.push(hold.entered);
            leavings.push(hold.leaving);
            held += hold.leaving.saturating_duration_since(hold.entered);
        }
        entries.sort_unstable();
        leavings.sort_unstable();
        // The name stays full while tasks wait: the k-th holder to leave frees the permit
        // that the (k + capacity)-th holder enters with.
        for (leaving, entered) in leavings.iter().zip(entries.iter().skip(shape.capacity)) {
            gaps.push(entered.saturating_duration_since(*leaving).as_nanos() as u64);
        }
        peak_holders = peak_holders.max(most_at_once(&entries, &leavings));
    }
    for hold in log {
        if let Some(count) = per_task.get_mut(hold.who) {
            *count += 1;
        }
    }
    let acquisitions = log.len() as u64;
    let max_wait = log
        .iter()
        .map(|hold| hold.entered.saturating_duration_since(hold.asked))
        .max()
        .unwrap_or_default();
    let available = shape.elapsed * (shape.names.max(1) * shape.capacity) as f64;
    Permits {
        acquisitions_per_s: acquisitions as f64 / shape.elapsed,
        occupancy: held.as_secs_f64() / available.max(1e-9),
        handoff_p50_us: gaps.quantile_us(0.50),
        handoff_p99_us: gaps.quantile_us(0.99),
        peak_holders,
        jain: jain(&per_task),
        redis_calls_per_acquisition: counts
            .map_or(f64::NAN, |c| c.calls as f64 / acquisitions.max(1) as f64),
        round_trips_per_acquisition: counts
            .map_or(f64::NAN, |c| c.reads as f64 / acquisitions.max(1) as f64),
        redis_exec_us_per_acquisition: counts
            .map_or(f64::NAN, |c| c.exec_us / acquisitions.max(1) as f64),
        max_wait_ms: max_wait.as_secs_f64() * 1000.0,
        failures,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub tasks: usize,
    pub capacity: usize,
    pub acquisitions_per_s: Spread,
    pub occupancy: Spread,
    pub handoff_p50_us: Spread,
    pub handoff_p99_us: Spread,
    pub peak_holders: Spread,
    pub jain: Spread,
    pub redis_calls_per_acquisition: Spread,
    pub round_trips_per_acquisition: Spread,
    pub redis_exec_us_per_acquisition: Spread,
    pub max_wait_ms: Spread,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub rows: Vec<Row>,
}

/// S6 over `groups`, interleaved repetitions.
pub async fn run(groups: &[Group], settings: &Settings, probe: &Probe) -> Table {
    let runs = interleaved(groups.len(), settings.reps, async |i| {
        measure(&groups[i], settings.run_for, probe).await
    })
    .await;
    let rows = groups
        .iter()
        .zip(&runs)
        .map(|(group, runs)| {
            let mut failures = Failures::default();
            for run in runs {
                failures.merge(run.failures.clone());
            }
            Row {
                contender: group.label.clone(),
                tasks: group.members.len(),
                capacity: group.names.len() * group.capacity,
                acquisitions_per_s: Spread::pick(runs, |r| r.acquisitions_per_s),
                occupancy: Spread::pick(runs, |r| r.occupancy),
                handoff_p50_us: Spread::pick(runs, |r| r.handoff_p50_us),
                handoff_p99_us: Spread::pick(runs, |r| r.handoff_p99_us),
                peak_holders: Spread::pick(runs, |r| r.peak_holders as f64),
                jain: Spread::pick(runs, |r| r.jain),
                redis_calls_per_acquisition: Spread::pick(runs, |r| r.redis_calls_per_acquisition),
                round_trips_per_acquisition: Spread::pick(runs, |r| r.round_trips_per_acquisition),
                redis_exec_us_per_acquisition: Spread::pick(runs, |r| {
                    r.redis_exec_us_per_acquisition
                }),
                max_wait_ms: Spread::pick(runs, |r| r.max_wait_ms),
                failures: failures.count,
                first_error: failures.first,
            }
        })
        .collect();
    Table { rows }
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| contender | tasks | permits | acquisitions/s | occupancy | hand-off p50 µs | hand-off p99 µs | peak holders per name | Jain | Redis calls/acq | round trips/acq | Redis exec µs/acq | max wait ms |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                row.tasks,
                row.capacity,
                row.acquisitions_per_s.show(0),
                row.occupancy.show(2),
                row.handoff_p50_us.show(0),
                row.handoff_p99_us.show(0),
                row.peak_holders.show(0),
                row.jain.show(3),
                row.redis_calls_per_acquisition.show(1),
                row.round_trips_per_acquisition.show(1),
                row.redis_exec_us_per_acquisition.show(1),
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
    fn handoffs_pair_each_release_with_the_entry_it_made_room_for() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let hold = |who, entered, leaving| Hold {
            who,
            name: 0,
            asked: at(0),
            entered: at(entered),
            leaving: at(leaving),
        };
        // Two permits: 0 and 1 enter at once; 2 enters when 0 leaves (+1 ms), 0 again when
        // 1 leaves (+2 ms).
        let log = [hold(0, 0, 4), hold(1, 0, 6), hold(2, 5, 9), hold(0, 8, 10)];
        let shape = Shape {
            tasks: 3,
            names: 1,
            capacity: 2,
            elapsed: 0.01,
        };
        let counts = Counts {
            calls: 20,
            reads: 8,
            exec_us: 40.0,
        };
        let s = summarize(&log, shape, Some(counts), Failures::default());
        assert_eq!(s.peak_holders, 2);
        assert_eq!(s.acquisitions_per_s, 400.0);
        // Gaps of 1 and 2 ms (nearest rank: the median of two is the upper one).
        assert_eq!(s.handoff_p50_us, 2000.0);
        assert_eq!(s.handoff_p99_us, 2000.0);
        assert_eq!(s.redis_calls_per_acquisition, 5.0);
        assert_eq!(s.round_trips_per_acquisition, 2.0);
        assert_eq!(s.redis_exec_us_per_acquisition, 10.0);
        assert_eq!(s.max_wait_ms, 8.0);
        // Held 4 + 6 + 4 + 2 ms of 2 x 10 ms.
        assert!((s.occupancy - 0.8).abs() < 1e-9, "{}", s.occupancy);
        // Counts 2, 1, 1.
        assert!((s.jain - 16.0 / 18.0).abs() < 1e-9);
        // Back to back, never three at once.
        let log = [hold(0, 0, 4), hold(1, 1, 5), hold(2, 4, 6)];
        assert_eq!(
            summarize(&log, shape, None, Failures::default()).peak_holders,
            2
        );
    }
}
