//! Renewal cost: many auto-renewed leases (10,000 by default) held on distinct names for a
//! while (10 s): script runs, Redis calls and read events per renewal tick, and the CPU
//! time of this process (from /proc) and of Redis (INFO cpu) over the window.
//!
//! The window opens one TTL after the last lease was taken, so it shows the steady state:
//! the first renewal of a fresh server also loads the renewal script, which is not what a
//! long-running service pays per tick.

use std::time::Instant;

use serde::Serialize;

use super::Settings;
use crate::contenders::{Any, Contender as _};
use crate::probe::Probe;

/// Figures of one contender.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub leases: usize,
    /// Seconds to take every lease, before the window.
    pub acquire_s: f64,
    pub window_s: f64,
    /// The lease TTL divided by three: lock-core's and the naive loop's renewal period.
    pub tick_s: f64,
    /// EVALSHA, EVAL and FCALL per tick: one per lease renewed.
    pub scripts_per_tick: f64,
    /// Every call Redis ran per tick, the calls scripts make included.
    pub redis_calls_per_tick: f64,
    /// Read events Redis processed per tick: about one per client round trip (a pipeline
    /// of thousands of commands arrives in several reads).
    pub redis_reads_per_tick: f64,
    /// CPU of this process over the window, as a share of one core.
    pub client_cpu_percent: f64,
    pub redis_cpu_percent: f64,
    pub leases_lost: usize,
    /// Calls per command over the whole window (INFO commandstats).
    pub redis_calls_by_command: Vec<(String, u64)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub leases: usize,
    pub ttl_ms: u64,
    pub hold_s: f64,
    pub rows: Vec<Row>,
}

async fn measure(contender: &Any, settings: &Settings, probe: &Probe) -> Option<Row> {
    let names: Vec<String> = (0..settings.renew_leases)
        .map(|i| format!("renew:{i}"))
        .collect();
    let tick = settings.renew_ttl / 3;
    let mut row = Row {
        contender: contender.label().to_owned(),
        leases: settings.renew_leases,
        acquire_s: f64::NAN,
        window_s: f64::NAN,
        tick_s: tick.as_secs_f64(),
        scripts_per_tick: f64::NAN,
        redis_calls_per_tick: f64::NAN,
        redis_reads_per_tick: f64::NAN,
        client_cpu_percent: f64::NAN,
        redis_cpu_percent: f64::NAN,
        leases_lost: 0,
        redis_calls_by_command: Vec::new(),
        error: None,
    };
    let started = Instant::now();
    let release = match contender.hold_renewed(names, settings.renew_ttl).await? {
        Ok(release) => release,
        Err(err) => {
            row.error = Some(err);
            return Some(row);
        }
    };
    row.acquire_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(settings.renew_ttl).await;
    let before = probe.snapshot().await;
    let cpu_before = crate::cpu::process_cpu_s();
    let window_start = Instant::now();
    tokio::time::sleep(settings.renew_hold).await;
    let window = window_start.elapsed();
    let cpu_after = crate::cpu::process_cpu_s();
    let after = probe.snapshot().await;
    match release.await {
        Ok(summary) => row.leases_lost = summary.lost,
        Err(err) => row.error = Some(err),
    }
    row.window_s = window.as_secs_f64();
    let ticks = window.as_secs_f64() / tick.as_secs_f64();
    if let (Ok(before), Ok(after)) = (before, after) {
        let delta = after.delta_since(&before);
        let scripts: u64 = delta
            .per_command
            .iter()
            .filter(|(name, _)| name.starts_with("eval") || name.starts_with("fcall"))
            .map(|(_, n)| n)
            .sum();
        row.scripts_per_tick = scripts as f64 / ticks;
        row.redis_calls_per_tick = delta.calls as f64 / ticks;
        row.redis_reads_per_tick = delta.reads as f64 / ticks;
        row.redis_cpu_percent = 100.0 * delta.cpu_s / window.as_secs_f64();
        row.redis_calls_by_command = delta.per_command;
    }
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        row.client_cpu_percent = 100.0 * (after - before) / window.as_secs_f64();
    }
    Some(row)
}

/// One run per contender that can hold renewed leases (the others are skipped).
pub async fn run(contenders: &[Any], settings: &Settings, probe: &Probe) -> Table {
    let mut rows = Vec::new();
    for contender in contenders {
        if let Some(row) = measure(contender, settings, probe).await {
            rows.push(row);
        }
    }
    Table {
        leases: settings.renew_leases,
        ttl_ms: settings.renew_ttl.as_millis() as u64,
        hold_s: settings.renew_hold.as_secs_f64(),
        rows,
    }
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| contender | leases | scripts run/tick | Redis calls/tick | Redis read events/tick | client CPU | Redis CPU | leases lost | acquire all (s) |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        let num = |v: f64, digits: usize| {
            if v.is_finite() {
                format!("{v:.digits$}")
            } else {
                "n/a".into()
            }
        };
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {}% | {}% | {} | {} |\n",
                row.contender,
                row.leases,
                num(row.scripts_per_tick, 0),
                num(row.redis_calls_per_tick, 0),
                num(row.redis_reads_per_tick, 1),
                num(row.client_cpu_percent, 1),
                num(row.redis_cpu_percent, 1),
                row.leases_lost,
                num(row.acquire_s, 2),
            ));
        }
        out
    }
}
