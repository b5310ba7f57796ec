//! S10, guarded writes: what `lock_core::fenced::RedisStore` costs per write beside the same
//! write sent plainly with redis-rs (the floor). One task writes one key in a loop; the
//! guarded writes carry a lease's fencing token, either the same lease's again (the guard is
//! read, not written) or a new holder's each time (the guard is raised too). Redis calls per
//! write count a script's inner calls, as INFO commandstats does.

use std::time::{Duration, Instant};

use lock_core::fenced::{Fence, RedisStore};
use serde::Serialize;

use super::{calls_since, sliced, Failures, Settings};
use crate::probe::Probe;
use crate::stats::{paired, Samples, Spread};

/// The writes compared: label, and whether it is a hash write.
const WRITES: [(&str, Kind); 6] = [
    ("redis-rs SET (raw)", Kind::RawSet),
    (
        "RedisStore::set, same lease",
        Kind::GuardedSet { new_holder: false },
    ),
    (
        "RedisStore::set, new holder each write",
        Kind::GuardedSet { new_holder: true },
    ),
    ("redis-rs HSET, 2 fields (raw)", Kind::RawHset),
    (
        "RedisStore::hset, 2 fields, same lease",
        Kind::GuardedHset { new_holder: false },
    ),
    (
        "RedisStore::hset, 2 fields, new holder each write",
        Kind::GuardedHset { new_holder: true },
    ),
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    RawSet,
    GuardedSet { new_holder: bool },
    RawHset,
    GuardedHset { new_holder: bool },
}

impl Kind {
    /// The raw write this one is compared with (its index in [`WRITES`]).
    fn floor(self) -> usize {
        match self {
            Kind::RawSet | Kind::GuardedSet { .. } => 0,
            Kind::RawHset | Kind::GuardedHset { .. } => 3,
        }
    }
}

/// One write kind's figures, `median (min–max)` over the repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub p50_us: Spread,
    pub writes_per_s: Spread,
    /// Redis calls per write, a script's inner calls included.
    pub redis_calls_per_write: Spread,
    /// Round trips per write: Redis's read events on client sockets (`total_reads_processed`).
    pub round_trips_per_write: Spread,
    pub p50_vs_raw: Spread,
    pub failures: u64,
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub rows: Vec<Row>,
}

#[derive(Debug, Default)]
pub struct Acc {
    samples: Samples,
    elapsed: Duration,
    calls: u64,
    reads: u64,
    failures: Failures,
}

struct Run {
    p50_us: f64,
    writes_per_s: f64,
    calls_per_write: f64,
    round_trips_per_write: f64,
}

impl Acc {
    fn run(mut self) -> (Run, Failures) {
        let n = self.samples.len().max(1) as f64;
        (
            Run {
                p50_us: self.samples.quantile_us(0.5),
                writes_per_s: self.samples.len() as f64 / self.elapsed.as_secs_f64().max(1e-9),
                calls_per_write: self.calls as f64 / n,
                round_trips_per_write: self.reads as f64 / n,
            },
            self.failures,
        )
    }
}

pub async fn run(url: &str, settings: &Settings, probe: &Probe) -> Result<Table, String> {
    let client = redis::Client::open(url).map_err(|err| format!("bad Redis URL: {err}"))?;
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| format!("cannot connect: {err}"))?;
    let store = RedisStore::from_connection(conn.clone());
    let run_id = std::process::id();
    let lease = Fence::new(format!("bench:{run_id}"), 1);
    let mut next_token = 2u64;
    let runs = sliced(
        WRITES.len(),
        settings.reps,
        settings.run_for,
        async |i, run_for, acc: &mut Acc| {
            let (_, kind) = WRITES[i];
            let key = format!("bench:{run_id}:fenced:{i}");
            let before = probe.snapshot().await.ok();
            let started = Instant::now();
            let mut conn = conn.clone();
            while started.elapsed() < run_for {
                let t0 = Instant::now();
                let fence = match kind {
                    Kind::GuardedSet { new_holder: true }
                    | Kind::GuardedHset { new_holder: true } => {
                        next_token += 1;
                        Fence::new(lease.lock(), next_token)
                    }
                    _ => lease.clone(),
                };
                let written = match kind {
                    Kind::RawSet => redis::cmd("SET")
                        .arg(&key)
                        .arg("41")
                        .query_async::<()>(&mut conn)
                        .await
                        .map_err(|err| err.to_string()),
                    Kind::RawHset => redis::cmd("HSET")
                        .arg(&key)
                        .arg("stock")
                        .arg("41")
                        .arg("price")
                        .arg("950")
                        .query_async::<()>(&mut conn)
                        .await
                        .map_err(|err| err.to_string()),
                    Kind::GuardedSet { .. } => store
                        .set(fence, &key, "41")
                        .await
                        .map_err(|err| err.to_string()),
                    Kind::GuardedHset { .. } => store
                        .hset(fence, &key, &[("stock", "41"), ("price", "950")])
                        .await
                        .map_err(|err| err.to_string()),
                };
                match written {
                    Ok(()) => acc.samples.push(t0.elapsed().as_nanos() as u64),
                    Err(err) => acc.failures.record(err),
                }
            }
            acc.elapsed += started.elapsed();
            if let Some(delta) = calls_since(probe, before, WRITES[i].0).await {
                // The probe's own INFO: one call, one read.
                acc.calls += delta.calls.saturating_sub(1);
                acc.reads += delta.reads.saturating_sub(1);
            }
        },
    )
    .await;
    // Clean up this run's keys and guards.
    let mut conn = conn.clone();
    for i in 0..WRITES.len() {
        let key = format!("bench:{run_id}:fenced:{i}");
        let _ = redis::cmd("DEL")
            .arg(&key)
            .arg(RedisStore::guard_key(&key))
            .query_async::<()>(&mut conn)
            .await;
    }

    let figures: Vec<(Vec<Run>, Failures)> = runs
        .into_iter()
        .map(|accs| {
            let mut failures = Failures::default();
            let runs = accs
                .into_iter()
                .map(|acc| {
                    let (run, f) = acc.run();
                    failures.merge(f);
                    run
                })
                .collect();
            (runs, failures)
        })
        .collect();
    let rows = WRITES
        .iter()
        .enumerate()
        .map(|(i, (label, kind))| {
            let (runs, failures) = &figures[i];
            let floor = &figures[kind.floor()].0;
            Row {
                contender: (*label).to_owned(),
                p50_us: Spread::pick(runs, |r| r.p50_us),
                writes_per_s: Spread::pick(runs, |r| r.writes_per_s),
                redis_calls_per_write: Spread::pick(runs, |r| r.calls_per_write),
                round_trips_per_write: Spread::pick(runs, |r| r.round_trips_per_write),
                p50_vs_raw: paired(runs, floor, |r| r.p50_us),
                failures: failures.count,
                first_error: failures.first.clone(),
            }
        })
        .collect();
    Ok(Table { rows })
}

pub fn title() -> String {
    "S10. Guarded writes (`lock_core::fenced::RedisStore`) beside plain writes: one task, one key"
        .into()
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| write | p50 µs | writes/s | Redis calls/write | round trips/write | p50 vs raw |\n\
             |---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                row.p50_us.show(1),
                row.writes_per_s.show(0),
                row.redis_calls_per_write.show(2),
                row.round_trips_per_write.show(2),
                row.p50_vs_raw.show_ratio(),
            ));
        }
        out
    }
}
