//! How a waiter is woken: a `Notify`, plus what the waiter-queue message that woke it said,
//! so that a message that only moves the waiter's timer costs no Redis call.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// What a message on the Locker's channel said about one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hint {
    /// The lock is reserved for this Locker: claim it now.
    Granted,
    /// The lock is reserved for the waiter ahead of us for this long; if it has not claimed
    /// it by then, it is our turn.
    Standby(Duration),
    /// We are first in line behind a holder whose lease lasts this long.
    Head(Duration),
}

/// The wake-up signal of one lock name in one Locker.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    notify: Notify,
    hint: Mutex<Option<Hint>>,
    /// A permit granted to this waiter by another request of its Locker (in that request's
    /// own script), valid from this instant (sent before the script ran).
    taken: Mutex<Option<Instant>>,
    /// A permit granted outright to this waiter by a request of another Locker, at this
    /// server time (ms, Redis's `TIME`): the waiter maps it onto its own clock.
    given: Mutex<Option<u64>>,
    /// The latch rounds announced open on this signal's channel, newest last (a few: each
    /// waiter looks as soon as it is woken).
    opened: Mutex<VecDeque<u64>>,
}

/// How many opened latch rounds a signal remembers.
const OPENED_KEPT: usize = 16;

impl Wake {
    /// A future that completes at the next wake-up; enable it before looking at Redis.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Wakes every waiter without a hint: look at Redis (a local release, or messages that
    /// may have been missed).
    pub fn wake(&self) {
        self.notify.notify_waiters();
    }

    /// Wakes every waiter with `hint`. A grant is never overwritten by a later timer hint.
    pub fn post(&self, hint: Hint) {
        {
            let mut slot = self.hint.lock().unwrap_or_else(PoisonError::into_inner);
            if *slot != Some(Hint::Granted) {
                *slot = Some(hint);
            }
        }
        self.notify.notify_waiters();
    }

    /// Wakes every waiter: what it waits for was granted to it at `at` (a permit handed
    /// over inside another request's script; no claim follows).
    pub fn post_taken(&self, at: Instant) {
        *self.taken.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
        self.notify.notify_waiters();
    }

    /// Wakes every waiter: what it waits for was granted to it outright at server time
    /// `server_ms` (a permit handed over by another Locker's script; no claim follows).
    pub fn post_given(&self, server_ms: u64) {
        *self.given.lock().unwrap_or_else(PoisonError::into_inner) = Some(server_ms);
        self.notify.notify_waiters();
    }

    /// Wakes every waiter: latch round `round` opened (told by one message for all of them).
    pub fn post_opened(&self, round: u64) {
        {
            let mut opened = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
            if opened.len() == OPENED_KEPT {
                opened.pop_front();
            }
            opened.push_back(round);
        }
        self.notify.notify_waiters();
    }

    /// Whether latch round `round` was announced open on this signal.
    pub fn has_opened(&self, round: u64) -> bool {
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&round)
    }

    /// The grant posted by [`Wake::post_taken`], taken (once).
    pub fn take_taken(&self) -> Option<Instant> {
        self.taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The grant posted by [`Wake::post_given`] (its server time, ms), taken (once).
    pub fn take_given(&self) -> Option<u64> {
        self.given
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The hint posted since the last call, if any.
    pub fn take_hint(&self) -> Option<Hint> {
        self.hint
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// Parses a waiter-queue message, `<kind>:<ms>:<lock key>`, into the lock key and its hint.
pub(crate) fn parse_message(payload: &str) -> Option<(&str, Hint)> {
    let (kind, rest) = payload.split_once(':')?;
    let (millis, key) = rest.split_once(':')?;
    let millis = Duration::from_millis(millis.parse().ok()?);
    let hint = match kind {
        "g" => Hint::Granted,
        "s" => Hint::Standby(millis),
        "h" => Hint::Head(millis),
        _ => return None,
    };
    Some((key, hint))
}

/// Parses a latch's opening, `o:<round>`, into the round.
pub(crate) fn parse_opened(payload: &str) -> Option<u64> {
    payload.strip_prefix("o:")?.parse().ok()
}

/// What a batch of permit grants to one Locker hands its waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Batch {
    /// Reservations, each to claim within the claim window (`b`).
    Reserved,
    /// Permits granted outright at this server time (ms): no claim follows (`B`).
    Given(u64),
}

/// Parses a batch of grants to one Locker, `b:<ms>:<id>,<id>,...:<holders key>` or
/// `B:<server ms>:<id>,...:<holders key>`, into what it hands out, the holders key and the
/// waiter ids (each waiter's route is `<holders key>#<id>`).
pub(crate) fn parse_batch(payload: &str) -> Option<(Batch, &str, impl Iterator<Item = &str>)> {
    let (kind, rest) = payload.split_once(':')?;
    let (millis, rest) = rest.split_once(':')?;
    let millis = millis.parse::<u64>().ok()?;
    let batch = match kind {
        "b" => Batch::Reserved,
        "B" => Batch::Given(millis),
        _ => return None,
    };
    let (ids, key) = rest.split_once(':')?;
    Some((batch, key, ids.split(',').filter(|id| !id.is_empty())))
}

/// Parses a permit granted outright to one waiter, `G:<server ms>:<holders key>#<id>`,
/// into the waiter's route and the grant's server time (ms).
pub(crate) fn parse_given(payload: &str) -> Option<(&str, u64)> {
    let rest = payload.strip_prefix("G:")?;
    let (millis, route) = rest.split_once(':')?;
    Some((route, millis.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse_and_keys_keep_their_colons() {
        assert_eq!(
            parse_message("g:100:lock:{a:b}"),
            Some(("lock:{a:b}", Hint::Granted))
        );
        assert_eq!(
            parse_message("s:100:lock:{x}"),
            Some(("lock:{x}", Hint::Standby(Duration::from_millis(100))))
        );
        assert_eq!(
            parse_message("h:30000:lock:{x}"),
            Some(("lock:{x}", Hint::Head(Duration::from_secs(30))))
        );
        for bad in ["", "g", "g:", "x:1:k", "s:-1:k", "s:ms:k"] {
            assert_eq!(parse_message(bad), None, "{bad}");
        }
    }

    #[test]
    fn batches_name_each_waiter_and_keep_the_keys_colons() {
        let (batch, key, ids) = parse_batch("b:100:ab,cd:lock:{a:b}:rw").expect("a batch");
        assert_eq!((batch, key), (Batch::Reserved, "lock:{a:b}:rw"));
        assert_eq!(ids.collect::<Vec<_>>(), ["ab", "cd"]);
        let (batch, key, ids) = parse_batch("B:1764375000123:ab,cd:lock:{a:b}:rw").expect("given");
        assert_eq!(
            (batch, key),
            (Batch::Given(1_764_375_000_123), "lock:{a:b}:rw")
        );
        assert_eq!(ids.collect::<Vec<_>>(), ["ab", "cd"]);
        for bad in [
            "",
            "b:",
            "b:1",
            "b:x:ab:k",
            "g:100:k",
            "B:-1:ab:k",
            "G:100:k#ab",
        ] {
            assert!(parse_batch(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_grant_outright_names_its_waiter_and_its_server_time() {
        assert_eq!(
            parse_given("G:1764375000123:lock:{a:b}:sem#ab12"),
            Some(("lock:{a:b}:sem#ab12", 1_764_375_000_123))
        );
        for bad in ["", "G:", "G:1", "G:x:k#a", "G:-5:k#a", "g:100:k", "B:1:a:k"] {
            assert_eq!(parse_given(bad), None, "{bad}");
        }
        assert_eq!(parse_message("G:100:k#a"), None, "not a lock's turn");
        let wake = Wake::default();
        wake.post_given(42);
        assert_eq!(wake.take_given(), Some(42));
        assert_eq!(wake.take_given(), None);
    }

    #[test]
    fn a_latch_opening_names_its_round_and_wakes_for_it_only() {
        assert_eq!(
            parse_opened("o:1764375000123456"),
            Some(1_764_375_000_123_456)
        );
        for bad in ["", "o:", "o:x", "g:100:k", "1"] {
            assert_eq!(parse_opened(bad), None, "{bad}");
        }
        let wake = Wake::default();
        wake.post_opened(7);
        assert!(wake.has_opened(7) && !wake.has_opened(8));
        for round in 100..100 + OPENED_KEPT as u64 {
            wake.post_opened(round);
        }
        assert!(!wake.has_opened(7), "only the last few are kept");
        assert!(wake.has_opened(100 + OPENED_KEPT as u64 - 1));
    }

    #[test]
    fn a_grant_is_not_overwritten() {
        let wake = Wake::default();
        wake.post(Hint::Granted);
        wake.post(Hint::Head(Duration::from_secs(1)));
        assert_eq!(wake.take_hint(), Some(Hint::Granted));
        assert_eq!(wake.take_hint(), None);
    }
}
