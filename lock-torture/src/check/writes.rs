//! Rules `stale-write` and `silent-loss`, judged on the writes to the fenced store (and
//! `silent-loss` on the work of permits' and read-write sides' holders too).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Acq, History, Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::{HoldKind, WriteOutcome};

/// A write as logged.
#[derive(Debug, Clone)]
pub(super) struct WriteRow {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) fence: u64,
    pub(super) sent: Nanos,
    pub(super) reply: Nanos,
    pub(super) outcome: WriteOutcome,
    pub(super) lost_reported: bool,
}

/// Rules `stale-write` and `silent-loss`, plus the write counters.
pub(super) fn check_writes(
    writes: &[WriteRow],
    index: &HashMap<String, usize>,
    acqs: &[Acq],
    reset: &HashSet<&str>,
    history: &History,
    report: &mut Report,
) {
    let mut accepted_by_name: BTreeMap<&str, Vec<&WriteRow>> = BTreeMap::new();
    for w in writes {
        if let Some(&i) = index.get(&w.id) {
            if w.sent > acqs[i].claim_end {
                report.late_writes += 1;
                if !w.lost_reported {
                    let leader = acqs[i].a.kind == HoldKind::Leader;
                    let (rule, did, asked) = if leader {
                        (
                            super::election::LATE_ACTION,
                            "acted as leader",
                            "is_leader() said true",
                        )
                    } else {
                        ("silent-loss", "wrote", "is_lost() said false")
                    };
                    report.violations.push(Violation {
                        rule,
                        name: w.name.clone(),
                        detail: format!(
                            "{} {did} at {}, {} after its validity ended, and {asked}",
                            w.id,
                            w.sent,
                            ms(w.sent - acqs[i].claim_end)
                        ),
                    });
                }
            }
        }
        match w.outcome {
            WriteOutcome::Accepted => {
                report.writes_accepted += 1;
                accepted_by_name.entry(w.name.as_str()).or_default().push(w);
            }
            WriteOutcome::Rejected if reset.contains(w.id.as_str()) => {
                report.writes_fenced_out_after_reset += 1;
            }
            WriteOutcome::Rejected => report.stale_writes_rejected += 1,
            WriteOutcome::Error => {}
        }
    }
    for (name, list) in &mut accepted_by_name {
        list.sort_by_key(|w| std::cmp::Reverse(w.fence));
        let mut earliest_larger: Option<&WriteRow> = None;
        for w in list.iter() {
            if let Some(larger) = earliest_larger {
                if larger.fence > w.fence && larger.reply < w.sent {
                    report.violations.push(Violation {
                        rule: "stale-write",
                        name: (*name).to_owned(),
                        detail: format!(
                            "{}'s write with token {} sent at {} was accepted after {}'s write with token {} had been accepted at {}",
                            w.id, w.fence, w.sent, larger.id, larger.fence, larger.reply
                        ),
                    });
                }
            }
            if earliest_larger.is_none_or(|e| w.reply < e.reply) {
                earliest_larger = Some(w);
            }
        }
        // The store's own record must agree with the clients'.
        let stored = history.store.get(*name).map(Vec::as_slice).unwrap_or(&[]);
        for pair in stored.windows(2) {
            if pair[1].0 <= pair[0].0 {
                report.violations.push(Violation {
                    rule: "stale-write",
                    name: (*name).to_owned(),
                    detail: format!(
                        "the store accepted token {} ({}) after token {} ({})",
                        pair[1].0, pair[1].1, pair[0].0, pair[0].1
                    ),
                });
            }
        }
        let in_store: HashSet<(u64, &str)> =
            stored.iter().map(|(t, id)| (*t, id.as_str())).collect();
        for w in list.iter() {
            if !in_store.contains(&(w.fence, w.id.as_str())) {
                report.violations.push(Violation {
                    rule: "stale-write",
                    name: (*name).to_owned(),
                    detail: format!(
                        "{} logged its write with token {} as accepted, the store has no record of it",
                        w.id, w.fence
                    ),
                });
            }
        }
    }
}

/// Rule `silent-loss` on the work of holders without fencing tokens ([`Event::Work`],
/// logged as rows without a token): work done after the validity ended while `is_lost()`
/// still said false.
///
/// [`Event::Work`]: crate::event::Event::Work
pub(super) fn check_work(
    works: &[WriteRow],
    index: &HashMap<String, usize>,
    acqs: &[Acq],
    report: &mut Report,
) {
    for w in works {
        let Some(&i) = index.get(&w.id) else {
            continue;
        };
        if w.sent <= acqs[i].claim_end {
            continue;
        }
        report.late_writes += 1;
        if !w.lost_reported {
            report.violations.push(Violation {
                rule: "silent-loss",
                name: w.name.clone(),
                detail: format!(
                    "{} worked at {}, {} after its validity ended, and is_lost() said false",
                    w.id,
                    w.sent,
                    ms(w.sent - acqs[i].claim_end)
                ),
            });
        }
    }
}
