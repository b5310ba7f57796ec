//! The pieces of [`LockError`](super::LockError)'s messages.

use std::time::Duration;

use super::WaitSetting;

/// `duration` as it is written in this project's grammar (`0s`, `1500ms` as `1s500ms`,
/// `25h`, `1m30s`), for messages that quote a setting back: not `Debug`'s `0ns` or
/// `90000s`. A part below a millisecond, which the grammar cannot write, is shown as
/// `Debug` shows it.
pub(crate) fn shown(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".to_owned();
    }
    if !duration.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{duration:?}");
    }
    let mut millis = duration.as_millis();
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        if millis >= size {
            out.push_str(&format!("{}{unit}", millis / size));
            millis %= size;
        }
    }
    out
}

/// The end of a full semaphore's message: what to do.
/// "all 8 permits of `x` are taken", or for a request of several, "6 of the 8 permits of
/// `x` are not free".
pub(super) fn limit_head(name: &str, permits: u64, asked: u64, waited: bool) -> String {
    if asked <= 1 {
        let taken = if waited { "still taken" } else { "taken" };
        return format!("all {permits} permits of `{name}` are {taken}");
    }
    let free = if waited {
        "did not come free"
    } else {
        "are not free"
    };
    format!("{asked} of the {permits} permits of `{name}` {free}")
}

pub(super) fn limit_advice(waited: &Option<Duration>, setting: &WaitSetting) -> String {
    if waited.is_some() {
        ", wait longer or raise the limit".to_owned()
    } else {
        format!(" or wait for a permit with {setting}")
    }
}

/// ` after waiting 2s (the first lease ends in 1.5s unless its holder renews it)`, or what
/// of it is known. Not "frees in at most": a holder that renews keeps it longer.
pub(super) fn limit_suffix(waited: &Option<Duration>, retry_after: &Option<Duration>) -> String {
    let mut out = String::new();
    if let Some(waited) = waited {
        out.push_str(&format!(" after waiting {waited:?}"));
    }
    if let Some(left) = retry_after {
        out.push_str(&format!(
            " (the first lease ends in {left:?} unless its holder renews it)"
        ));
    }
    out
}

/// What a failed replica check found connected, for its message.
pub(super) fn connected_suffix(connected: Option<u32>) -> String {
    match connected {
        Some(0) => " (the master has no connected replica)".to_owned(),
        Some(1) => {
            " (1 replica is connected but did not acknowledge: stalled or lagging)".to_owned()
        }
        Some(n) => {
            format!(" ({n} replicas are connected but too few acknowledged: stalled or lagging)")
        }
        None => String::new(),
    }
}

pub(super) fn holder_suffix(holder: &Option<String>, retry_after: &Option<Duration>) -> String {
    let mut out = String::new();
    if let Some(holder) = holder {
        out.push_str(" (held by ");
        out.push_str(holder);
        out.push(')');
    }
    if let Some(left) = retry_after {
        out.push_str(&format!(", its lease ends in {left:?} unless renewed"));
    }
    out
}
