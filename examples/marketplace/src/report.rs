//! The results, as the book's table (text) or as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::book::{best_row, book_row, BookRow, BOOK_SECONDS};
use crate::{Mode, RowResult, Seed};

/// A whole run: settings, rows, and the book's figures beside ours.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The Redis used, password hidden.
    pub redis: String,
    /// Planned seconds per row.
    pub seconds_per_row: f64,
    /// The starting state of every row.
    pub seed: Seed,
    /// One entry per row, in the order run.
    pub rows: Vec<ReportRow>,
}

/// One row with the book's figures for the same configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ReportRow {
    /// `5 listers, 5 buyers, item locks`.
    pub label: String,
    /// What we measured.
    #[serde(flatten)]
    pub result: RowResult,
    /// The book's row, when it has one.
    pub book: Option<BookRow>,
    /// Our operations per second over the book's.
    pub ops_vs_book: Option<f64>,
    /// Item mode: our operations per second over the book's best row (table 6.3, 230,000 per
    /// 60 s).
    pub ops_vs_book_best: Option<f64>,
    /// Locked modes: the share of a purchase's wait spent outside the lock-protected body
    /// (acquiring and releasing).
    pub lock_share: Option<f64>,
}

impl ReportRow {
    /// Puts the book's figures beside a result.
    pub fn new(label: String, result: RowResult) -> ReportRow {
        let book = book_row(result.mode, result.listers, result.buyers).copied();
        let ops_vs_book = book.map(|b| result.ops_per_sec / b.ops_per_sec());
        let ops_vs_book_best =
            (result.mode == Mode::Item).then(|| result.ops_per_sec / best_row().ops_per_sec());
        let lock_share = match result.held_ms {
            Some(held) if result.wait.mean_ms > 0.0 => {
                Some(((result.wait.mean_ms - held) / result.wait.mean_ms).clamp(0.0, 1.0))
            }
            _ => None,
        };
        ReportRow {
            label,
            result,
            book,
            ops_vs_book,
            ops_vs_book_best,
            lock_share,
        }
    }
}

impl Report {
    /// True when every row ran cleanly and kept every invariant.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|row| row.result.passed())
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// The book's table with ours beside it, and the notes under it.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let ours = format!("ours: {} s per row", trim_float(self.seconds_per_row));
        let book = format!("book: {} s per row", BOOK_SECONDS);
        let _ = writeln!(
            out,
            "{:<42}{:-^99}  {:-^57}",
            "",
            format!(" {ours} "),
            format!(" {book} ")
        );
        let _ = writeln!(
            out,
            "{:<42}{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "row",
            "listed",
            "bought",
            "retries",
            "avg wait",
            "p99 wait",
            "ops/s",
            "in lock",
            "lock %",
            "×book",
            "checks",
            "listed",
            "bought",
            "retries",
            "avg wait",
            "ops/s",
            ""
        );
        for row in &self.rows {
            let r = &row.result;
            let b = row.book.as_ref();
            let _ = writeln!(
                out,
                "{:<42}{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>9} {:>8} {:>8} {:>8} {:>8}",
                row.label,
                thousands(r.listed),
                thousands(r.bought),
                thousands(r.purchase_retries),
                millis(r.wait.mean_ms),
                millis(r.wait.p99_ms),
                thousands(r.ops_per_sec.round() as u64),
                r.held_ms.map_or("-".into(), millis),
                row.lock_share
                    .map_or("-".into(), |s| format!("{:.0}%", s * 100.0)),
                row.ops_vs_book.map_or("-".into(), |x| format!("{x:.2}")),
                if r.passed() { "ok" } else { "FAILED" },
                figure(b.and_then(|b| b.listed.map(|f| f.text))),
                figure(b.and_then(|b| b.bought.map(|f| f.text))),
                figure(b.and_then(|b| b.retries.map(|f| f.text))),
                figure(b.map(|b| b.avg_wait_ms.text)),
                b.map_or("-".into(), |b| thousands(b.ops_per_sec().round() as u64)),
            );
        }
        out.push('\n');
        self.write_notes(&mut out);
        out
    }

    fn write_notes(&self, out: &mut String) {
        let rtt = mean(self.rows.iter().map(|r| r.result.rtt_us));
        let _ = writeln!(
            out,
            "Redis: {}; idle PING round trip {:.0} µs. {} users, {} items each.",
            self.redis, rtt, self.seed.users, self.seed.items_per_user
        );
        let _ = writeln!(
            out,
            "Round trips per purchase: watch 2 per attempt (WATCH+reads, MULTI/EXEC), again on \
             every retry; market and item locks 4 (acquire, reads, MULTI/EXEC, release), never retried."
        );
        let _ = writeln!(
            out,
            "wait = one purchase call, retries and lock waits included; in lock = time holding the \
             lock; lock % = share of the wait spent acquiring and releasing."
        );
        let best = best_row();
        for row in self.rows.iter().filter(|r| r.result.mode == Mode::Item) {
            let r = &row.result;
            let held = r.held_ms.unwrap_or(0.0);
            let _ = writeln!(
                out,
                "{}: {} ops/s = {:.2}× the book's best row ({} per 60 s = {} ops/s, wait {}); \
                 wait avg {}, p99 {} = {} holding the lock (reads, MULTI/EXEC: 2 round trips) \
                 + {} taking and releasing it (2 round trips).",
                row.label,
                thousands(r.ops_per_sec.round() as u64),
                row.ops_vs_book_best.unwrap_or(0.0),
                best.operations.text,
                thousands(best.ops_per_sec().round() as u64),
                best.avg_wait_ms.text,
                millis(r.wait.mean_ms),
                millis(r.wait.p99_ms),
                millis(held),
                millis((r.wait.mean_ms - held).max(0.0)),
            );
        }
        for row in &self.rows {
            let r = &row.result;
            // A lister that keeps finding empty inventories means the market holds nearly
            // every item: the row measured a shortage, not the protocol.
            if r.empty_picks > r.listed / 10 && r.empty_picks > 0 {
                let _ = writeln!(
                    out,
                    "{}: listers found {} empty inventories (the market held nearly every item); \
                     raise --items-per-user for this row.",
                    row.label,
                    thousands(r.empty_picks)
                );
            }
        }
        let failed: Vec<&ReportRow> = self.rows.iter().filter(|r| !r.result.passed()).collect();
        if failed.is_empty() {
            let _ = writeln!(
                out,
                "Checks passed on all {} rows: funds conserved and never negative, every item in \
                 exactly one place, no listing sold twice, inventories match the purchases.",
                self.rows.len()
            );
        } else {
            for row in failed {
                let r = &row.result;
                let _ = writeln!(
                    out,
                    "FAILED {}: {} errors{}, {} broken invariants",
                    row.label,
                    r.errors,
                    r.first_error
                        .as_deref()
                        .map_or(String::new(), |e| format!(" (first: {e})")),
                    r.checks.violations
                );
                for detail in &r.checks.details {
                    let _ = writeln!(out, "    {detail}");
                }
            }
        }
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / f64::from(n)
    }
}

fn figure(text: Option<&str>) -> String {
    text.unwrap_or("-").to_owned()
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A wait in milliseconds, with precision where it matters: `0.31ms`, `4.2ms`, `498ms`.
pub fn millis(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.2}ms")
    } else if ms < 10.0 {
        format!("{ms:.1}ms")
    } else {
        format!("{ms:.0}ms")
    }
}

fn trim_float(x: f64) -> String {
    let text = format!("{x:.1}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::CheckReport;
    use crate::sim::WaitStats;

    fn result(mode: Mode, listers: usize, buyers: usize, ops: f64) -> RowResult {
        RowResult {
            mode,
            listers,
            buyers,
            seconds: 5.0,
            listed: (ops * 2.5) as u64,
            bought: (ops * 2.5) as u64,
            purchases: 100,
            purchase_retries: 0,
            list_retries: 0,
            not_listed: 0,
            insufficient_funds: 0,
            gave_up: 0,
            lock_timeouts: 0,
            empty_picks: 0,
            empty_market: 0,
            errors: 0,
            first_error: None,
            wait: WaitStats {
                count: 100,
                mean_ms: 0.4,
                p50_ms: 0.3,
                p99_ms: 1.0,
                max_ms: 2.0,
            },
            ops_per_sec: ops,
            rtt_us: 20.0,
            held_ms: (mode != Mode::Watch).then_some(0.2),
            checks: CheckReport::default(),
        }
    }

    #[test]
    fn rows_are_compared_with_the_book() {
        let best = ReportRow::new("5/5 item".into(), result(Mode::Item, 5, 5, 7666.7));
        assert!((best.ops_vs_book.unwrap() - 2.0).abs() < 0.01);
        assert!((best.ops_vs_book_best.unwrap() - 2.0).abs() < 0.01);
        assert!((best.lock_share.unwrap() - 0.5).abs() < 1e-9);
        let no_book = ReportRow::new("1/1 item".into(), result(Mode::Item, 1, 1, 100.0));
        assert!(no_book.book.is_none() && no_book.ops_vs_book.is_none());
        assert!(no_book.ops_vs_book_best.is_some());
        let watch = ReportRow::new("1/1 watch".into(), result(Mode::Watch, 1, 1, 100.0));
        assert_eq!(
            watch.book.map(|b| b.retries.map(|r| r.text)),
            Some(Some("80,000"))
        );
        assert!(watch.lock_share.is_none() && watch.ops_vs_book_best.is_none());

        let report = Report {
            redis: "redis://x/".into(),
            seconds_per_row: 5.0,
            seed: Seed {
                users: 10,
                items_per_user: 10,
                funds: 10,
            },
            rows: vec![watch, no_book, best],
        };
        assert!(report.passed());
        let table = report.to_table();
        assert!(table.contains("80,000"), "{table}");
        assert!(table.contains("220,000-230,000"), "{table}");
        assert!(table.contains("Checks passed on all 3 rows"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(json["rows"][2]["mode"], "item");
        assert_eq!(json["rows"][2]["book"]["avg_wait_ms"]["text"], "<3ms");
    }

    #[test]
    fn failures_are_spelled_out() {
        let mut broken = result(Mode::Market, 5, 5, 100.0);
        broken.checks.violations = 1;
        broken.checks.details.push("item 3 is in 2 places".into());
        let report = Report {
            redis: "redis://x/".into(),
            seconds_per_row: 1.0,
            seed: Seed {
                users: 10,
                items_per_user: 10,
                funds: 10,
            },
            rows: vec![ReportRow::new("5/5 market".into(), broken)],
        };
        assert!(!report.passed());
        let table = report.to_table();
        assert!(table.contains("FAILED 5/5 market"), "{table}");
        assert!(table.contains("item 3 is in 2 places"), "{table}");
    }

    #[test]
    fn numbers_read_like_the_book() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(230_000), "230,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(millis(0.314), "0.31ms");
        assert_eq!(millis(4.24), "4.2ms");
        assert_eq!(millis(498.2), "498ms");
        assert_eq!(trim_float(5.0), "5");
        assert_eq!(trim_float(1.5), "1.5");
    }
}
