//! `"10s"`-style durations for `ttl` and `wait`, checked while the macro expands.
//!
//! Accepted: one or more `<digits><unit>` parts with units `h`, `m`, `s`, `ms`, largest unit
//! first and each unit at most once, optionally separated by spaces: `"250ms"`, `"10s"`,
//! `"1m30s"`, `"1h 15m"`. A small parser of our own rather than `humantime`, because
//! humantime also accepts forms that are traps here: `"1M"` (a month, next to `"1m"`),
//! sub-millisecond units (`"500us"`) that a millisecond-grained TTL would round to zero,
//! fractions and calendar units; and its errors list units we do not want to suggest.

use std::time::Duration;

/// Longest `ttl` and `wait`: mirrors `lock_core::MAX_TTL` and `lock_core::MAX_WAIT` (24h),
/// so an out-of-range value fails at compile time instead of on every call.
pub(crate) const MAX: Duration = Duration::from_secs(24 * 60 * 60);

const UNITS_HINT: &str = "units are `h`, `m`, `s` and `ms`, e.g. \"10s\", \"1500ms\", \"1m30s\"";

/// The units, largest first; a duration must name them in this order.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses a duration string into whole milliseconds. Errors are sentences for the user.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let bytes = text.as_bytes();
    if text.trim().is_empty() {
        return Err(format!("empty duration; {UNITS_HINT}"));
    }
    let mut total: u64 = 0;
    // Index into UNITS of the last unit seen: the next one must be strictly smaller.
    let mut last_unit: Option<usize> = None;
    let mut pos = 0;
    while pos < bytes.len() {
        if bytes[pos] == b' ' {
            pos += 1;
            continue;
        }
        let digits_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos == digits_start {
            return Err(format!(
                "expected a number at `{}` in {text:?}; {UNITS_HINT}",
                &text[pos..]
            ));
        }
        let number = &text[digits_start..pos];
        let unit_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_alphabetic() {
            pos += 1;
        }
        let unit = &text[unit_start..pos];
        if unit.is_empty() {
            return Err(missing_unit(text, number, &text[pos..]));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(format!("unknown unit `{unit}` in {text:?}; {UNITS_HINT}"));
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(format!(
                "units in {text:?} must go from largest to smallest, each at most once (h, m, s, ms), e.g. \"1m30s\""
            ));
        }
        last_unit = Some(index);
        let value: u64 = number
            .parse()
            .map_err(|_| format!("{text:?} is far too long; the limit is 24h"))?;
        total = value
            .checked_mul(UNITS[index].1)
            .and_then(|millis| total.checked_add(millis))
            .ok_or_else(|| format!("{text:?} is far too long; the limit is 24h"))?;
    }
    Ok(Duration::from_millis(total))
}

/// A number without a unit: say which unit is missing, and spot fractions.
fn missing_unit(text: &str, number: &str, rest: &str) -> String {
    if rest.starts_with('.') {
        return format!(
            "fractions are not supported in {text:?}; use a smaller unit, e.g. \"1500ms\" instead of \"1.5s\""
        );
    }
    if rest.is_empty() {
        return format!(
            "`{number}` has no unit; write \"{number}s\" or \"{number}ms\" ({UNITS_HINT})"
        );
    }
    format!("expected a unit after `{number}` in {text:?}; {UNITS_HINT}")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Result<Duration, String> {
        Ok(Duration::from_millis(millis))
    }

    #[test]
    fn accepts_each_unit() {
        assert_eq!(parse("250ms"), ms(250));
        assert_eq!(parse("10s"), ms(10_000));
        assert_eq!(parse("2m"), ms(120_000));
        assert_eq!(parse("3h"), ms(10_800_000));
        assert_eq!(parse("0s"), ms(0));
        assert_eq!(parse("1500ms"), ms(1_500));
    }

    #[test]
    fn accepts_combinations_largest_first() {
        assert_eq!(parse("1m30s"), ms(90_000));
        assert_eq!(parse("1h15m"), ms(4_500_000));
        assert_eq!(parse("1s500ms"), ms(1_500));
        assert_eq!(parse("1h 2m 3s 4ms"), ms(3_723_004));
        assert_eq!(parse(" 10s "), ms(10_000));
    }

    #[test]
    fn rejects_other_forms() {
        for bad in [
            "",
            " ",
            "10",
            "s",
            "10sec",
            "1d",
            "1M",
            "500us",
            "1.5s",
            "-1s",
            "10 s",
            "30s1m",
            "1s1s",
            "1ms1s",
            "10s,",
            "ten seconds",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn errors_say_how_to_fix() {
        assert!(parse("10").unwrap_err().contains("\"10s\""));
        assert!(parse("1.5s").unwrap_err().contains("1500ms"));
        assert!(parse("10sec").unwrap_err().contains("unknown unit `sec`"));
        assert!(parse("30s1m").unwrap_err().contains("largest to smallest"));
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        assert!(parse("99999999999999999999999h").is_err());
        assert!(parse("18446744073709551615h").is_err());
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
    fn wait_range() {
        assert_eq!(wait("0s"), ms(0));
        assert_eq!(wait("24h"), Ok(MAX));
        assert!(wait("1440m1s").is_err());
    }
}
