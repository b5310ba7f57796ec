//! The checker: merges the logs of a run and verifies what the library promises.
//!
//! # What is checked
//!
//! Every rule below is judged from client stamps on the shared monotonic clock, using only
//! what each client was told at the time (the validity its lease reported, the answers it
//! got). Each broken rule is a [`Violation`]:
//!
//! - `overlap`: two acquisitions of one lock were both trusted at the same moment. An
//!   acquisition is trusted from the moment its lease was handed over until the first of:
//!   its end of validity (as the lease reported it at grant, or after a successful extension
//!   or renewal), the holder learning it was lost, or the release being sent.
//! - `permits`: more than N acquisitions of one semaphore's permits were trusted at the
//!   same moment; `write-overlap`: a read-write lock's write side was trusted at the same
//!   moment as another of its sides ([`permits`]).
//! - `capacity`: a semaphore request asking for another number of permits than a permit
//!   trusted at that moment was granted, or, asked over the whole trusted interval of such
//!   a permit, was refused other than with `CapacityMismatch` naming its number
//!   ([`capacity`]). Permits and read-write sides have no
//!   fencing tokens: `fence-order` and `stale-write` judge locks only, and their holders'
//!   `is_lost()` looks before their work ([`Event::Work`]) stand for the lock's writes.
//! - `fence-order`: fencing tokens do not follow real time: an acquisition that began after
//!   another was granted drew a token that is not larger, or two grants share a token.
//! - `stale-write`: the fenced store accepted a write although a write with a larger token
//!   had been accepted before it was sent, or the store's own order of accepted tokens is
//!   not strictly increasing, or a client and the store disagree about a write.
//! - `silent-release`: a release sent after the lease's validity ended returned `true`
//!   without the lease having reported itself lost (`is_lost()`), or a release returned
//!   `true` although another client had been granted the lock (or, for a read-write lock,
//!   a side that excludes this one) since this one got it.
//! - `silent-loss`: a holder wrote (or did its work) after its lease's validity ended
//!   while `is_lost()` still said false.
//! - `acquired-while-down`: a single server granted a lock while it was dead.
//! - `acquired-over-foreign-value`: a lock was granted while a foreign hash sat on its key.
//! - `validity-claim`: a lease reported more validity than the TTL it asked for, counted
//!   from the start of its successful attempt.
//! - `stamp-order`: a lease's successful attempt is stamped before its call began or after
//!   it was granted (the library's `acquired_at`, or the harness's clock, is wrong).
//! - `wait-overrun` / `late-grant`: a request returned an error, or a lease, later than its
//!   wait (or, for a request that does not wait, the command timeout) plus a scheduling
//!   allowance after it began ([`deadline`]).
//! - `revived-lease`: a holder that had been told its lease was lost was later told that it
//!   was valid after all: an extension or renewal succeeded, or `is_lost()` said false
//!   ([`revival`]).
//! - `nested-on-lost`: a nested `#[redis_locked]` call began after the enclosing lease's
//!   trust had ended, and its body ran anyway ([`nested`]).
//! - `spawned-beside-holder`: a sibling spawned from inside a `#[redis_locked]` body (a
//!   task of its own, which does not inherit the lease) ran its body while the enclosing
//!   lease was still trusted ([`nested`]).
//! - `leftover-after-error`: an acquire that failed with `WrongType` left its value on a
//!   node ([`leftover`]).
//! - `liveness`: a request was left waiting while what it waits for was free, longer than
//!   the claim window allows, or timed out while it was free for most of its wait
//!   ([`liveness`]).
//! - `starvation`: a client waiting for a lock without interruption was passed over by
//!   more grants to requests made after it began waiting than a fair queue allows
//!   ([`starvation::PASSED_OVER_PER_CLIENT`] per client of the run), and granted nothing
//!   meanwhile ([`starvation`]).
//! - `ghost-grant`: after a request was cancelled, the lock's key carried its client's
//!   never-granted value while that client had no live request for it ([`ghost`]).
//! - `sibling-overlap`: two concurrent sibling calls of one key inside a `#[redis_locked]`
//!   body ran their bodies at once ([`nested`]).
//! - `unseen-grant`: on a replicated deployment, a lease that no server's `MONITOR` stream
//!   showed being granted: its origin is unknown, so the failover rules cannot judge it
//!   ([`failover`]).
//! - `leader-overlap`, `leader-term`, `term-order`, `leader-late-action`,
//!   `observer-order`: an election's leaderships, judged as locks whose fencing token is
//!   the term, and its observers (`check/election.rs`).
//! - `vacancy-unseen`: a leader alone in its election stopped renewing (a paused client)
//!   and its partner's observer was not told within the lease and an allowance
//!   ([`vacancy`]).
//! - `tick-once`, `tick-missed`: scheduled runs, one per tick, and no tick missed while
//!   nothing fails ([`schedule`]).
//! - `deadlock-real`, `deadlock-persists`: every reported deadlock was a cycle of waiters
//!   in the history, and no cycle of waiters outlived the detection bound (`check/deadlock.rs`).
//! - `busy-delayed`: while a replica was stopped, a request that did not wait was answered
//!   busy later than [`replica_stall::BUSY_BOUND`], or failed with a connection error: an
//!   answer that needs no replica waited for one ([`replica_stall`]).
//! - `unexplained-error`: an acquire failed with a Redis error reply (or an error the
//!   harness cannot classify) while no fault was under way, nor had ended in the last
//!   five seconds ([`errors`]).
//!
//! # What a restart is allowed to break
//!
//! A server killed and restarted empty forgets its locks and its fencing counters. If it
//! comes back while a holder still trusts its lease, a second client can take the same lock:
//! mutual exclusion is lost, and no client-side library can prevent it. Such overlaps (the
//! earlier holder's attempt began before the kill, the later one was granted after it, and
//! the server was back before the earlier holder's validity ended) are counted as
//! `expected_restart_overlaps`, not as violations. With the delayed-restart rule (stay down
//! for at least one TTL) no such overlap can happen, and none is excused: any overlap is a
//! violation. Tokens drawn after a restart start again from 1; such regressions are counted
//! as `fence_resets`, and the fenced store rejects those holders' writes until the counter
//! passes its old value (safe, but a loss of liveness).

mod capacity;
mod deadline;
mod deadlock;
mod election;
mod errors;
mod failover;
mod fences;
mod ghost;
mod leftover;
pub mod liveness;
mod nested;
mod permits;
mod replica_stall;
mod requests;
mod revival;
pub mod schedule;
pub mod starvation;
mod vacancy;
mod writes;

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::clock::{self, ms, Nanos};
use crate::event::{Acquired, Event, FailKind, ReleaseOutcome, WriteOutcome};
use failover::{Anomaly, Replication};
use fences::{check_fences, LOCK_FENCES};
use writes::{check_writes, WriteRow};

/// Everything a run produced.
#[derive(Debug, Default, Clone)]
pub struct History {
    /// Events of every client log and of the orchestrator, in any order.
    pub events: Vec<Event>,
    /// Per lock name, the writes the fenced store accepted, in its order: `(token, writer)`.
    pub store: BTreeMap<String, Vec<(u64, String)>>,
}

/// A broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which rule (see the module docs).
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
    /// (e.g. `overlap/stale-master`; see [`failover`]), each backed by evidence from the run.
    /// Restart overlaps of a single server or a Redlock node count as `overlap/restart`.
    pub expected: BTreeMap<String, u64>,
    /// Acquisitions whose fencing token did not exceed one drawn before a restart.
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
    /// [`Event::Hiccup`]).
    pub client_hiccups: u64,
    /// Nested `#[redis_locked]` calls whose body ran.
    pub nested_ran: u64,
    /// Nested `#[redis_locked]` calls refused with `Lost`.
    pub nested_refused: u64,
    /// Looks at the lock's key on every node after a `WrongType` error.
    pub foreign_probes: u64,
    /// Looks at a lock's key after a cancelled request ([`Event::CancelProbe`]).
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
}

impl Report {
    /// Counts an expected anomaly.
    fn expect(&mut self, rule: &str, why: &str) {
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
            prims.push_str(&format!(" peak_readers={readers} writes={writes}"));
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
        let unseen = self
            .unseen_grants
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        format!(
            "acquisitions={} faults={} violations={} expected={expected}{prims} unseen_grants={unseen} stale_writes_rejected={} \
             lost_leases_detected={} late_writes={} writes_accepted={} \
             writes_fenced_out_after_reset={} paused_holders={} paused_holders_told_lost={} \
             paused_writes_rejected={} released={} \
             release_not_held={} release_errors={} expected_restart_overlaps={} \
             fence_resets={} contention={} most_passed_over={} max_wait_overrun_ms={:.1} client_hiccups={} nested_ran={} \
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
            self.expected_restart_overlaps,
            self.fence_resets,
            self.contention,
            self.most_passed_over,
            self.max_wait_overrun as f64 / 1e6,
            self.client_hiccups,
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

/// One acquisition with everything that followed it.
#[derive(Debug, Clone)]
struct Acq {
    a: Acquired,
    /// Latest end of validity the holder was told (grant, extensions, renewals).
    claim_end: Nanos,
    lost_at: Option<Nanos>,
    release: Option<(Nanos, ReleaseOutcome, bool)>,
    /// When the holder logged that it was about to release (a killed client may have sent
    /// its release without living to log the answer).
    releasing: Option<Nanos>,
}

impl Acq {
    /// When the holder stopped trusting its lease.
    fn trusted_until(&self) -> Nanos {
        let mut end = self.claim_end;
        if let Some(t) = self.lost_at {
            end = end.min(t);
        }
        if let Some((t, _, _)) = self.release {
            end = end.min(t);
        }
        if let Some(t) = self.releasing {
            end = end.min(t);
        }
        end
    }
}

/// A server outage: killed at `start`, answering again at `end`.
#[derive(Debug, Clone, Copy)]
struct Down {
    start: Nanos,
    end: Nanos,
}

/// Checks a history. `nodes` is the number of lock servers (1, or several for Redlock).
pub fn check(history: &History, nodes: usize) -> Report {
    let expanded = expand_multi(&history.events);
    let history = &History {
        events: expanded,
        store: history.store.clone(),
    };
    let mut report = Report::default();
    let mut acqs: Vec<Acq> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut downs = Vec::new();
    let mut foreign: Vec<(String, Nanos, Nanos)> = Vec::new();
    let mut last_fault_end: Option<Nanos> = None;
    let mut pauses: Vec<(u32, Nanos, Nanos)> = Vec::new();

    for event in &history.events {
        if let Event::Acquired(a) = event {
            index.insert(a.id.clone(), acqs.len());
            acqs.push(Acq {
                claim_end: a.valid_until,
                a: a.clone(),
                lost_at: None,
                release: None,
                releasing: None,
            });
        }
    }
    let mut writes = Vec::new();
    let mut works = Vec::new();
    for event in &history.events {
        match event {
            Event::Extended {
                id,
                valid_until: Some(v),
                ..
            }
            | Event::Observed {
                id, valid_until: v, ..
            } => {
                if let Some(&i) = index.get(id) {
                    acqs[i].claim_end = acqs[i].claim_end.max(*v);
                }
            }
            Event::LostDetected { id, t, .. } => {
                if let Some(&i) = index.get(id) {
                    let at = acqs[i].lost_at.get_or_insert(*t);
                    *at = (*at).min(*t);
                }
            }
            Event::Releasing { id, t } => {
                if let Some(&i) = index.get(id) {
                    acqs[i].releasing = Some(*t);
                }
            }
            Event::Release {
                id,
                t_sent,
                outcome,
                lost_reported,
                ..
            } => {
                match outcome {
                    ReleaseOutcome::Released => report.released += 1,
                    ReleaseOutcome::NotHeld => report.release_not_held += 1,
                    ReleaseOutcome::Error => report.release_errors += 1,
                    ReleaseOutcome::Implicit => {}
                }
                if let Some(&i) = index.get(id) {
                    acqs[i].release = Some((*t_sent, *outcome, *lost_reported));
                }
            }
            Event::Work {
                id,
                name,
                t,
                lost_reported,
            } => works.push(WriteRow {
                id: id.clone(),
                name: name.clone(),
                fence: 0,
                sent: *t,
                reply: *t,
                outcome: WriteOutcome::Error,
                lost_reported: *lost_reported,
            }),
            Event::Write {
                id,
                name,
                fence,
                t_sent,
                t_reply,
                outcome,
                lost_reported,
            } => writes.push(WriteRow {
                id: id.clone(),
                name: name.clone(),
                fence: *fence,
                sent: *t_sent,
                reply: *t_reply,
                outcome: *outcome,
                lost_reported: *lost_reported,
            }),
            Event::AcquireFailed { kind, .. } => {
                if *kind == FailKind::Contention {
                    report.contention += 1;
                } else {
                    let key = serde_json::to_value(kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| format!("{kind:?}"));
                    *report.acquire_errors.entry(key).or_default() += 1;
                }
            }
            Event::Fault {
                kind,
                target,
                t_start,
                t_end,
            } => {
                if let (true, Some(client)) = (
                    kind == "pause",
                    target
                        .strip_prefix("client")
                        .and_then(|c| c.parse::<u32>().ok()),
                ) {
                    pauses.push((client, *t_start, *t_end));
                }
                report.faults += 1;
                last_fault_end = Some(last_fault_end.map_or(*t_end, |t| t.max(*t_end)));
            }
            Event::Down { t_start, t_end, .. } => downs.push(Down {
                start: *t_start,
                end: *t_end,
            }),
            Event::Foreign {
                name,
                t_start,
                t_end,
            } => foreign.push((name.clone(), *t_start, *t_end)),
            Event::Start { .. }
            | Event::Acquired(_)
            | Event::Extended { .. }
            | Event::Nested { .. }
            | Event::Hiccup { .. }
            | Event::Probe { .. }
            | Event::Topology { .. }
            | Event::Failover(_)
            | Event::CancelProbe { .. }
            | Event::LeaderSeen { .. }
            | Event::RunStarted(_)
            | Event::TickDone(_)
            | Event::Waited(_)
            | Event::Granted { .. } => {}
            Event::Cancelled { .. } => report.cancelled += 1,
        }
    }
    downs.sort_by_key(|d| d.start);
    report.acquisitions = acqs.len() as u64;
    report.lost_detected = acqs.iter().filter(|a| a.lost_at.is_some()).count() as u64;
    report.resumed = match last_fault_end {
        None => true,
        Some(end) => {
            acqs.iter().any(|a| a.a.acquired > end) || schedule::ran_after(&history.events, end)
        }
    };

    // A lock, a semaphore and a read-write lock of one name never meet.
    let mut by_name: BTreeMap<(&str, &str), Vec<&Acq>> = BTreeMap::new();
    for acq in &acqs {
        by_name
            .entry((acq.a.kind.family(), acq.a.name.as_str()))
            .or_default()
            .push(acq);
    }
    let mut reset = HashSet::new();
    let replication = Replication::new(&history.events);
    for ((family, name), list) in &mut by_name {
        list.sort_by_key(|a| a.a.acquired);
        match *family {
            "semaphore" => permits::check_permits(name, list, &downs, &replication, &mut report),
            "rwlock" => permits::check_rw(name, list, &downs, &replication, &mut report),
            _ => {
                // An election's leaderships are judged as locks, under its own rule names.
                let (overlap, fences) = if *family == "election" {
                    (election::OVERLAP, election::TERMS)
                } else {
                    ("overlap", LOCK_FENCES)
                };
                check_overlaps(overlap, name, list, &downs, &replication, &mut report);
                check_fences(
                    fences,
                    name,
                    list,
                    &downs,
                    &replication,
                    &mut reset,
                    &mut report,
                );
            }
        }
        check_releases(name, list, &replication, &mut report);
    }
    for acq in &acqs {
        check_grant(acq, nodes, &downs, &foreign, &mut report);
    }
    replication.check_seen(&acqs, &mut report);
    check_writes(&writes, &index, &acqs, &reset, history, &mut report);
    writes::check_work(&works, &index, &acqs, &mut report);
    count_paused_holders(&acqs, &pauses, &writes, &mut report);
    deadline::check(&history.events, &pauses, &mut report);
    revival::check(&history.events, &index, &acqs, &mut report);
    nested::check(&history.events, &index, &acqs, &mut report);
    leftover::check(&history.events, &mut report);
    nested::check_siblings(&history.events, &index, &acqs, &mut report);
    liveness::check(&history.events, &acqs, &mut report);
    starvation::check(&history.events, &mut report);
    capacity::check(&history.events, &acqs, &mut report);
    ghost::check(&history.events, &mut report);
    errors::check(&history.events, &mut report);
    election::check_observers(&history.events, &mut report);
    schedule::check(&history.events, &downs, &mut report);
    deadlock::check(&history.events, &mut report);
    replica_stall::check(&history.events, &mut report);
    vacancy::check(&history.events, &mut report);
    report
}

/// A multi-lock is logged as one acquisition with every name of its set; the rules judge
/// each name: one acquisition per name (`<id>/<name>`), and every event about the lease
/// once for each of them.
fn expand_multi(events: &[Event]) -> Vec<Event> {
    let sets: HashMap<&str, &[String]> = events
        .iter()
        .filter_map(|e| match e {
            Event::Acquired(a) => a.set.as_deref().map(|set| (a.id.as_str(), set)),
            _ => None,
        })
        .collect();
    if sets.is_empty() {
        return events.to_vec();
    }
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        let id = match event {
            Event::Acquired(a) => Some(&a.id),
            Event::Extended { id, .. }
            | Event::Observed { id, .. }
            | Event::LostDetected { id, .. }
            | Event::Work { id, .. }
            | Event::Write { id, .. }
            | Event::Releasing { id, .. }
            | Event::Release { id, .. } => Some(id),
            _ => None,
        };
        let Some(set) = id.and_then(|id| sets.get(id.as_str())) else {
            out.push(event.clone());
            continue;
        };
        for name in *set {
            let mut one = event.clone();
            match &mut one {
                Event::Acquired(a) => {
                    a.id = format!("{}/{name}", a.id);
                    a.name = name.clone();
                }
                Event::Work { id, name: n, .. } | Event::Write { id, name: n, .. } => {
                    *id = format!("{id}/{name}");
                    *n = name.clone();
                }
                Event::Extended { id, .. }
                | Event::Observed { id, .. }
                | Event::LostDetected { id, .. }
                | Event::Releasing { id, .. }
                | Event::Release { id, .. } => *id = format!("{id}/{name}"),
                _ => {}
            }
            out.push(one);
        }
    }
    out
}

/// The GC-pause scenario: holders stopped past the end of their validity.
fn count_paused_holders(
    acqs: &[Acq],
    pauses: &[(u32, Nanos, Nanos)],
    writes: &[WriteRow],
    report: &mut Report,
) {
    let rejected: HashSet<&str> = writes
        .iter()
        .filter(|w| w.outcome == WriteOutcome::Rejected)
        .map(|w| w.id.as_str())
        .collect();
    for acq in acqs {
        let paused = pauses.iter().any(|&(client, start, end)| {
            client == acq.a.client
                && acq.a.acquired <= start
                && start < acq.trusted_until()
                && end > acq.claim_end
        });
        if !paused {
            continue;
        }
        report.paused_holders += 1;
        // Told: the loss signal or an extension said so, or `is_lost()` at the release
        // (an annotated round's only look after its hold).
        if acq.lost_at.is_some() || acq.release.is_some_and(|(_, _, lost)| lost) {
            report.paused_holders_told_lost += 1;
        }
        if rejected.contains(acq.a.id.as_str()) {
            report.paused_writes_rejected += 1;
        }
    }
}

/// Rule `overlap` (`rule`: an election's is `leader-overlap`): a sweep over trusted
/// intervals sorted by start.
fn check_overlaps(
    rule: &'static str,
    name: &str,
    list: &[&Acq],
    downs: &[Down],
    replication: &Replication<'_>,
    report: &mut Report,
) {
    // The interval that reaches furthest so far.
    let mut reach: Option<&Acq> = None;
    for &next in list {
        if next.trusted_until() <= next.a.acquired {
            continue; // already invalid when handed over (a reply slower than the TTL)
        }
        if let Some(earlier) = reach {
            if next.a.acquired < earlier.trusted_until() {
                let restart = downs.iter().find(|d| {
                    earlier.a.attempt_start <= d.start
                        && d.start <= next.a.acquired
                        && d.end < earlier.trusted_until()
                });
                let explained = replication.explain(Anomaly::Overlap, name, earlier, next);
                if restart.is_some() {
                    report.expected_restart_overlaps += 1;
                    report.expect(rule, "restart");
                } else if let Some(why) = explained {
                    report.expect(rule, why);
                } else {
                    report.violations.push(Violation {
                        rule,
                        name: name.to_owned(),
                        detail: format!(
                            "{} trusted its lease from {} to {} but {} was granted at {} ({} before the first one's trust ended){}",
                            earlier.a.id,
                            earlier.a.acquired,
                            earlier.trusted_until(),
                            next.a.id,
                            next.a.acquired,
                            ms(earlier.trusted_until() - next.a.acquired),
                            replication.origins(&[earlier, next]),
                        ),
                    });
                }
            }
        }
        if reach.is_none_or(|r| next.trusted_until() > r.trusted_until()) {
            reach = Some(next);
        }
    }
}

/// Rule `silent-release` (one family and name: a lock's, a semaphore's or a read-write
/// lock's acquisitions).
fn check_releases(name: &str, list: &[&Acq], replication: &Replication<'_>, report: &mut Report) {
    for (pos, acq) in list.iter().enumerate() {
        let Some((sent, outcome, lost_reported)) = acq.release else {
            continue;
        };
        if outcome != ReleaseOutcome::Released {
            continue;
        }
        if sent > acq.claim_end && !lost_reported {
            report.violations.push(Violation {
                rule: "silent-release",
                name: name.to_owned(),
                detail: format!(
                    "{} released at {}, {} after its validity ended, with release() == true and is_lost() == false",
                    acq.a.id,
                    sent,
                    ms(sent - acq.claim_end)
                ),
            });
        }
        // `list` is sorted by grant time: later grants before our release was sent.
        for other in &list[pos + 1..] {
            if other.a.acquired >= sent {
                break;
            }
            if !permits::excludes(acq.a.kind, other.a.kind) {
                continue; // permits, and readers among themselves, may be granted meanwhile
            }
            if other.a.attempt_start > acq.a.acquired {
                if let Some(why) = replication.explain(Anomaly::Overlap, name, acq, other) {
                    report.expect("silent-release", why);
                    continue;
                }
                report.violations.push(Violation {
                    rule: "silent-release",
                    name: name.to_owned(),
                    detail: format!(
                        "{} was granted at {} (attempt from {}) after {} was granted at {}, yet {}'s release at {} returned true",
                        other.a.id, other.a.acquired, other.a.attempt_start, acq.a.id, acq.a.acquired, acq.a.id, sent
                    ),
                });
            }
        }
    }
}

/// Rules `acquired-while-down`, `acquired-over-foreign-value`, `validity-claim`.
fn check_grant(
    acq: &Acq,
    nodes: usize,
    downs: &[Down],
    foreign: &[(String, Nanos, Nanos)],
    report: &mut Report,
) {
    let a = &acq.a;
    if nodes == 1 {
        if let Some(d) = downs
            .iter()
            .find(|d| d.start <= a.attempt_start && a.acquired <= d.end)
        {
            report.violations.push(Violation {
                rule: "acquired-while-down",
                name: a.name.clone(),
                detail: format!(
                    "{}'s attempt ran from {} to {}, inside the outage {}..{}",
                    a.id, a.attempt_start, a.acquired, d.start, d.end
                ),
            });
        }
    }
    if let Some((_, start, end)) = foreign
        .iter()
        .find(|(n, s, e)| *n == a.name && *s <= a.attempt_start && a.acquired <= *e)
    {
        report.violations.push(Violation {
            rule: "acquired-over-foreign-value",
            name: a.name.clone(),
            detail: format!(
                "{} was granted at {} while a hash sat on the key ({start}..{end})",
                a.id, a.acquired
            ),
        });
    }
    // The library says when the successful attempt began (`acquired_at`): inside the call,
    // before the grant. Outside that, either it or the harness's stamps are wrong, and every
    // rule that reads them is unsound.
    if a.attempt_start.saturating_add(clock::SETTLED) < a.call_start
        || a.acquired.saturating_add(clock::SETTLED) < a.attempt_start
    {
        report.violations.push(Violation {
            rule: "stamp-order",
            name: a.name.clone(),
            detail: format!(
                "{}: call at {}, attempt at {}, granted at {}: the attempt is stamped outside its call",
                a.id, a.call_start, a.attempt_start, a.acquired
            ),
        });
    }
    let ttl = a.ttl_ms.saturating_mul(1_000_000);
    // A leadership is logged after the campaign announced it, a round trip after the
    // grant, and a renewal may have moved its validity meanwhile: not judged.
    if a.kind == crate::event::HoldKind::Leader {
        return;
    }
    // A lease handed over with no validity left (a reply slower than the TTL) claims
    // nothing; its stamp is merely the moment it was looked at.
    if a.valid_until > a.acquired && a.valid_until > a.attempt_start.saturating_add(ttl) {
        report.violations.push(Violation {
            rule: "validity-claim",
            name: a.name.clone(),
            detail: format!(
                "{} reported validity until {}, {} past attempt start + TTL",
                a.id,
                a.valid_until,
                ms(a.valid_until - a.attempt_start - ttl)
            ),
        });
    }
}

#[cfg(test)]
mod degraded_tests;
#[cfg(test)]
mod elect_tests;
#[cfg(test)]
mod prim_tests;
#[cfg(test)]
mod tests;
