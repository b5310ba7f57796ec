//! Exit codes, and the one-line failure every command reports through.

use std::fmt;
use std::process::ExitStatus;

use lock_core::LockError;

use crate::duration::format_duration;
use crate::holder::display_safe;

/// Success; for `run`, the command exited 0.
pub const SUCCESS: u8 = 0;
/// `status`: nothing of the name is held (its lock, its semaphore's permits and its
/// read-write lock are all free), so that `if lockctl status NAME; then ...` reads "if it is
/// held"; `leader`: the election has no leader. Not an error: the status is printed.
pub const FREE: u8 = 1;
/// `doctor`: a finding makes the server unsafe for locks (or locks cannot work there).
pub const UNSAFE: u8 = 2;
/// A bad command line: unknown option, bad duration, bad Redis URL, invalid lock name
/// (`EX_USAGE`).
pub const USAGE: u8 = 64;
/// Redis cannot be reached, refused the connection, or the connection broke
/// (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// Anything unexpected: an error reply from Redis, a key that is not a lock (WRONGTYPE), a
/// failure to set up signal handling (`EX_SOFTWARE`).
pub const INTERNAL: u8 = 70;
/// Redis refuses lockctl's settings: a password is required and none was given, the user
/// or password is wrong, the database does not exist, the ACL user may not run a command
/// lockctl needs (`EX_CONFIG`). Retrying does not help; fix --url (or REDIS_URL) or the
/// server's ACL.
pub const CONFIG: u8 = 78;
/// `run`: the lock is held by someone else (after `--wait`). The default of
/// `--conflict-exit-code` (`EX_TEMPFAIL`).
pub const CONFLICT: u8 = 75;
/// `run`: the lease was lost while the command ran (it expired or was removed), so the
/// command was stopped. The default of `--lost-exit-code`.
pub const LOST: u8 = 79;
/// `run`: the command was found but could not be executed (as in POSIX shells).
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found (as in POSIX shells).
pub const NOT_FOUND: u8 = 127;
/// `128 + n`: the command died of signal `n`, or lockctl got signal `n` while waiting for
/// the lock.
pub const SIGNAL_BASE: u8 = 128;

/// One row of the exit-code table: the codes it covers, how they are shown when that is not
/// just the numbers (`128+N`, `other`), and what they mean.
///
/// [`TABLE`] is the one source of the exit codes that `lockctl --help` prints
/// ([`help_text`]) and that lockctl's README shows ([`markdown_table`]; a test keeps the
/// README equal to it, another checks that every code constant of this module is in it).
#[derive(Debug, Clone, Copy)]
pub struct Documented {
    /// The codes of this row (none for `other`).
    pub codes: &'static [u8],
    /// How the code column reads, when not the codes joined by `/`.
    pub shown: Option<&'static str>,
    /// What the codes mean, on one line.
    pub meaning: &'static str,
}

impl Documented {
    /// The code column: `64`, `126/127`, `128+N`, `other`.
    pub fn code_text(&self) -> String {
        match self.shown {
            Some(shown) => shown.to_owned(),
            None => self
                .codes
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join("/"),
        }
    }
}

/// Every exit code lockctl uses, in order.
pub const TABLE: &[Documented] = &[
    Documented {
        codes: &[SUCCESS],
        shown: None,
        meaning: "success (run, elect: the command exited 0; status: the name is held; \
                  leader: the election has a leader; doctor: every check is fine)",
    },
    Documented {
        codes: &[FREE],
        shown: None,
        meaning: "status: nothing of the name is held (free); leader: no leader; doctor: \
                  warnings, or checks the server would not answer",
    },
    Documented {
        codes: &[UNSAFE],
        shown: None,
        meaning: "doctor: the server (with --redlock: a master, or the masters together) is \
                  unsafe for locks as it is set up (see the findings)",
    },
    Documented {
        codes: &[],
        shown: Some("other"),
        meaning: "run, elect: the command's own exit code",
    },
    Documented {
        codes: &[USAGE],
        shown: None,
        meaning: "usage: bad option, duration, Redis URL or lock name; run --permits N where \
                  the semaphore's current holders use another N",
    },
    Documented {
        codes: &[UNAVAILABLE],
        shown: None,
        meaning: "Redis unreachable, or the connection broke; doctor --redlock: a majority of \
                  the masters (not flock's \"cannot run the command\": that is 126/127)",
    },
    Documented {
        codes: &[INTERNAL],
        shown: None,
        meaning: "internal: an unexpected Redis error, a key that is not a lock",
    },
    Documented {
        codes: &[CONFLICT],
        shown: None,
        meaning: "run: the lock is busy, or still busy after --wait (change it with \
                  -E/--conflict-exit-code; flock's default is 1)",
    },
    Documented {
        codes: &[CONFIG],
        shown: None,
        meaning: "Redis refuses lockctl's settings: no or wrong password, no such database, an \
                  ACL user without a needed permission (fix --url / REDIS_URL)",
    },
    Documented {
        codes: &[LOST],
        shown: None,
        meaning: "run, elect: the lease was lost while the command ran, so it was stopped \
                  (run: --lost-exit-code)",
    },
    Documented {
        codes: &[CANNOT_EXECUTE, NOT_FOUND],
        shown: None,
        meaning: "run, elect: the command cannot be executed / was not found",
    },
    Documented {
        codes: &[SIGNAL_BASE],
        shown: Some("128+N"),
        meaning: "run, elect: the command died of signal N, or lockctl got signal N while \
                  waiting",
    },
];

/// The exit codes for `--help`: `Exit codes (every command):` and one row per code,
/// wrapped to fit 80 columns.
pub fn help_text() -> String {
    const CODE_WIDTH: usize = 9;
    const WIDTH: usize = 88;
    let mut out = String::from("Exit codes (every command):");
    for row in TABLE {
        let mut line = format!("  {:<CODE_WIDTH$}", row.code_text());
        let indent = line.len();
        let mut fresh = true;
        for word in row.meaning.split_whitespace() {
            if !fresh && line.len() + 1 + word.len() > WIDTH {
                out.push('\n');
                out.push_str(line.trim_end());
                line = " ".repeat(indent);
                fresh = true;
            }
            if !fresh {
                line.push(' ');
            }
            line.push_str(word);
            fresh = false;
        }
        out.push('\n');
        out.push_str(line.trim_end());
    }
    out
}

/// The exit codes as the Markdown table of lockctl's README.
pub fn markdown_table() -> String {
    let mut out = String::from("| code | meaning |\n|---|---|\n");
    for row in TABLE {
        out.push_str(&format!("| {} | {} |\n", row.code_text(), row.meaning));
    }
    out
}

/// A failed command: its exit code and a one-line message for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The process exit code.
    pub code: u8,
    /// What went wrong, on one line, without the `lockctl: ` prefix.
    pub message: String,
}

impl Failure {
    /// A failure with exit code `code`.
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: one_line(message.into()),
        }
    }

    /// A usage error ([`USAGE`]).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }

    /// Redis unavailable ([`UNAVAILABLE`]).
    pub fn unavailable(message: impl Into<String>) -> Failure {
        Failure::new(UNAVAILABLE, message)
    }

    /// Something unexpected ([`INTERNAL`]).
    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::new(INTERNAL, message)
    }

    /// Maps a lock-core error to an exit code and a message for operators. `url` is the
    /// (password-free) Redis URL, named when Redis cannot be reached.
    pub fn from_lock_error(err: &LockError, url: &str) -> Failure {
        match err {
            LockError::Connection { reason, .. } => {
                Failure::unavailable(format!("cannot reach Redis at {url}: {reason}"))
            }
            LockError::Misconfigured { reason, .. } => Failure::new(
                CONFIG,
                format!("Redis at {url} refuses lockctl's settings: {reason}"),
            ),
            LockError::Redis { source, .. } if source.code() == Some("NOPERM") => {
                Failure::new(CONFIG, no_permission(source, url))
            }
            LockError::InvalidDuration {
                name,
                what,
                value,
                reason,
            } => {
                let (flag, of) = match *what {
                    "ttl" => ("--ttl", "lock"),
                    "wait" => ("--wait", "lock"),
                    "hold_at_least" => ("--hold-at-least", "lock"),
                    "election lease" => ("--lease", "election"),
                    other => (other, "lock"),
                };
                Failure::usage(format!(
                    "invalid {flag} {}: {reason} (for {of} `{}`)",
                    echo_duration(*value),
                    display_safe(name)
                ))
            }
            LockError::Busy {
                name,
                holder,
                retry_after,
                ..
            } => Failure::new(
                CONFLICT,
                format!(
                    "lock `{}` is busy{}",
                    display_safe(name),
                    held_by(holder.as_deref(), *retry_after)
                ),
            ),
            LockError::Timeout {
                name,
                waited,
                holder,
                retry_after,
                ..
            } => Failure::new(
                CONFLICT,
                format!(
                    "lock `{}` is still busy after waiting {}{}",
                    display_safe(name),
                    format_duration(*waited),
                    held_by(holder.as_deref(), *retry_after)
                ),
            ),
            LockError::LimitReached { .. } => Failure::limit_reached(err, None),
            LockError::Lost { name } => Failure::new(
                LOST,
                format!(
                    "lock `{}` was lost (it expired or was removed)",
                    display_safe(name)
                ),
            ),
            LockError::InvalidName { .. }
            | LockError::CapacityMismatch { .. }
            | LockError::Config(_) => Failure::usage(err.to_string()),
            other => Failure::internal(other.to_string()),
        }
    }

    /// A full semaphore ([`LockError::LimitReached`]): "all 2 permits of `exports` are
    /// taken (held by a, b; ...)", naming `holders` when they were read. Other errors map as
    /// in [`Failure::from_lock_error`].
    pub fn limit_reached(err: &LockError, holders: Option<&[String]>) -> Failure {
        let LockError::LimitReached {
            name,
            permits,
            waited,
            retry_after,
            ..
        } = err
        else {
            return Failure::from_lock_error(err, "");
        };
        let taken = match waited {
            Some(waited) => format!("still taken after waiting {}", format_duration(*waited)),
            None => "taken".to_owned(),
        };
        let mut out = format!(
            "all {permits} permits of `{}` are {taken}",
            display_safe(name)
        );
        let mut parts = Vec::new();
        if let Some(holders) = holders.filter(|h| !h.is_empty()) {
            let names: Vec<_> = holders.iter().map(|h| display_safe(h)).collect();
            parts.push(format!("held by {}", names.join(", ")));
        }
        if let Some(left) = retry_after {
            parts.push(format!(
                "the first lease ends in {} unless its holder renews it",
                format_duration(*left)
            ));
        }
        if !parts.is_empty() {
            out.push_str(&format!(" ({})", parts.join("; ")));
        }
        Failure::new(CONFLICT, out)
    }

    /// Maps a redis-rs error from lockctl's own connection.
    pub fn from_redis(err: &redis::RedisError, url: &str) -> Failure {
        if let Some(reason) = lock_core::__private::misconfiguration(err, "the server") {
            return Failure::new(
                CONFIG,
                format!("Redis at {url} refuses lockctl's settings: {reason}"),
            );
        }
        if err.code() == Some("NOPERM") || err.to_string().contains("NoPerm") {
            return Failure::new(CONFIG, no_permission(err, url));
        }
        if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_timeout()
            || err.is_unrecoverable_error()
        {
            Failure::unavailable(format!("cannot reach Redis at {url}: {err}"))
        } else {
            Failure::internal(format!(
                "Redis at {url} answered with an error: {}",
                without_pipeline(&err.to_string())
            ))
        }
    }
}

/// An ACL refusal, with what to do.
fn no_permission(err: &dyn fmt::Display, url: &str) -> String {
    format!(
        "Redis at {url} refused a command to this ACL user ({}): grant the user the \
         commands and keys lockctl needs (see the least-privilege ACL in the README)",
        without_pipeline(&err.to_string())
    )
}

/// redis-rs's error for a pipeline, `Pipeline failures: [(Index 0, <error>)]`, as the one
/// error it carries.
fn without_pipeline(text: &str) -> String {
    match text
        .strip_prefix("Pipeline failures: [(Index ")
        .and_then(|rest| rest.split_once(", "))
    {
        Some((_, inner)) => inner.strip_suffix(")]").unwrap_or(inner).to_owned(),
        None => text.to_owned(),
    }
}

/// A duration given on the command line, echoed back as it reads: `0s`, `25h`, `1m30s`.
fn echo_duration(duration: std::time::Duration) -> String {
    if duration.is_zero() {
        "0s".to_owned()
    } else {
        format_duration(duration)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// ` (held by X, its lease ends in 12.5s unless renewed)`, or what of it is known (not
/// "free in at most": a holder that renews, as `lockctl run` does, keeps it longer).
fn held_by(holder: Option<&str>, retry_after: Option<std::time::Duration>) -> String {
    let mut out = String::new();
    match holder {
        Some(holder) => {
            out.push_str(" (held by ");
            out.push_str(&display_safe(holder));
        }
        None => out.push_str(" (holder unknown"),
    }
    if let Some(left) = retry_after {
        out.push_str(", its lease ends in ");
        out.push_str(&format_duration(left));
        out.push_str(" unless renewed");
    }
    out.push(')');
    out
}

/// The exit code that reports how a child process ended: its own code, or `128 + signal`.
pub fn code_of_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    if let Some(code) = status.code() {
        // Exit codes are 0..=255 on Unix; anything else cannot be told apart anyway.
        return u8::try_from(code & 0xff).unwrap_or(INTERNAL);
    }
    match status.signal() {
        Some(signal) => SIGNAL_BASE.saturating_add(u8::try_from(signal).unwrap_or(0)),
        None => INTERNAL,
    }
}

/// Messages are printed on one line: any line break becomes a space.
fn one_line(message: String) -> String {
    if message.contains(['\n', '\r']) {
        message
            .split(['\n', '\r'])
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The README's exit-code table is [`TABLE`], row for row: edit the table in this file
    /// and paste what this test prints into the README.
    #[test]
    fn the_readme_shows_the_exit_code_table() {
        const START: &str = "<!-- exit-codes: generated from lockctl/src/exit.rs (TABLE); a test keeps the two equal -->\n";
        const END: &str = "<!-- /exit-codes -->";
        let readme = include_str!("../README.md");
        let shown = readme
            .split_once(START)
            .and_then(|(_, rest)| rest.split_once(END))
            .map(|(table, _)| table)
            .unwrap_or_else(|| panic!("README.md has no {START:?} ... {END:?} section"));
        assert!(
            shown == markdown_table(),
            "README.md's exit codes differ from exit::TABLE; put this between the markers:\n{}",
            markdown_table()
        );
    }

    /// Every exit-code constant of this module is in [`TABLE`], and the table uses no code
    /// twice.
    #[test]
    fn every_exit_code_is_in_the_table() {
        let source = include_str!("exit.rs");
        let mut constants = Vec::new();
        for line in source.lines() {
            let Some(rest) = line.strip_prefix("pub const ") else {
                continue;
            };
            let Some((name, value)) = rest.split_once(": u8 = ") else {
                continue;
            };
            let value: u8 = value.trim_end_matches(';').parse().unwrap();
            constants.push((name.to_owned(), value));
        }
        assert!(constants.len() >= 11, "{constants:?}");
        let mut documented: Vec<u8> = TABLE
            .iter()
            .flat_map(|row| row.codes.iter().copied())
            .collect();
        for (name, value) in &constants {
            assert!(
                documented.contains(value),
                "exit::{name} ({value}) is not in exit::TABLE"
            );
        }
        documented.sort_unstable();
        let before = documented.len();
        documented.dedup();
        assert_eq!(
            documented.len(),
            before,
            "a code in two rows of exit::TABLE"
        );
    }

    #[test]
    fn help_rows_fit_88_columns_and_keep_every_code() {
        let help = help_text();
        for line in help.lines() {
            assert!(line.chars().count() <= 88, "{line:?}");
        }
        for row in TABLE {
            assert!(
                help.contains(&format!("\n  {:<9}", row.code_text())),
                "{}: {help}",
                row.code_text()
            );
        }
    }

    #[test]
    fn busy_names_holder_and_uses_conflict_code() {
        let err = LockError::Busy {
            name: "deploy".into(),
            holder: Some("lockctl/sleep@web-1:42".into()),
            retry_after: Some(Duration::from_millis(1500)),

            wait_setting: Default::default(),
        };
        let failure = Failure::from_lock_error(&err, "redis://h/");
        assert_eq!(failure.code, CONFLICT);
        assert_eq!(
            failure.message,
            "lock `deploy` is busy (held by lockctl/sleep@web-1:42, its lease ends in 1.5s unless renewed)"
        );
    }

    #[test]
    fn a_full_semaphore_names_its_permits_and_holders() {
        let err = LockError::LimitReached {
            name: "exports".into(),
            permits: 2,
            asked: 1,
            waited: None,
            retry_after: Some(Duration::from_secs(3)),

            wait_setting: Default::default(),
        };
        let holders = ["a@h:1".to_owned(), "b@h:2".to_owned()];
        let failure = Failure::limit_reached(&err, Some(&holders));
        assert_eq!(failure.code, CONFLICT);
        assert_eq!(
            failure.message,
            "all 2 permits of `exports` are taken (held by a@h:1, b@h:2; the first lease ends in 3s unless its holder renews it)"
        );
        let unknown = Failure::from_lock_error(&err, "redis://h/");
        assert_eq!(
            unknown.message,
            "all 2 permits of `exports` are taken (the first lease ends in 3s unless its holder renews it)"
        );
    }

    #[test]
    fn connection_errors_are_unavailable() {
        let err = LockError::Connection {
            name: "x".into(),
            reason: "Connection refused (os error 111)".into(),
            source: None,
        };
        let failure = Failure::from_lock_error(&err, "redis://127.0.0.1:1/");
        assert_eq!(failure.code, UNAVAILABLE);
        assert!(failure.message.contains("redis://127.0.0.1:1/"));
    }

    #[test]
    fn pipeline_errors_are_shown_as_their_one_error() {
        assert_eq!(
            without_pipeline(
                r#"Pipeline failures: [(Index 0, "NOAUTH": Authentication required.)]"#
            ),
            r#""NOAUTH": Authentication required."#
        );
        assert_eq!(without_pipeline("ERR x"), "ERR x");
    }

    #[test]
    fn messages_stay_on_one_line() {
        let failure = Failure::usage("first\n\n  second\r\nthird");
        assert_eq!(failure.message, "first second third");
    }

    #[test]
    fn signals_become_128_plus_n() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(code_of_status(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(code_of_status(ExitStatus::from_raw(9)), 137);
    }
}
