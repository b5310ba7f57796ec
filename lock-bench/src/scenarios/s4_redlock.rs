//! S4, Redlock: S1 (latency) and S2 (throughput) of each library on one Redis and on 3 and
//! 5 independent local masters, with each configuration's ratio to the same library on one
//! Redis.

use std::sync::Arc;

use serde::Serialize;

use super::s1_latency::{self, Latency};
use super::s2_throughput::{self, Throughput};
use super::{Failures, Settings};
use crate::contenders::{Any, Contender as _};
use crate::stats::{paired, Spread};

/// One library on one number of nodes.
pub struct Config {
    pub library: String,
    pub nodes: usize,
    /// Independent masters and a quorum (Redlock); false for one Redis, a Cluster or a
    /// Sentinel's master, whose `nodes` count servers that do not vote.
    pub redlock: bool,
    pub contender: Arc<Any>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub nodes: usize,
    /// Whether this row runs Redlock (see [`Config::redlock`]).
    pub redlock: bool,
    pub s1_p50_us: Spread,
    pub s1_p99_us: Spread,
    pub s1_cycles_per_s: Spread,
    pub s2_cycles_per_s: Spread,
    /// S1 p50 over the same library's on one node, in the same repetition.
    pub p50_vs_single: Spread,
    /// S2 cycles/s over the same library's on one node, in the same repetition.
    pub s2_vs_single: Spread,
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
    // Each configuration's runs on one node: the pairing for its ratios.
    let single = |library: &str| {
        configs
            .iter()
            .position(|c| c.library == library && c.nodes == 1)
    };
    let rows: Vec<Row> = configs
        .iter()
        .zip(latency.iter().zip(&throughput))
        .map(|(config, (latency_runs, throughput_runs))| {
            let mut failures = Failures::default();
            for run in latency_runs {
                failures.merge(run.failures.clone());
            }
            for run in throughput_runs {
                failures.merge(run.failures.clone());
            }
            let (p50_vs_single, s2_vs_single) = match single(&config.library) {
                Some(i) => (
                    paired(latency_runs, &latency[i], |r| r.p50_us),
                    paired(throughput_runs, &throughput[i], |r| r.cycles_per_s),
                ),
                None => (Spread::of([]), Spread::of([])),
            };
            Row {
                contender: config.contender.label().to_owned(),
                nodes: config.nodes,
                redlock: config.redlock,
                s1_p50_us: Spread::pick(latency_runs, |r| r.p50_us),
                s1_p99_us: Spread::pick(latency_runs, |r| r.p99_us),
                s1_cycles_per_s: Spread::pick(latency_runs, |r| r.cycles_per_s),
                s2_cycles_per_s: Spread::pick(throughput_runs, |r| r.cycles_per_s),
                p50_vs_single,
                s2_vs_single,
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
                row.p50_vs_single.show_ratio(),
                row.s2_cycles_per_s.show(0),
                row.s2_vs_single.show_ratio(),
            ));
        }
        out
    }
}
