//! S4, Redlock: S1 (latency) and S2 (throughput) of each library on one Redis and on 3 and
//! 5 independent local masters, with each configuration's ratio to the same library on one
//! Redis.

use std::sync::Arc;

use serde::Serialize;

use super::s1_latency::{self, Latency};
use super::s2_throughput::{self, Throughput};
use super::{Failures, Settings};
use crate::contenders::{Any, Contender as _};
use crate::stats::{ratio, show_ratio, Spread};

/// One library on one number of nodes.
pub struct Config {
    pub library: String,
    pub nodes: usize,
    pub contender: Arc<Any>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub nodes: usize,
    pub s1_p50_us: Spread,
    pub s1_p99_us: Spread,
    pub s1_cycles_per_s: Spread,
    pub s2_cycles_per_s: Spread,
    /// Median S1 p50 over the same library's on one node.
    pub p50_vs_single: f64,
    /// Median S2 cycles/s over the same library's on one node.
    pub s2_vs_single: f64,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub tasks: usize,
    pub rows: Vec<Row>,
}

pub async fn run(configs: &[Config], settings: &Settings) -> Table {
    let refs: Vec<&Any> = configs.iter().map(|c| &*c.contender).collect();
    let latency: Vec<Vec<Latency>> = s1_latency::measure_all(&refs, "s4", settings).await;
    let contenders: Vec<Arc<Any>> = configs.iter().map(|c| c.contender.clone()).collect();
    let throughput: Vec<Vec<Throughput>> =
        s2_throughput::measure_all(&contenders, settings, None).await;
    let mut rows: Vec<Row> = configs
        .iter()
        .zip(latency.iter().zip(&throughput))
        .map(|(config, (latency, throughput))| {
            let mut failures = Failures::default();
            for run in latency {
                failures.merge(run.failures.clone());
            }
            for run in throughput {
                failures.merge(run.failures.clone());
            }
            Row {
                contender: config.contender.label().to_owned(),
                nodes: config.nodes,
                s1_p50_us: Spread::pick(latency, |r| r.p50_us),
                s1_p99_us: Spread::pick(latency, |r| r.p99_us),
                s1_cycles_per_s: Spread::pick(latency, |r| r.cycles_per_s),
                s2_cycles_per_s: Spread::pick(throughput, |r| r.cycles_per_s),
                p50_vs_single: f64::NAN,
                s2_vs_single: f64::NAN,
                failures: failures.count,
                first_error: failures.first,
            }
        })
        .collect();
    let singles: Vec<(String, f64, f64)> = configs
        .iter()
        .zip(&rows)
        .filter(|(config, _)| config.nodes == 1)
        .map(|(config, row)| {
            (
                config.library.clone(),
                row.s1_p50_us.median,
                row.s2_cycles_per_s.median,
            )
        })
        .collect();
    for (config, row) in configs.iter().zip(&mut rows) {
        if let Some((_, p50, rate)) = singles.iter().find(|(lib, _, _)| *lib == config.library) {
            row.p50_vs_single = ratio(row.s1_p50_us.median, *p50);
            row.s2_vs_single = ratio(row.s2_cycles_per_s.median, *rate);
        }
    }
    Table {
        tasks: settings.tasks,
        rows,
    }
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "| contender | nodes | S1 p50 µs | S1 p99 µs | S1 cycles/s | S1 p50 vs 1 node | S2 cycles/s ({} tasks) | S2 vs 1 node |\n\
             |---|---|---|---|---|---|---|---|\n",
            self.tasks
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                row.nodes,
                row.s1_p50_us.show(1),
                row.s1_p99_us.show(1),
                row.s1_cycles_per_s.show(0),
                show_ratio(row.p50_vs_single),
                row.s2_cycles_per_s.show(0),
                show_ratio(row.s2_vs_single),
            ));
        }
        out
    }
}
