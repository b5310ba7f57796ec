//! `"10s"`-style durations for `ttl` and `wait`, checked while the macro expands: the
//! project's one duration grammar (`grammar.rs`, lock-core's `duration.rs` compiled here
//! too, also behind `lock_core::parse_duration` and `lockctl --ttl`), plus the ranges of a
//! `ttl` and a `wait`.

use std::time::Duration;

/// Longest `ttl` and `wait`: mirrors `lock_core::MAX_TTL` and `lock_core::MAX_WAIT` (24h),
/// so an out-of-range value fails at compile time instead of on every call.
pub(crate) const MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses a duration string into whole milliseconds, with lock-core's grammar (the same
/// file, `grammar.rs`). Errors are sentences for the user.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    crate::grammar::parse_duration(text).map_err(|err| err.to_string())
}

/// A `ttl`: more than zero, at most 24h.
pub(crate) fn ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse(text)?;
    if ttl.is_zero() {
        return Err(
            "`ttl` must be more than zero: a lock that expires at once protects nothing; e.g. ttl = \"10s\""
                .to_owned(),
        );
    }
    if ttl > MAX {
        return Err(format!(
            "`ttl` {text:?} is longer than 24h (lock_core::MAX_TTL); a short ttl is enough, the lease is renewed while the body runs"
        ));
    }
    Ok(ttl)
}

/// A `wait`: zero means "try once", at most 24h.
pub(crate) fn wait(text: &str) -> Result<Duration, String> {
    let wait = parse(text)?;
    if wait > MAX {
        return Err(format!(
            "`wait` {text:?} is longer than 24h (lock_core::MAX_WAIT)"
        ));
    }
    Ok(wait)
}

/// A `hold_at_least`: more than zero, at most 24h (the key's TTL at the release).
pub(crate) fn hold_at_least(text: &str) -> Result<Duration, String> {
    let hold = parse(text)?;
    if hold.is_zero() {
        return Err(
            "`hold_at_least` must be more than zero (leave it out for no minimum hold); e.g. hold_at_least = \"5m\" for a job scheduled every few minutes"
                .to_owned(),
        );
    }
    if hold > MAX {
        return Err(format!(
            "`hold_at_least` {text:?} is longer than 24h (lock_core::MAX_TTL)"
        ));
    }
    Ok(hold)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Result<Duration, String> {
        Ok(Duration::from_millis(millis))
    }

    #[test]
    fn ttl_range() {
        assert!(ttl("0s").unwrap_err().contains("more than zero"));
        assert!(ttl("0ms").is_err());
        assert_eq!(ttl("1ms"), ms(1));
        assert_eq!(ttl("24h"), Ok(MAX));
        assert!(ttl("24h1ms").unwrap_err().contains("24h"));
        assert!(ttl("25h").is_err());
    }

    #[test]
    fn hold_at_least_range() {
        assert!(hold_at_least("0s").unwrap_err().contains("more than zero"));
        assert_eq!(hold_at_least("5m"), ms(300_000));
        assert!(hold_at_least("25h").is_err());
        assert!(hold_at_least("soon").is_err());
    }

    #[test]
    fn wait_range() {
        assert_eq!(wait("0s"), ms(0));
        assert_eq!(wait("24h"), Ok(MAX));
        assert!(wait("1440m1s").is_err());
    }
}
