//! S8, multi-lock cost per name: one task takes N = 2, 4 and 8 free names together with
//! `locker.lock_all(names)` and gives them back (`release()`), against the same N names
//! as plain locks taken one by one in key order (`locker.lock(name)`, each awaited before
//! the next, as two such holders must to avoid deadlock) and given back together. Cycle
//! p50, cycles/s, Redis calls (inner script calls included), Redis execution time and
//! Redis CPU per cycle (INFO deltas), and each per name.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lock_core::Locker;
use serde::Serialize;

use super::{interleaved, Failures, Settings};
use crate::probe::Probe;
use crate::stats::{paired, Samples, Spread};

/// How many names one cycle takes.
pub const SIZES: [usize; 3] = [2, 4, 8];
const TTL: Duration = Duration::from_secs(5);

/// How the names are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Way {
    /// `lock_all(names)`.
    Together,
    /// `lock(name)` after `lock(name)`, in key order.
    InOrder,
}

impl Way {
    /// The commands other than scripts that a cycle sends itself (see `Delta::exec_us_with`):
    /// the plain locks' `SET`; `lock_all` sends only scripts.
    fn top_level(self) -> &'static [&'static str] {
        match self {
            Way::Together => &[],
            Way::InOrder => &["set"],
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Way::Together => "lock-core lock_all(N names)",
            Way::InOrder => "lock-core Locker, N plain locks in key order",
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Run {
    cycles_per_s: f64,
    p50_us: f64,
    calls: f64,
    exec_us: f64,
    cpu_us: f64,
    failures: Failures,
}

async fn one_cycle(locker: &Locker, way: Way, names: &[String]) -> Result<(), String> {
    match way {
        Way::Together => {
            let lease = locker
                .lock_all(names.iter().cloned())
                .ttl(TTL)
                .await
                .map_err(|err| err.to_string())?;
            lease
                .release()
                .await
                .map_err(|err| format!("release failed: {err}"))?;
        }
        Way::InOrder => {
            let mut leases = Vec::with_capacity(names.len());
            for name in names {
                match locker.lock(name.as_str()).ttl(TTL).await {
                    Ok(lease) => leases.push(lease),
                    Err(err) => {
                        join_all(leases.into_iter().map(|l| l.release())).await;
                        return Err(err.to_string());
                    }
                }
            }
            for released in join_all(leases.into_iter().map(|l| l.release())).await {
                released.map_err(|err| format!("release failed: {err}"))?;
            }
        }
    }
    Ok(())
}

async fn measure(locker: &Locker, way: Way, n: usize, run_for: Duration, probe: &Probe) -> Run {
    let mut failures = Failures::default();
    // Sorted: the key order lock_all uses too (one prefix, so the names' order).
    let mut names: Vec<String> = (0..n).map(|i| format!("s8-{n}-{i}")).collect();
    names.sort();
    if let Err(err) = one_cycle(locker, way, &names).await {
        failures.record(format!("warm-up: {err}"));
    }
    let mut samples = Samples::with_capacity(50_000);
    let before = probe.snapshot().await.ok();
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < run_for {
        let t = Instant::now();
        if let Err(err) = one_cycle(locker, way, &names).await {
            failures.record(err);
        }
        samples.push(t.elapsed().as_nanos() as u64);
        cycles += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let delta = super::calls_since(probe, before, &format!("{} N={n}", way.label())).await;
    let per = |x: f64| x / cycles.max(1) as f64;
    Run {
        cycles_per_s: cycles as f64 / elapsed,
        p50_us: samples.quantile_us(0.50),
        calls: delta.as_ref().map_or(f64::NAN, |d| per(d.calls as f64)),
        exec_us: delta
            .as_ref()
            .map_or(f64::NAN, |d| per(d.exec_us_with(way.top_level()) as f64)),
        cpu_us: delta.as_ref().map_or(f64::NAN, |d| per(d.cpu_s * 1e6)),
        failures,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub way: Way,
    pub names: usize,
    pub cycles_per_s: Spread,
    pub p50_us: Spread,
    pub p50_us_per_name: Spread,
    /// p50 over the N plain locks' in the same repetition.
    pub p50_vs_in_order: Spread,
    pub redis_calls_per_cycle: Spread,
    pub redis_calls_per_name: Spread,
    /// Redis's execution time (INFO commandstats' usec of the commands sent, a script's
    /// inner calls inside its own) per cycle.
    pub redis_exec_us_per_cycle: Spread,
    pub redis_cpu_us_per_cycle: Spread,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub rows: Vec<Row>,
}

/// Every size in [`SIZES`], both ways, on one locker; repetitions interleaved.
pub async fn run(locker: &Locker, settings: &Settings, probe: &Probe) -> Table {
    let cases: Vec<(usize, Way)> = SIZES
        .iter()
        .flat_map(|&n| [(n, Way::Together), (n, Way::InOrder)])
        .collect();
    let runs = interleaved(cases.len(), settings.reps, async |i| {
        let (n, way) = cases[i];
        measure(locker, way, n, settings.run_for, probe).await
    })
    .await;
    let in_order = |n: usize| {
        cases
            .iter()
            .position(|&case| case == (n, Way::InOrder))
            .map(|i| &runs[i])
    };
    let rows = cases
        .iter()
        .zip(&runs)
        .map(|(&(n, way), runs)| {
            let failures = Failures::of_runs(runs.iter().map(|r| &r.failures));
            let per_name = |x: f64| x / n as f64;
            Row {
                contender: way.label().to_owned(),
                way,
                names: n,
                cycles_per_s: Spread::pick(runs, |r| r.cycles_per_s),
                p50_us: Spread::pick(runs, |r| r.p50_us),
                p50_us_per_name: Spread::pick(runs, |r| per_name(r.p50_us)),
                p50_vs_in_order: in_order(n)
                    .map_or(Spread::of([]), |floor| paired(runs, floor, |r| r.p50_us)),
                redis_calls_per_cycle: Spread::pick(runs, |r| r.calls),
                redis_calls_per_name: Spread::pick(runs, |r| per_name(r.calls)),
                redis_exec_us_per_cycle: Spread::pick(runs, |r| r.exec_us),
                redis_cpu_us_per_cycle: Spread::pick(runs, |r| r.cpu_us),
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
            "| contender | N | cycles/s | cycle p50 µs | p50 µs per name | p50 vs N plain locks | Redis calls/cycle | Redis calls per name | Redis exec µs/cycle | Redis CPU µs/cycle |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                row.names,
                row.cycles_per_s.show(0),
                row.p50_us.show(1),
                row.p50_us_per_name.show(1),
                row.p50_vs_in_order.show_ratio(),
                row.redis_calls_per_cycle.show(2),
                row.redis_calls_per_name.show(2),
                row.redis_exec_us_per_cycle.show(1),
                row.redis_cpu_us_per_cycle.show(1),
            ));
        }
        out
    }

    /// The row of `way` with `n` names.
    pub fn row(&self, way: Way, n: usize) -> Option<&Row> {
        self.rows.iter().find(|r| r.way == way && r.names == n)
    }
}
