//! Durations on the command line (`30s`, `1m30s`, `500ms`) and in output.

use std::time::Duration;

/// Parses a duration such as `30s`, `1m30s`, `1.5s`, `500ms` or `2h`. A bare `0` is zero;
/// any other number needs a unit, so that `--ttl 30` is not silently read as 30 ms or 30 s.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(lockctl::parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(lockctl::parse_duration("500ms"), Ok(Duration::from_millis(500)));
/// assert!(lockctl::parse_duration("30").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration; expected something like 30s, 1m30s or 500ms".into());
    }
    if text.chars().all(|c| c.is_ascii_digit()) {
        if text.bytes().all(|b| b == b'0') {
            return Ok(Duration::ZERO);
        }
        return Err(format!(
            "`{text}` has no unit; write {text}s, {text}ms or {text}m"
        ));
    }
    humantime::parse_duration(text).map_err(|err| {
        format!("`{text}` is not a duration ({err}); expected something like 30s, 1m30s or 500ms")
    })
}

/// A short, human-readable form of `duration` that [`parse_duration`] reads back (to the
/// shown precision): `250ms`, `1.5s`, `27.9s`, `1m30s`, `2h5m`.
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
    fn parses_common_forms() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
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
    fn formats_round_trip() {
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
            assert!(parse_duration(&formatted).is_ok(), "{formatted}");
        }
    }
}
