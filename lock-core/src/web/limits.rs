//! Which refusals were a concurrency limit rather than a busy lock.
//!
//! `#[redis_locked(permits = N)]` on an HTTP handler fails like any annotated function: the
//! handler returns `Err(LockError::Busy)` (or `Timeout`, with a `wait`), and axum turns it
//! into a response through `LockError`'s `IntoResponse`, which would answer 409 as for a
//! busy lock. [`LockLayer::permits`](super::LockLayer::permits) answers 429 with
//! `Retry-After` instead. So that both answer alike, the macro notes each refused permit
//! here ([`note`]) just before the handler returns it, and
//! [`ErrorResponses::response`](super::ErrorResponses::response) (behind `IntoResponse`)
//! answers a refusal it finds here as the layer does ([`take`]).
//!
//! `LockError` has no variant that says "all N permits are taken" and this module cannot
//! give it one, so a refusal is recognised by what it carries: the same name and the same
//! `Retry-After`, within a few seconds, taken once. A busy *lock* of the same name as a
//! semaphore (two primitives that share nothing in Redis) could only be mistaken for a
//! limit if a noted refusal was never answered (the handler's error type did not go
//! through `ErrorResponses::response`) and the lock's error carried the same `Retry-After`
//! to the millisecond within those seconds.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::LockError;

/// How long a noted refusal waits for its response.
const KEEP: Duration = Duration::from_secs(5);

/// The most refusals kept (the oldest go first): a refusal is answered microseconds after
/// it is noted, so this only bounds the ones never answered.
const MOST: usize = 1024;

struct Refusal {
    name: String,
    retry_after: Option<Duration>,
    permits: u64,
    at: Instant,
}

static REFUSED: Mutex<VecDeque<Refusal>> = Mutex::new(VecDeque::new());

/// Notes that `err` refused one of `permits` permits (contention errors only).
pub(crate) fn note(err: &LockError, permits: u64) {
    let (true, Some(name)) = (err.is_contention(), err.name()) else {
        return;
    };
    let now = Instant::now();
    let mut refused = REFUSED.lock().unwrap_or_else(PoisonError::into_inner);
    prune(&mut refused, now);
    if refused.len() >= MOST {
        refused.pop_front();
    }
    refused.push_back(Refusal {
        name: name.to_owned(),
        retry_after: err.retry_after(),
        permits,
        at: now,
    });
}

/// The permit count if `err` is a refusal noted by [`note`] (which it then forgets).
pub(crate) fn take(err: &LockError) -> Option<u64> {
    let (true, Some(name)) = (err.is_contention(), err.name()) else {
        return None;
    };
    let mut refused = REFUSED.lock().unwrap_or_else(PoisonError::into_inner);
    if refused.is_empty() {
        return None;
    }
    prune(&mut refused, Instant::now());
    let retry_after = err.retry_after();
    let at = refused
        .iter()
        .rposition(|r| r.name == name && r.retry_after == retry_after)?;
    refused.remove(at).map(|r| r.permits)
}

fn prune(refused: &mut VecDeque<Refusal>, now: Instant) {
    while refused
        .front()
        .is_some_and(|r| now.saturating_duration_since(r.at) > KEEP)
    {
        refused.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(name: &str, retry_ms: u64) -> LockError {
        LockError::Busy {
            name: name.into(),
            holder: None,
            retry_after: Some(Duration::from_millis(retry_ms)),
        }
    }

    #[test]
    fn a_noted_refusal_is_recognised_once() {
        note(&busy("limits-test:a", 1500), 3);
        assert_eq!(take(&busy("limits-test:b", 1500)), None, "another name");
        assert_eq!(take(&busy("limits-test:a", 1400)), None, "another hint");
        assert_eq!(take(&busy("limits-test:a", 1500)), Some(3));
        assert_eq!(take(&busy("limits-test:a", 1500)), None, "taken once");
        // Only contention is a limit.
        let lost = LockError::Lost {
            name: "limits-test:c".into(),
        };
        note(&lost, 3);
        assert_eq!(take(&lost), None);
    }
}
