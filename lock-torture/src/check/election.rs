//! The election's rules (`--primitive election`). A leadership is logged as an acquisition
//! of kind `leader` whose fencing token is its term, and its actions as writes to the
//! fenced store with that term, so the lock's machinery judges it under the election's
//! own rule names:
//!
//! - `leader-overlap`: two leaders of one election trusted their leadership at the same
//!   moment (the lock's `overlap`, with the same restart and failover explanations);
//! - `leader-term`: one term was handed to two leaderships (at most one leader per term);
//! - `term-order`: a leadership that began after another was granted got a term that is
//!   not larger (terms strictly increase across successive leaderships, across a
//!   restarted server too, where a term that went backward is also counted in
//!   `fence_resets`, as for locks);
//! - `leader-late-action`: a leader acted (wrote with its term) after its lease's
//!   validity ended, as the library reported it, while `is_leader()` still said true (the
//!   lock's `silent-loss`);
//! - `observer-order`: an observer was told of changes out of order, or of one twice:
//!   per observer, each change's (term, elected before resigned) must exceed the last.

use std::collections::BTreeMap;

use super::fences::FenceRules;
use super::{Report, Violation};
use crate::clock::Nanos;
use crate::event::Event;

/// Two leaders trusted at once.
pub(super) const OVERLAP: &str = "leader-overlap";

/// The term rules: one term twice, a term out of order.
pub(super) const TERMS: FenceRules = FenceRules {
    twice: "leader-term",
    order: "term-order",
    token: "term",
};

/// An action after the lease ended while `is_leader()` said true.
pub(super) const LATE_ACTION: &str = "leader-late-action";

/// One observer: (client, observer number, election).
type ObserverId<'a> = (u32, u32, &'a str);

/// A change it was told of: (when, term, 1 elected / 2 resigned).
type Seen = (Nanos, u64, u8);

/// Rule `observer-order`, and the count of changes observers were told of.
pub(super) fn check_observers(events: &[Event], report: &mut Report) {
    let mut seen: BTreeMap<ObserverId<'_>, Vec<Seen>> = BTreeMap::new();
    for event in events {
        if let Event::LeaderSeen {
            client,
            observer,
            name,
            t,
            term,
            elected,
            ..
        } = event
        {
            seen.entry((*client, *observer, name.as_str()))
                .or_default()
                .push((*t, *term, if *elected { 1 } else { 2 }));
        }
    }
    if seen.is_empty() {
        return;
    }
    let mut delivered = 0;
    for ((client, observer, name), changes) in &mut seen {
        changes.sort_by_key(|&(t, _, _)| t);
        delivered += changes.len() as u64;
        for pair in changes.windows(2) {
            let (before, after) = ((pair[0].1, pair[0].2), (pair[1].1, pair[1].2));
            if after <= before {
                let what = |(term, order): (u64, u8)| {
                    format!(
                        "{} of term {term}",
                        if order == 1 { "Elected" } else { "Resigned" }
                    )
                };
                report.violations.push(Violation {
                    rule: "observer-order",
                    name: (*name).to_owned(),
                    detail: format!(
                        "client {client}'s observer {observer} was told {} at {} after {} at {}",
                        what(after),
                        pair[1].0,
                        what(before),
                        pair[0].0
                    ),
                });
            }
        }
    }
    report.leader_changes_seen = Some(delivered);
}
