//! Rule `downgrade`: a read-write lock's write lease stepped down to a read lease
//! (`RwLease::downgrade`) is judged as two parts on the `write-overlap` sweep: its write
//! part, from its grant to the moment the downgrade was sent, and its read part, from then
//! until its trust ended. No other writer may be granted across either part (the lease is
//! held throughout: nobody gets in between), and a reader only after the downgrade was
//! sent (one granted in the call's span is let through: the step happened on the server
//! somewhere in it). Violations involving either part are reported as `downgrade`.
//!
//! A downgrade that failed with `Lost` splits nothing (the lease had ended); one that
//! failed otherwise (Redis unreachable: the step may have been taken on the server with
//! its answer lost) is split as if it had succeeded, which only lets more readers through.

use std::collections::HashSet;

use super::Acq;
use crate::event::{Event, HoldKind};

/// The ids of the downgraded acquisitions, and their parts.
pub(super) fn split<'a>(events: &'a [Event], acqs: &[Acq]) -> (HashSet<&'a str>, Vec<Acq>) {
    let mut ids = HashSet::new();
    let mut parts = Vec::new();
    for event in events {
        let Event::Downgraded(d) = event else {
            continue;
        };
        if d.outcome == "lost" {
            continue;
        }
        let Some(acq) = acqs
            .iter()
            .find(|a| a.a.id == d.id && a.a.kind == HoldKind::Write)
        else {
            continue;
        };
        ids.insert(d.id.as_str());
        let mut write = acq.clone();
        write.downgraded = true;
        write.claim_end = write.claim_end.min(d.t_sent);
        write.release = None;
        write.releasing = None;
        let mut read = acq.clone();
        read.downgraded = true;
        read.a.kind = HoldKind::Read;
        read.a.acquired = d.t_sent.max(acq.a.acquired);
        read.a.id = format!("{}~read", acq.a.id);
        parts.push(write);
        parts.push(read);
    }
    (ids, parts)
}
