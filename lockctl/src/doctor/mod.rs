//! `lockctl doctor`: what an operator checks before trusting a Redis with locks: one server
//! (`checks`), or with `--redlock` each master and what only matters across them
//! (`redlock`). Each finding says what was found, why it matters for locks, and what to
//! change; a check the server would not answer is "could not check", with the reason, never
//! "fine".

mod checks;
mod redlock;

use std::fmt;

use serde_json::{json, Value};

use crate::cli::DoctorArgs;
use crate::exit::{Failure, FREE, SUCCESS, UNSAFE};
use crate::store::Target;

pub use redlock::doctor as redlock;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing to change.
    Fine,
    /// Worth changing: locks work, with a weakness.
    Warning,
    /// The server would not answer the check (counts as a warning).
    Unchecked,
    /// Locks are not safe (or will not work) on this server as it is set up.
    Unsafe,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Fine => "ok",
            Level::Warning => "warning",
            Level::Unchecked => "could not check",
            Level::Unsafe => "UNSAFE",
        }
    }
}

/// One finding.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The check: `eviction`, `persistence`, ...
    pub check: &'static str,
    /// How bad it is.
    pub level: Level,
    /// What was found.
    pub found: String,
    /// Why it matters for locks.
    pub why: String,
    /// What to change (empty when fine).
    pub fix: String,
}

impl Finding {
    fn new(check: &'static str, level: Level, found: impl Into<String>) -> Finding {
        Finding {
            check,
            level,
            found: found.into(),
            why: String::new(),
            fix: String::new(),
        }
    }

    fn why(mut self, why: impl Into<String>) -> Finding {
        self.why = why.into();
        self
    }

    fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = fix.into();
        self
    }

    fn unchecked(check: &'static str, reason: impl fmt::Display, why: &str) -> Finding {
        Finding::new(
            check,
            Level::Unchecked,
            format!("could not check: {reason}"),
        )
        .why(why)
        .fix("grant this user the command, or check the setting by hand")
    }
}

impl Level {
    /// The level in `--json`.
    fn json(self) -> &'static str {
        match self {
            Level::Fine => "ok",
            Level::Warning => "warning",
            Level::Unchecked => "unchecked",
            Level::Unsafe => "unsafe",
        }
    }
}

/// `lockctl doctor`: runs every check against the server of `--url` and prints the
/// findings. Exits 0 when all is fine, [`FREE`] (1) with warnings (or checks that
/// could not be made), [`UNSAFE`] (2) when locks are unsafe there, 69 when unreachable.
pub async fn doctor(target: &Target, args: &DoctorArgs) -> Result<u8, Failure> {
    let checked = checks::server(target).await?;
    let (code, verdict) = verdict(worst(&checked.findings));
    if args.json {
        let value = json!({
            "url": target.shown_url,
            "verdict": verdict,
            "findings": rows(&checked.findings, None),
        });
        println!("{value}");
    } else {
        println!("lockctl doctor: {}", target.shown_url);
        print_findings(&checked.findings);
        println!("verdict: {verdict}");
    }
    Ok(code)
}

/// The worst level of `findings` (fine when there are none).
fn worst<'f>(findings: impl IntoIterator<Item = &'f Finding>) -> Level {
    findings
        .into_iter()
        .map(|finding| finding.level)
        .max()
        .unwrap_or(Level::Fine)
}

/// The exit code and verdict of the worst level: 0 fine, 1 warnings (a check that could not
/// be made counts as one), 2 unsafe.
fn verdict(worst: Level) -> (u8, &'static str) {
    match worst {
        Level::Fine => (SUCCESS, "fine"),
        Level::Warning | Level::Unchecked => (FREE, "warnings"),
        Level::Unsafe => (UNSAFE, "unsafe"),
    }
}

/// The findings as `--json` rows; with `server`, each row names the server it is about
/// (`null` for a Redlock finding across the masters).
fn rows(findings: &[Finding], server: Option<Option<&str>>) -> Vec<Value> {
    findings
        .iter()
        .map(|f| {
            let mut row = json!({
                "check": f.check,
                "level": f.level.json(),
                "found": f.found,
                "why": f.why,
                "fix": f.fix,
            });
            if let (Some(server), Value::Object(fields)) = (server, &mut row) {
                fields.insert("server".to_owned(), json!(server));
            }
            row
        })
        .collect()
}

/// The findings as text: `[level] check: found`, then why and (unless fine) what to change.
fn print_findings(findings: &[Finding]) {
    for f in findings {
        println!("[{}] {}: {}", f.level.word(), f.check, f.found);
        if !f.why.is_empty() {
            println!("    why: {}", f.why);
        }
        if f.level != Level::Fine && !f.fix.is_empty() {
            println!("    fix: {}", f.fix);
        }
    }
}
