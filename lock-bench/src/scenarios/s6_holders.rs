//! S6, cost with many holders: one task takes and gives back a permit of a semaphore of
//! which `n - 1` other permits are held (1, 100 and 10,000 holders in all). Latency p50,
//! Redis calls and Redis CPU per acquire + release: flat within 1.5x across `n` when nothing
//! sums, sorts or walks the holders.

use std::time::{Duration, Instant};

use lock_core::Locker;
use serde::Serialize;

use super::Failures;
use crate::probe::Probe;
use crate::stats::{Samples, Spread};

/// Holders of the semaphore while a cycle runs (the cycle's own permit included).
pub const HOLDERS: [usize; 3] = [1, 100, 10_000];

/// The semaphore's permits: more than the most holders, so that every cycle is admitted.
const CAPACITY: u64 = 20_000;

/// How long the background permits are held: longer than any run.
const BACKGROUND_TTL: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub holders: usize,
    pub cycles_per_s: Spread,
    pub p50_us: Spread,
    pub redis_calls_per_cycle: Spread,
    pub redis_cpu_us_per_cycle: Spread,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub label: String,
    pub rows: Vec<Row>,
}

struct Run {
    cycles_per_s: f64,
    p50_us: f64,
    calls: f64,
    cpu_us: f64,
}

/// Fills `name` up to `holders - 1` permits held by others, `width` acquisitions at a time.
async fn fill(
    locker: &Locker,
    name: &str,
    holders: usize,
) -> Result<Vec<lock_core::Permit>, String> {
    let semaphore = locker.semaphore(name, CAPACITY);
    let mut held = Vec::with_capacity(holders);
    while held.len() + 1 < holders {
        let width = (holders - 1 - held.len()).min(64);
        let batch = futures_util::future::join_all(
            (0..width).map(|_| semaphore.try_acquire(BACKGROUND_TTL)),
        )
        .await;
        for permit in batch {
            held.push(permit.map_err(|err| format!("filling the semaphore: {err}"))?);
        }
    }
    Ok(held)
}

async fn one_run(
    locker: &Locker,
    name: &str,
    run_for: Duration,
    probe: &Probe,
    failures: &mut Failures,
) -> Run {
    let semaphore = locker.semaphore(name, CAPACITY);
    // Warm: scripts loaded, connection up.
    if let Ok(permit) = semaphore.try_acquire(Duration::from_secs(5)).await {
        let _ = permit.release().await;
    }
    let mut samples = Samples::with_capacity(100_000);
    let before = probe.snapshot().await.ok();
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < run_for {
        let t = Instant::now();
        match semaphore.try_acquire(Duration::from_secs(5)).await {
            Ok(permit) => {
                if let Err(err) = permit.release().await {
                    failures.record(format!("release failed: {err}"));
                }
            }
            Err(err) => failures.record(err.to_string()),
        }
        samples.push(t.elapsed().as_nanos() as u64);
        cycles += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let delta = super::calls_since(probe, before, name).await;
    let per = |x: f64| x / cycles.max(1) as f64;
    Run {
        cycles_per_s: cycles as f64 / elapsed,
        p50_us: samples.quantile_us(0.50),
        calls: delta.as_ref().map_or(f64::NAN, |d| per(d.calls as f64)),
        cpu_us: delta.as_ref().map_or(f64::NAN, |d| per(d.cpu_s * 1e6)),
    }
}

/// Every size in [`HOLDERS`], `reps` runs of `run_for` each (sizes interleaved).
pub async fn run(
    locker: &Locker,
    label: &str,
    run_for: Duration,
    reps: usize,
    probe: &Probe,
) -> Table {
    let mut runs: Vec<Vec<Run>> = HOLDERS.iter().map(|_| Vec::new()).collect();
    let mut failures: Vec<Failures> = HOLDERS.iter().map(|_| Failures::default()).collect();
    let mut background = Vec::new();
    for (i, &holders) in HOLDERS.iter().enumerate() {
        let name = format!("s6-holders-{holders}");
        match fill(locker, &name, holders).await {
            Ok(held) => background.push(held),
            Err(err) => failures[i].record(err),
        }
    }
    for _ in 0..reps {
        for (i, &holders) in HOLDERS.iter().enumerate() {
            let name = format!("s6-holders-{holders}");
            let run = one_run(locker, &name, run_for, probe, &mut failures[i]).await;
            runs[i].push(run);
        }
    }
    for held in background {
        for permit in held {
            let _ = permit.release().await;
        }
    }
    let rows = HOLDERS
        .iter()
        .zip(runs.iter().zip(failures))
        .map(|(&holders, (runs, failures))| Row {
            holders,
            cycles_per_s: Spread::pick(runs, |r| r.cycles_per_s),
            p50_us: Spread::pick(runs, |r| r.p50_us),
            redis_calls_per_cycle: Spread::pick(runs, |r| r.calls),
            redis_cpu_us_per_cycle: Spread::pick(runs, |r| r.cpu_us),
            failures: failures.count,
            first_error: failures.first,
        })
        .collect();
    Table {
        label: label.to_owned(),
        rows,
    }
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| contender | holders | cycles/s | p50 µs | Redis calls/cycle | Redis CPU µs/cycle |\n\
             |---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                self.label,
                row.holders,
                row.cycles_per_s.show(0),
                row.p50_us.show(1),
                row.redis_calls_per_cycle.show(2),
                row.redis_cpu_us_per_cycle.show(1),
            ));
        }
        out
    }

    /// The largest over the smallest median of `figure` across the sizes.
    pub fn spread_of(&self, figure: impl Fn(&Row) -> f64) -> f64 {
        let values: Vec<f64> = self
            .rows
            .iter()
            .map(figure)
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        if values.len() < self.rows.len() || values.is_empty() {
            return f64::NAN;
        }
        let max = values.iter().cloned().fold(f64::MIN, f64::max);
        let min = values.iter().cloned().fold(f64::MAX, f64::min);
        max / min
    }
}
