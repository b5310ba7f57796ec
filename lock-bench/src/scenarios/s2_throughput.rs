//! S2, uncontended throughput: many tasks of one process (one contender instance, shared),
//! each taking and giving back its own name in a loop. Cycles per second, and what Redis
//! did over the window: commands per second and calls per cycle (INFO commandstats, which
//! also counts the calls scripts make).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{sliced, Failures, Settings};
use crate::contenders::{Any, Contender as _};
use crate::probe::Probe;
use crate::scenarios::s1_latency::SPEC;
use crate::stats::{paired, Spread};

/// One run of one contender.
#[derive(Debug, Clone)]
pub struct Throughput {
    pub cycles_per_s: f64,
    pub redis_commands_per_s: f64,
    pub redis_calls_per_cycle: f64,
    /// CPU time of this process and of Redis per cycle: on a machine where both share the
    /// cores, their sum bounds the throughput.
    pub client_cpu_us_per_cycle: f64,
    pub redis_cpu_us_per_cycle: f64,
    /// Redis's own execution time per cycle (commandstats `usec` of the commands sent).
    pub redis_exec_us_per_cycle: f64,
    pub failures: Failures,
}

/// What slices of one repetition of one contender added up to.
#[derive(Debug, Default)]
pub struct Acc {
    cycles: u64,
    elapsed: Duration,
    commands: Option<u64>,
    calls: Option<u64>,
    client_cpu_s: Option<f64>,
    redis_cpu_s: Option<f64>,
    redis_exec_us: Option<f64>,
    warmed_up: bool,
    failures: Failures,
}

/// `tasks` loops sharing `contender` for `run_for`, added to `acc`; Redis counters from
/// `probe` when given.
pub async fn slice(
    contender: &Arc<Any>,
    tasks: usize,
    run_for: Duration,
    probe: Option<&Probe>,
    acc: &mut Acc,
) {
    if !acc.warmed_up {
        acc.warmed_up = true;
        if let Err(err) = contender.warm_up().await {
            acc.failures.record(format!("warm-up: {err}"));
        }
    }
    let before = match probe {
        Some(probe) => probe.snapshot().await.ok(),
        None => None,
    };
    let cycles = Arc::new(AtomicU64::new(0));
    let cpu_before = crate::cpu::process_cpu_s();
    let started = Instant::now();
    if let Any::Blocking(blocking) = &**contender {
        // The blocking API: one plain thread per task, outside this runtime, each on its
        // own name as the tasks are.
        let names = (0..tasks).map(|task| format!("s2:{task}")).collect();
        let loops = blocking.loops(names, SPEC, run_for, false).await;
        cycles.fetch_add(loops.cycles, Ordering::Relaxed);
        acc.failures.merge(loops.failures);
    } else {
        run_tasks(contender, tasks, run_for, started, &cycles, acc).await;
    }
    acc.elapsed += started.elapsed();
    acc.cycles += cycles.load(Ordering::Relaxed);
    if let (Some(before), Some(after)) = (cpu_before, crate::cpu::process_cpu_s()) {
        *acc.client_cpu_s.get_or_insert(0.0) += after - before;
    }
    if let (Some(probe), Some(before)) = (probe, before) {
        if let Ok(after) = probe.snapshot().await {
            let delta = after.delta_since(&before);
            *acc.commands.get_or_insert(0) += delta.commands;
            *acc.calls.get_or_insert(0) += delta.calls;
            *acc.redis_cpu_s.get_or_insert(0.0) += delta.cpu_s;
            *acc.redis_exec_us.get_or_insert(0.0) += delta.exec_us;
        }
    }
}

/// `tasks` tokio tasks cycling on their own names until `run_for` has passed.
async fn run_tasks(
    contender: &Arc<Any>,
    tasks: usize,
    run_for: Duration,
    started: Instant,
    cycles: &Arc<AtomicU64>,
    acc: &mut Acc,
) {
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let contender = contender.clone();
        let cycles = Arc::clone(cycles);
        handles.push(tokio::spawn(async move {
            let name = format!("s2:{task}");
            let mut done = 0;
            let mut failures = Failures::default();
            while started.elapsed() < run_for {
                match contender.locked(&name, SPEC, std::future::ready(())).await {
                    Ok(_) => done += 1,
                    Err(err) => failures.record(err),
                }
            }
            cycles.fetch_add(done, Ordering::Relaxed);
            failures
        }));
    }
    for handle in handles {
        match handle.await {
            Ok(task_failures) => acc.failures.merge(task_failures),
            Err(err) => acc.failures.record(format!("task failed: {err}")),
        }
    }
}

impl Acc {
    pub fn throughput(self) -> Throughput {
        let seconds = self.elapsed.as_secs_f64().max(1e-9);
        let per_cycle =
            |s: Option<f64>| s.map_or(f64::NAN, |s| s * 1e6 / self.cycles.max(1) as f64);
        Throughput {
            cycles_per_s: self.cycles as f64 / seconds,
            redis_commands_per_s: self.commands.map_or(f64::NAN, |c| c as f64 / seconds),
            redis_calls_per_cycle: self
                .calls
                .map_or(f64::NAN, |c| c as f64 / self.cycles.max(1) as f64),
            client_cpu_us_per_cycle: per_cycle(self.client_cpu_s),
            redis_cpu_us_per_cycle: per_cycle(self.redis_cpu_s),
            redis_exec_us_per_cycle: self
                .redis_exec_us
                .map_or(f64::NAN, |us| us / self.cycles.max(1) as f64),
            failures: self.failures,
        }
    }
}

/// One repetition per accumulator, slices interleaved with the other contenders'.
pub async fn measure_all(
    contenders: &[Arc<Any>],
    settings: &Settings,
    probe: Option<&Probe>,
) -> Vec<Vec<Throughput>> {
    sliced(
        contenders.len(),
        settings.reps,
        settings.run_for,
        async |i, run_for, acc: &mut Acc| {
            slice(&contenders[i], settings.tasks, run_for, probe, acc).await
        },
    )
    .await
    .into_iter()
    .map(|runs| runs.into_iter().map(Acc::throughput).collect())
    .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub tasks: usize,
    pub cycles_per_s: Spread,
    pub redis_commands_per_s: Spread,
    pub redis_calls_per_cycle: Spread,
    pub client_cpu_us_per_cycle: Spread,
    pub redis_cpu_us_per_cycle: Spread,
    pub redis_exec_us_per_cycle: Spread,
    /// Cycles/s over the floor's (the first row) in the same repetition.
    pub vs_raw: Spread,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub tasks: usize,
    pub rows: Vec<Row>,
}

/// S2 over `contenders`; the first is the floor the ratios refer to.
pub async fn run(contenders: &[Arc<Any>], settings: &Settings, probe: &Probe) -> Table {
    let runs = measure_all(contenders, settings, Some(probe)).await;
    let floor = runs.first().map(Vec::as_slice).unwrap_or_default();
    let rows: Vec<Row> = contenders
        .iter()
        .zip(&runs)
        .map(|(contender, runs)| {
            let mut failures = Failures::default();
            for run in runs {
                failures.merge(run.failures.clone());
            }
            Row {
                contender: contender.label().to_owned(),
                tasks: settings.tasks,
                cycles_per_s: Spread::pick(runs, |r| r.cycles_per_s),
                redis_commands_per_s: Spread::pick(runs, |r| r.redis_commands_per_s),
                redis_calls_per_cycle: Spread::pick(runs, |r| r.redis_calls_per_cycle),
                client_cpu_us_per_cycle: Spread::pick(runs, |r| r.client_cpu_us_per_cycle),
                redis_cpu_us_per_cycle: Spread::pick(runs, |r| r.redis_cpu_us_per_cycle),
                redis_exec_us_per_cycle: Spread::pick(runs, |r| r.redis_exec_us_per_cycle),
                vs_raw: paired(runs, floor, |r| r.cycles_per_s),
                failures: failures.count,
                first_error: failures.first,
            }
        })
        .collect();
    Table {
        tasks: settings.tasks,
        rows,
    }
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| contender | cycles/s | vs raw | Redis commands/s | Redis calls/cycle | client CPU µs/cycle | Redis CPU µs/cycle | Redis exec µs/cycle |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                row.cycles_per_s.show(0),
                row.vs_raw.show_ratio(),
                row.redis_commands_per_s.show(0),
                row.redis_calls_per_cycle.show(2),
                row.client_cpu_us_per_cycle.show(1),
                row.redis_cpu_us_per_cycle.show(1),
                row.redis_exec_us_per_cycle.show(1),
            ));
        }
        out
    }
}
