//! What a run amounted to: its [`Report`], and each broken rule in it ([`Violation`]).

use std::collections::BTreeMap;

use super::{latch, schedule, steal, weights};
use crate::clock::Nanos;

/// A broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which rule (see the [`check`](super) module docs).
    pub rule: &'static str,
    /// The lock name.
    pub name: String,
    /// What exactly happened, with acquisition ids and stamps.
    pub detail: String,
}

/// What a run amounted to.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Leases granted.
    pub acquisitions: u64,
    /// Faults injected.
    pub faults: u64,
    /// Broken rules.
    pub violations: Vec<Violation>,
    /// Overlaps explained by a server that came back empty while a holder trusted its lease.
    pub expected_restart_overlaps: u64,
    /// Anomalies that the deployment does not promise to prevent, by `<rule>/<explanation>`
    /// (e.g. `overlap/stale-master`; see [`failover`](super::failover)), each backed by
    /// evidence from the run. Restart overlaps of a single server or a Redlock node count
    /// as `overlap/restart`.
    pub expected: BTreeMap<String, u64>,
    /// Acquisitions whose fencing token did not exceed one drawn before a restart (each
    /// also a `fence-order` violation).
    pub fence_resets: u64,
    /// Writes the fenced store accepted.
    pub writes_accepted: u64,
    /// Writes the fenced store refused because a newer holder had written.
    pub stale_writes_rejected: u64,
    /// Writes refused because the writer's token was drawn after a restart reset the
    /// counter below the store's high-water mark (the holder was legitimate; see
    /// `fence_resets`).
    pub writes_fenced_out_after_reset: u64,
    /// Acquisitions whose holder was stopped (SIGSTOP) while it trusted its lease.
    pub paused_holders: u64,
    /// Of those, how many were told their lease was lost.
    pub paused_holders_told_lost: u64,
    /// Of those, how many wrote and had the write refused by fencing.
    pub paused_writes_rejected: u64,
    /// Writes sent after the writer's lease validity had ended (accepted or not), and
    /// work done by a permit's or read-write side's holder after its validity ended.
    pub late_writes: u64,
    /// Acquisitions whose holder was told its lease was lost.
    pub lost_detected: u64,
    /// Releases that returned `true`.
    pub released: u64,
    /// Releases that returned `false` (the lease had expired or been taken over).
    pub release_not_held: u64,
    /// Releases that failed (server unreachable ...).
    pub release_errors: u64,
    /// Releases dropped before they ended (the cancellation fault).
    pub releases_dropped: u64,
    /// Failed acquires by kind (contention excluded).
    pub acquire_errors: BTreeMap<String, u64>,
    /// Acquires that ended in contention (busy, timeout).
    pub contention: u64,
    /// The most grants of a lock to requests made after a client began waiting for it,
    /// in one of its uninterrupted waits (rule `starvation`; outside faults).
    pub most_passed_over: u64,
    /// The largest amount by which a waiting request outlived its wait (within the
    /// allowance, or it is also a violation); requests of paused clients are left out.
    pub max_wait_overrun: Nanos,
    /// Times a client's runtime was seen not running for more than 10 ms (see
    /// [`Event::Hiccup`](crate::event::Event::Hiccup)).
    pub client_hiccups: u64,
    /// Times a lock server ran no command for more than 20 ms (see
    /// [`Event::ServerStall`](crate::event::Event::ServerStall)).
    pub server_stalls: u64,
    /// Nested `#[redis_locked]` calls whose body ran.
    pub nested_ran: u64,
    /// Nested `#[redis_locked]` calls refused with `Lost`.
    pub nested_refused: u64,
    /// Looks at the lock's key on every node after a `WrongType` error.
    pub foreign_probes: u64,
    /// Looks at a lock's key after a cancelled request
    /// ([`Event::CancelProbe`](crate::event::Event::CancelProbe)).
    pub cancel_probes: u64,
    /// Requests dropped by the cancellation fault.
    pub cancelled: u64,
    /// Whether locks were granted again after the last fault healed (true without faults).
    pub resumed: bool,
    /// Semaphores: the most permits of one name trusted at once (the rule `permits` bites
    /// only if this reaches the limit); `None` without semaphore acquisitions.
    pub peak_permits: Option<u64>,
    /// Read-write locks: the most readers of one name trusted at once, and how many write
    /// sides were granted; `None` without read-write acquisitions.
    pub peak_readers: Option<(u64, u64)>,
    /// Replicated deployments (Cluster, Sentinel): leases that no server's `MONITOR` stream
    /// showed being granted. Every unseen grant is a lease the failover rules cannot judge,
    /// so a replicated run with any fails (rule `unseen-grant`); `None` on the deployments
    /// that are not watched (one server, Redlock).
    pub unseen_grants: Option<u64>,
    /// Elections: how many changes of leadership the observers were told of; `None`
    /// without observers.
    pub leader_changes_seen: Option<u64>,
    /// Scheduled runs: ticks, runs, skips ([`schedule`]); `None` without them.
    pub schedule: Option<schedule::ScheduleStats>,
    /// `--mode steal`: keys taken, holders told, detection delays ([`steal`]); `None`
    /// without steals.
    pub steal: Option<steal::StealStats>,
    /// `--primitive weighted`: weights, capacity changes, large requests' waits
    /// ([`weights`]); `None` without weighted permits.
    pub weights: Option<weights::WeightStats>,
    /// `--primitive latch`: rounds, waits ([`latch`]); `None` without latches.
    pub latch: Option<latch::LatchStats>,
    /// Read-write locks: write leases stepped down to read leases (`downgrade` calls
    /// that did not find the lease lost).
    pub downgrades: u64,
}

impl Report {
    /// Counts an expected anomaly.
    pub(super) fn expect(&mut self, rule: &str, why: &str) {
        *self.expected.entry(format!("{rule}/{why}")).or_default() += 1;
    }

    /// How many expected anomalies, of every kind.
    pub fn expected_total(&self) -> u64 {
        self.expected.values().sum()
    }

    /// True when no rule was broken and locking resumed after the faults.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.resumed
    }

    /// How many violations each rule had, e.g. `late-grant:5,nested-on-lost:2`.
    pub fn by_rule(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &self.violations {
            *counts.entry(v.rule).or_default() += 1;
        }
        counts
            .iter()
            .map(|(rule, n)| format!("{rule}:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The one-line summary: `key=value` pairs.
    pub fn summary(&self) -> String {
        let errors = if self.acquire_errors.is_empty() {
            "0".to_owned()
        } else {
            self.acquire_errors
                .iter()
                .map(|(kind, n)| format!("{kind}:{n}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let expected = if self.expected.is_empty() {
            "0".to_owned()
        } else {
            self.expected
                .iter()
                .map(|(kind, n)| format!("{kind}:{n}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut prims = String::new();
        if let Some(peak) = self.peak_permits {
            prims.push_str(&format!(" peak_permits={peak}"));
        }
        if let Some((readers, writes)) = self.peak_readers {
            prims.push_str(&format!(
                " peak_readers={readers} writes={writes} downgrades={}",
                self.downgrades
            ));
        }
        if let Some(n) = self.leader_changes_seen {
            prims.push_str(&format!(" leader_changes_seen={n}"));
        }
        if let Some(s) = self.schedule {
            prims.push_str(&format!(
                " ticks={} runs={} skipped={} tick_errors={} late_fires={} unfired_ticks={} judged_ticks={}",
                s.ticks, s.runs, s.skipped, s.errors, s.late_fires, s.unfired, s.judged
            ));
        }
        if let Some(s) = &self.steal {
            prims.push_str(&format!(
                " steals={} steals_judged={} steals_told={} steals_ended_untold={} told_p50_ms={:.1} told_max_ms={:.1}",
                s.steals, s.judged, s.told, s.ended, s.p50_ms, s.max_ms
            ));
        }
        if let Some(s) = &self.weights {
            prims.push_str(&format!(
                " peak_weight={} capacity_sets={} lowered_under_holders={} held_across_lowering={} large_granted={} large_wait_max_ms={:.1} large_passed_max={}",
                s.peak_weight, s.capacity_sets, s.lowered_under_holders, s.held_across_lowering, s.large_granted, s.large_wait_max_ms, s.large_passed_max
            ));
        }
        if let Some(s) = &self.latch {
            prims.push_str(&format!(
                " rounds={} rounds_opened={} latch_waits={} latch_woken={} latch_expired={} latch_judged={} latch_wake_max_ms={:.1}",
                s.rounds, s.opened, s.waits, s.woken, s.expired, s.judged, s.wake_max_ms
            ));
        }
        let unseen = self
            .unseen_grants
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        format!(
            "acquisitions={} faults={} violations={} expected={expected}{prims} unseen_grants={unseen} stale_writes_rejected={} \
             lost_leases_detected={} late_writes={} writes_accepted={} \
             writes_fenced_out_after_reset={} paused_holders={} paused_holders_told_lost={} \
             paused_writes_rejected={} released={} \
             release_not_held={} release_errors={} releases_dropped={} expected_restart_overlaps={} \
             fence_resets={} contention={} most_passed_over={} max_wait_overrun_ms={:.1} client_hiccups={} server_stalls={} nested_ran={} \
             nested_refused={} foreign_probes={} cancelled={} cancel_probes={} acquire_errors={} resumed={}",
            self.acquisitions,
            self.faults,
            self.violations.len(),
            self.stale_writes_rejected,
            self.lost_detected,
            self.late_writes,
            self.writes_accepted,
            self.writes_fenced_out_after_reset,
            self.paused_holders,
            self.paused_holders_told_lost,
            self.paused_writes_rejected,
            self.released,
            self.release_not_held,
            self.release_errors,
            self.releases_dropped,
            self.expected_restart_overlaps,
            self.fence_resets,
            self.contention,
            self.most_passed_over,
            self.max_wait_overrun as f64 / 1e6,
            self.client_hiccups,
            self.server_stalls,
            self.nested_ran,
            self.nested_refused,
            self.foreign_probes,
            self.cancelled,
            self.cancel_probes,
            errors,
            if self.resumed { "yes" } else { "NO" },
        )
    }
}
