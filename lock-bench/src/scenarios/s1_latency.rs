//! S1, uncontended latency: one task takes and gives back one name in a loop, with an empty
//! critical section. Percentiles of the lock + release cycle, and cycles per second.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::{sliced, Failures, Settings};
use crate::contenders::{Any, Contender as _, Spec};
use crate::stats::{paired, Samples, Spread};

pub const SPEC: Spec = Spec {
    ttl: Duration::from_secs(10),
    wait: Duration::ZERO,
    watch_lost: false,
};

/// One run of one contender.
#[derive(Debug, Clone)]
pub struct Latency {
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub cycles_per_s: f64,
    /// CPU time of this whole process per cycle: the library's own cost, whatever the
    /// network's latency.
    pub client_cpu_us_per_cycle: f64,
    pub failures: Failures,
}

/// What slices of one repetition of one contender added up to.
#[derive(Debug, Default)]
pub struct Acc {
    samples: Samples,
    elapsed: Duration,
    client_cpu_s: Option<f64>,
    warmed_up: bool,
    failures: Failures,
}

/// Cycles on `name` for `run_for`, added to `acc` (a warm-up first, once per accumulator).
pub async fn slice(contender: &Any, name: &str, run_for: Duration, acc: &mut Acc) {
    if !acc.warmed_up {
        acc.warmed_up = true;
        if let Err(err) = contender.warm_up().await {
            acc.failures.record(format!("warm-up: {err}"));
        }
    }
    let cpu_before = crate::cpu::process_cpu_s();
    if let Any::Blocking(blocking) = contender {
        // The blocking API's loop runs on a plain thread, outside this runtime.
        let loops = blocking
            .loops(vec![name.to_owned()], SPEC, run_for, true)
            .await;
        for sample in loops.samples {
            acc.samples.push(sample);
        }
        acc.elapsed += loops.elapsed;
        acc.failures.merge(loops.failures);
        if let (Some(before), Some(after)) = (cpu_before, crate::cpu::process_cpu_s()) {
            *acc.client_cpu_s.get_or_insert(0.0) += after - before;
        }
        return;
    }
    let started = Instant::now();
    while started.elapsed() < run_for {
        let t0 = Instant::now();
        match contender.locked(name, SPEC, std::future::ready(())).await {
            Ok(_) => acc.samples.push(t0.elapsed().as_nanos() as u64),
            Err(err) => acc.failures.record(err),
        }
    }
    acc.elapsed += started.elapsed();
    if let (Some(before), Some(after)) = (cpu_before, crate::cpu::process_cpu_s()) {
        *acc.client_cpu_s.get_or_insert(0.0) += after - before;
    }
}

impl Acc {
    pub fn latency(mut self) -> Latency {
        Latency {
            p50_us: self.samples.quantile_us(0.50),
            p90_us: self.samples.quantile_us(0.90),
            p99_us: self.samples.quantile_us(0.99),
            p999_us: self.samples.quantile_us(0.999),
            cycles_per_s: self.samples.len() as f64 / self.elapsed.as_secs_f64().max(1e-9),
            client_cpu_us_per_cycle: self
                .client_cpu_s
                .map_or(f64::NAN, |s| s * 1e6 / self.samples.len().max(1) as f64),
            failures: self.failures,
        }
    }
}

/// One repetition per accumulator, slices interleaved with the other contenders'.
pub async fn measure_all(
    contenders: &[&Any],
    name: &str,
    settings: &Settings,
) -> Vec<Vec<Latency>> {
    sliced(
        contenders.len(),
        settings.reps,
        settings.run_for,
        async |i, run_for, acc: &mut Acc| slice(contenders[i], name, run_for, acc).await,
    )
    .await
    .into_iter()
    .map(|runs| runs.into_iter().map(Acc::latency).collect())
    .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub p50_us: Spread,
    pub p90_us: Spread,
    pub p99_us: Spread,
    pub p999_us: Spread,
    pub cycles_per_s: Spread,
    pub client_cpu_us_per_cycle: Spread,
    /// p50 over the floor's (the first row) p50 of the same repetition.
    pub p50_vs_raw: Spread,
    pub cycles_vs_raw: Spread,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub rows: Vec<Row>,
}

/// S1 over `contenders`; the first is the floor the ratios refer to.
pub async fn run(contenders: &[Any], settings: &Settings) -> Table {
    let refs: Vec<&Any> = contenders.iter().collect();
    let runs = measure_all(&refs, "s1", settings).await;
    Table {
        rows: rows(contenders, &runs),
    }
}

pub fn rows(contenders: &[Any], runs: &[Vec<Latency>]) -> Vec<Row> {
    let floor = runs.first().map(Vec::as_slice).unwrap_or_default();
    contenders
        .iter()
        .zip(runs)
        .map(|(contender, runs)| {
            let mut failures = Failures::default();
            for run in runs {
                failures.merge(run.failures.clone());
            }
            Row {
                contender: contender.label().to_owned(),
                p50_us: Spread::pick(runs, |r| r.p50_us),
                p90_us: Spread::pick(runs, |r| r.p90_us),
                p99_us: Spread::pick(runs, |r| r.p99_us),
                p999_us: Spread::pick(runs, |r| r.p999_us),
                cycles_per_s: Spread::pick(runs, |r| r.cycles_per_s),
                client_cpu_us_per_cycle: Spread::pick(runs, |r| r.client_cpu_us_per_cycle),
                p50_vs_raw: paired(runs, floor, |r| r.p50_us),
                cycles_vs_raw: paired(runs, floor, |r| r.cycles_per_s),
                failures: failures.count,
                first_error: failures.first,
            }
        })
        .collect()
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| contender | p50 µs | p90 µs | p99 µs | p99.9 µs | cycles/s | p50 vs raw | cycles/s vs raw | client CPU µs/cycle |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                row.p50_us.show(1),
                row.p90_us.show(1),
                row.p99_us.show(1),
                row.p999_us.show(1),
                row.cycles_per_s.show(0),
                row.p50_vs_raw.show_ratio(),
                row.cycles_vs_raw.show_ratio(),
                row.client_cpu_us_per_cycle.show(1),
            ));
        }
        out
    }
}
