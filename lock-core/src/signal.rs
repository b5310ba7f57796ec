//! How a waiter is woken: a `Notify`, plus what the waiter-queue message that woke it said,
//! so that a message that only moves the waiter's timer costs no Redis call.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

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
}

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
    fn a_grant_is_not_overwritten() {
        let wake = Wake::default();
        wake.post(Hint::Granted);
        wake.post(Hint::Head(Duration::from_secs(1)));
        assert_eq!(wake.take_hint(), Some(Hint::Granted));
        assert_eq!(wake.take_hint(), None);
    }
}
