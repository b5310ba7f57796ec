//! Durations on the command line (`30s`, `1m30s`, `500ms`: lock-core's grammar, the one the
//! `#[redis_locked]` attribute checks) and in output.

use std::time::Duration;

/// Parses a duration with the project's one grammar ([`lock_core::parse_duration`], the
/// same as `#[redis_locked(ttl = "..")]`): `30s`, `1m30s`, `500ms`, `2h`, or `0`. Units `h`,
/// `m`, `s`, `ms`, largest first; no fractions, days or months, so `--ttl 1M` is an error
/// rather than a month, and `--ttl 30` is not silently read as 30 ms or 30 s.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(lockctl::parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(lockctl::parse_duration("500ms"), Ok(Duration::from_millis(500)));
/// assert!(lockctl::parse_duration("30").is_err());
/// assert!(lockctl::parse_duration("1M").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    lock_core::parse_duration(text).map_err(|err| err.to_string())
}

/// A short, human-readable form of `duration` for output: `250ms`, `1.5s`, `27.9s`,
/// `1m30s`, `2h5m`. Below a minute it shows tenths of a second, which [`parse_duration`]
/// does not read (no fractions); everything else reads back.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1_000 {
        return format!("{millis}ms");
    }
    if millis < 60_000 {
        let tenths = (millis + 50) / 100;
        return if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        };
    }
    let secs = duration.as_secs();
    if secs < 3_600 {
        let (m, s) = (secs / 60, secs % 60);
        return if s == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{s}s")
        };
    }
    let (h, m) = (secs / 3_600, secs % 3_600 / 60);
    if m == 0 {
        format!("{h}h")
    } else {
        format!("{h}h{m}m")
    }
}

/// Milliseconds, saturating, for JSON output.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_grammar_with_the_macro() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        // What humantime read and the attribute refuses: refused here too, with the fix.
        assert!(parse_duration("1M")
            .unwrap_err()
            .contains("unknown unit `M`"));
        assert!(parse_duration("1d")
            .unwrap_err()
            .contains("unknown unit `d`"));
        assert!(parse_duration("1.5s").unwrap_err().contains("1500ms"));
    }

    #[test]
    fn refuses_bad_input_with_a_hint() {
        for bad in ["", "30", "abc", "3x", "-1s", "1s2"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(!err.contains('\n'), "{bad}: {err}");
        }
        assert!(parse_duration("30").unwrap_err().contains("30s"));
    }

    #[test]
    fn formats_for_output() {
        for (millis, text) in [
            (250, "250ms"),
            (1_000, "1s"),
            (1_500, "1.5s"),
            (27_949, "27.9s"),
            (59_990, "60s"),
            (90_000, "1m30s"),
            (120_000, "2m"),
            (7_500_000, "2h5m"),
        ] {
            let formatted = format_duration(Duration::from_millis(millis));
            assert_eq!(formatted, text);
            if !formatted.contains('.') {
                assert!(parse_duration(&formatted).is_ok(), "{formatted}");
            }
        }
    }
}
