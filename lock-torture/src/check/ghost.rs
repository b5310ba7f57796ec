//! Rule `ghost-grant`: a cancelled request leaves nothing behind.
//!
//! A request whose future is dropped (a timeout around it, an aborted task) must leave the
//! lock's queue with it; otherwise a later release hands the lock to a Locker that no longer
//! wants it: the key carries that Locker's value for a claim window, newcomers are refused,
//! and the next live waiter waits the window out. After a cancellation the client looks at
//! the lock's key every few milliseconds for as long as the dropped request's queue place
//! could live ([`Event::CancelProbe`]). A value with the client's own holder label whose
//! token was never granted is a ghost, unless a request of the same client for the same
//! name was live then or had ended less than [`super::liveness::THRESHOLD`] before (a
//! reservation for a request that just gave up, or the undo of an attempt that was in
//! flight when it was dropped).

use super::liveness::THRESHOLD;
use super::{requests, Report, Violation};
use crate::event::{lease_token, Event};

/// Checks every probe that followed a cancellation.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let granted = requests::granted_tokens(events);
    let requests = requests::per_client(events, true);
    for event in events {
        let Event::CancelProbe {
            client,
            name,
            t_cancel,
            looks,
        } = event
        else {
            continue;
        };
        report.cancel_probes += 1;
        let label = format!("torture-c{client}@");
        let own = requests.get(&(*client, name.as_str()));
        for look in looks {
            let Some(value) = look.value.as_deref() else {
                continue;
            };
            let token = lease_token(value);
            let holder = value
                .strip_prefix('~')
                .unwrap_or(value)
                .split_once(':')
                .map(|(_, h)| h);
            if !holder.is_some_and(|h| h.starts_with(&label)) || granted.contains(token) {
                continue;
            }
            let live = own.is_some_and(|list| {
                list.iter()
                    .any(|&(s, e)| s <= look.t && look.t <= e.saturating_add(THRESHOLD))
            });
            if live {
                continue;
            }
            report.violations.push(Violation {
                rule: "ghost-grant",
                name: name.clone(),
                detail: format!(
                    "client {client} had no live request for the lock (its last was dropped at {t_cancel}), yet at {} the key held its value (token {token}, never granted): a release handed the lock to a request that no longer existed",
                    look.t
                ),
            });
            // One per probe is enough.
            break;
        }
    }
}
