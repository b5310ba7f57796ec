//! Redlock waiters' tickets: a waiting request's place in line, the same on every master
//! so that their queues agree on the order.
//!
//! A ticket is when the request began waiting, on the masters' clock rather than the
//! client's: each `Locker` measures how far its clock is from the masters' (`TIME` on every
//! master, the median of the differences, each read at the middle of its round trip) and
//! corrects its own readings by it, measuring again every [`FRESH_FOR`]. Tickets taken on
//! a client's own clock ordered a client whose clock ran 5 s ahead behind every other
//! waiter for good (it never got the lock), and one 5 s behind ahead of every other: it
//! favoured that client and, taking the head's place while the lock was reserved for the
//! previous head, left the lock idle for claim windows. Corrected, clients' clock errors
//! change nothing; what remains is the spread of the masters' own clocks (the median's
//! choice, the same for every client) and half a round trip.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a measured offset is used before it is measured again.
pub(crate) const FRESH_FOR: Duration = Duration::from_secs(10);

/// A `Locker`'s clock for Redlock tickets.
#[derive(Debug, Default)]
pub(crate) struct TicketClock {
    /// Added to every reading of the client's clock, in microseconds: 0, except in tests
    /// that stand for a client whose clock is wrong.
    skew_us: i64,
    /// The masters' clock minus ours (µs), and when it was measured.
    offset: Mutex<Option<(i64, Instant)>>,
}

impl TicketClock {
    /// A clock whose readings are off by `skew_us` (tests).
    pub fn skewed(skew_us: i64) -> TicketClock {
        TicketClock {
            skew_us,
            offset: Mutex::new(None),
        }
    }

    /// This client's clock, in microseconds since the UNIX epoch (skew included).
    pub fn client_now_us(&self) -> i64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
            });
        since.saturating_add(self.skew_us)
    }

    /// A ticket for now, if the offset was measured within [`FRESH_FOR`].
    pub fn ticket_if_fresh(&self, now: Instant) -> Option<u64> {
        let offset = *self.offset.lock().unwrap_or_else(PoisonError::into_inner);
        let (offset, measured) = offset?;
        (now.saturating_duration_since(measured) < FRESH_FOR).then(|| self.ticket_with(offset))
    }

    /// Records the masters' offsets (server minus client, µs) just measured: their median.
    /// Nothing answered: the last offset stays, or none.
    pub fn record(&self, mut offsets: Vec<i64>, now: Instant) -> u64 {
        offsets.sort_unstable();
        let median = offsets.get(offsets.len() / 2).copied();
        let mut slot = self.offset.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(median) = median {
            *slot = Some((median, now));
        }
        let offset = slot.map_or(0, |(offset, _)| offset);
        drop(slot);
        self.ticket_with(offset)
    }

    fn ticket_with(&self, offset: i64) -> u64 {
        u64::try_from(self.client_now_us().saturating_add(offset)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_clock_is_corrected_by_the_median_offset() {
        let clock = TicketClock::skewed(5_000_000);
        let now = Instant::now();
        assert_eq!(clock.ticket_if_fresh(now), None, "never measured");
        let true_now = clock.client_now_us() - 5_000_000;
        // Masters at +1 ms, -2 ms and +40 s of the true time: the median is +1 ms.
        let skewed = clock.client_now_us();
        let offsets = vec![
            true_now + 1_000 - skewed,
            true_now - 2_000 - skewed,
            true_now + 40_000_000 - skewed,
        ];
        let ticket = clock.record(offsets, now) as i64;
        assert!(
            (ticket - (true_now + 1_000)).abs() < 50_000,
            "{ticket} vs {true_now}"
        );
        let again = clock.ticket_if_fresh(now).expect("fresh") as i64;
        assert!((again - (true_now + 1_000)).abs() < 50_000);
        assert_eq!(clock.ticket_if_fresh(now + FRESH_FOR), None, "stale");
    }
}
