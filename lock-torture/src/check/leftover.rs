//! Rule `leftover-after-error`: a failed acquire leaves nothing behind.
//!
//! With Redlock, an attempt sets its value on every node it reaches before it knows whether
//! it won; when it fails (here: one node holds a foreign value and answers `WRONGTYPE`), it
//! must take that value back from every node before it returns, or the lock stays taken by
//! nobody for a whole TTL. After such an error the client reads the key on every node
//! twice, a quarter of a TTL apart ([`crate::event::Event::Probe`]). A value carrying the
//! client's own holder label that was there both times, whose token no lease was ever
//! granted with, is a leftover, unless another request of the same client for the same
//! name was in flight meanwhile (its attempt may be the one seen).

use std::collections::HashSet;

use super::{requests, Report, Violation};
use crate::clock::ms;
use crate::event::{Event, Look};

/// Checks every probe.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let granted = requests::granted_tokens(events);
    let requests = requests::per_client(events, false);
    for event in events {
        let Event::Probe {
            client,
            name,
            t_error,
            looks,
        } = event
        else {
            continue;
        };
        report.foreign_probes += 1;
        let Some(last) = looks.iter().map(|l| l.t).max() else {
            continue;
        };
        let busy = requests.get(&(*client, name.as_str())).is_some_and(|list| {
            list.iter()
                .any(|&(start, end)| start < last && end > *t_error)
        });
        if busy {
            continue;
        }
        let label = format!("torture-c{client}@");
        let mut reported = HashSet::new();
        for first in looks {
            let Some(token) = own_token(first, &label) else {
                continue;
            };
            if granted.contains(token) {
                continue;
            }
            let stayed = looks
                .iter()
                .filter(|l| l.node == first.node && l.t > first.t)
                .any(|l| own_token(l, &label) == Some(token));
            if stayed && reported.insert((first.node, token)) {
                report.violations.push(Violation {
                    rule: "leftover-after-error",
                    name: name.clone(),
                    detail: format!(
                        "client {client}'s acquire failed with WrongType at {t_error}; its value (token {token}, never granted) still sat on node {} {} later",
                        first.node,
                        ms(last - t_error)
                    ),
                });
            }
        }
    }
}

/// The token of a value written by this client (its holder label), if the look found one.
fn own_token<'v>(look: &'v Look, label: &str) -> Option<&'v str> {
    // lock-core marks a value that queued waiters listen for with a leading `~`.
    let value = look.value.as_deref()?;
    let (token, holder) = value.strip_prefix('~').unwrap_or(value).split_once(':')?;
    holder.starts_with(label).then_some(token)
}
