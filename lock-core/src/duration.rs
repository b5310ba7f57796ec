//! The one duration grammar of this project: `#[redis_locked(ttl = "..", wait = "..")]`
//! checks it at compile time, [`parse_duration`] and `lockctl`'s `--ttl`/`--wait` at run
//! time.
//!
//! This file is lock-core's, and lock-macros compiles the same file (its `src/grammar.rs`
//! is a link to it; a proc-macro crate cannot use lock-core, which depends on it), so the
//! two cannot drift apart. It needs nothing but `std`.
//!
//! A small parser of our own rather than `humantime`, because humantime also accepts forms
//! that are traps for a lock's TTL: `"1M"` (a month, next to `"1m"`, a minute),
//! sub-millisecond units (`"500us"`) that a millisecond-grained TTL would round to zero,
//! fractions and calendar units (`"1d"`, `"1y"`); and its errors list units we do not want
//! to suggest.

use std::fmt;
use std::time::Duration;

const UNITS_HINT: &str = "units are `h`, `m`, `s` and `ms`, e.g. \"10s\", \"1500ms\", \"1m30s\"";

/// The units, largest first; a duration must name them in this order.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Why a duration string was refused: a sentence that quotes the input and says how to
/// write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError(String);

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration: one or more `<digits><unit>` parts with units `h`, `m`, `s` and `ms`,
/// largest unit first and each at most once, optionally separated by spaces (`"250ms"`,
/// `"10s"`, `"1m30s"`, `"1h 15m"`), or a bare `"0"`. Whole milliseconds; no fractions
/// (`"1500ms"`, not `"1.5s"`), no days, months or microseconds. The same grammar as
/// `#[redis_locked(ttl = "..", wait = "..")]` and `lockctl --ttl`.
///
/// ```
/// use lock_core::parse_duration;
/// use std::time::Duration;
///
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert!(parse_duration("1M").is_err()); // humantime's month, one key away from 1m: refused
/// assert!(parse_duration("1.5s").unwrap_err().to_string().contains("1500ms"));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    parse(text).map_err(DurationError)
}

fn parse(text: &str) -> Result<Duration, String> {
    let bytes = text.as_bytes();
    if text.trim().is_empty() {
        return Err(format!("empty duration; {UNITS_HINT}"));
    }
    // Zero is zero in every unit: the one number that needs none.
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Result<Duration, DurationError> {
        Ok(Duration::from_millis(millis))
    }

    #[test]
    fn accepts_each_unit() {
        assert_eq!(parse_duration("250ms"), ms(250));
        assert_eq!(parse_duration("10s"), ms(10_000));
        assert_eq!(parse_duration("2m"), ms(120_000));
        assert_eq!(parse_duration("3h"), ms(10_800_000));
        assert_eq!(parse_duration("0s"), ms(0));
        assert_eq!(parse_duration("0"), ms(0));
        assert_eq!(parse_duration(" 0 "), ms(0));
        assert_eq!(parse_duration("1500ms"), ms(1_500));
    }

    #[test]
    fn accepts_combinations_largest_first() {
        assert_eq!(parse_duration("1m30s"), ms(90_000));
        assert_eq!(parse_duration("1h15m"), ms(4_500_000));
        assert_eq!(parse_duration("1s500ms"), ms(1_500));
        assert_eq!(parse_duration("1h 2m 3s 4ms"), ms(3_723_004));
        assert_eq!(parse_duration(" 10s "), ms(10_000));
    }

    #[test]
    fn rejects_other_forms() {
        for bad in [
            "",
            " ",
            "10",
            "00",
            "s",
            "10sec",
            "1d",
            "1M",
            "1y",
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
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn errors_say_how_to_fix() {
        let err = |text: &str| parse_duration(text).unwrap_err().to_string();
        assert!(err("10").contains("\"10s\""));
        assert!(err("1.5s").contains("1500ms"));
        assert!(err("10sec").contains("unknown unit `sec`"));
        assert!(err("1M").contains("unknown unit `M`"));
        assert!(err("30s1m").contains("largest to smallest"));
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        assert!(parse_duration("99999999999999999999999h").is_err());
        assert!(parse_duration("18446744073709551615h").is_err());
    }
}
