//! The book's published figures (seed 001): table 6.2, and table 6.3's best row.
//!
//! The book ran each configuration for 60 seconds. Some cells are bounds ("<200"); for
//! arithmetic a bound counts as its limit, and ranges as their upper end.

use serde::Serialize;

use crate::Mode;

/// How long each of the book's rows ran, in seconds.
pub const BOOK_SECONDS: f64 = 60.0;

/// One cell of the book's table: as printed, and as a number.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    /// As the book prints it (`"<200"`, `"14ms"`).
    pub text: &'static str,
    /// Its value (a bound's limit, a range's upper end; waits in milliseconds).
    pub value: f64,
}

const fn fig(text: &'static str, value: f64) -> Figure {
    Figure { text, value }
}

/// One of the book's rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BookRow {
    /// Listers.
    pub listers: usize,
    /// Buyers.
    pub buyers: usize,
    /// The mode it corresponds to.
    pub mode: Mode,
    /// Listed items in 60 s (table 6.3 gives only the total).
    pub listed: Option<Figure>,
    /// Bought items in 60 s.
    pub bought: Option<Figure>,
    /// Purchase retries in 60 s.
    pub retries: Option<Figure>,
    /// Average wait per purchase.
    pub avg_wait_ms: Figure,
    /// Listings plus purchases in 60 s.
    pub operations: Figure,
}

impl BookRow {
    /// Listings plus purchases per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.operations.value / BOOK_SECONDS
    }
}

/// Table 6.2 ("no lock" and "with lock") and the fine-grained row of table 6.3.
pub const BOOK_ROWS: [BookRow; 7] = [
    BookRow {
        listers: 1,
        buyers: 1,
        mode: Mode::Watch,
        listed: Some(fig("145,000", 145_000.0)),
        bought: Some(fig("27,000", 27_000.0)),
        retries: Some(fig("80,000", 80_000.0)),
        avg_wait_ms: fig("14ms", 14.0),
        operations: fig("172,000", 172_000.0),
    },
    BookRow {
        listers: 1,
        buyers: 1,
        mode: Mode::Market,
        listed: Some(fig("51,000", 51_000.0)),
        bought: Some(fig("50,000", 50_000.0)),
        retries: Some(fig("0", 0.0)),
        avg_wait_ms: fig("1ms", 1.0),
        operations: fig("101,000", 101_000.0),
    },
    BookRow {
        listers: 5,
        buyers: 1,
        mode: Mode::Watch,
        listed: Some(fig("331,000", 331_000.0)),
        bought: Some(fig("<200", 200.0)),
        retries: Some(fig("50,000", 50_000.0)),
        avg_wait_ms: fig("150ms", 150.0),
        operations: fig("331,200", 331_200.0),
    },
    BookRow {
        listers: 5,
        buyers: 1,
        mode: Mode::Market,
        listed: Some(fig("68,000", 68_000.0)),
        bought: Some(fig("13,000", 13_000.0)),
        retries: Some(fig("<10", 10.0)),
        avg_wait_ms: fig("5ms", 5.0),
        operations: fig("81,000", 81_000.0),
    },
    BookRow {
        listers: 5,
        buyers: 5,
        mode: Mode::Watch,
        listed: Some(fig("206,000", 206_000.0)),
        bought: Some(fig("<600", 600.0)),
        retries: Some(fig("161,000", 161_000.0)),
        avg_wait_ms: fig("498ms", 498.0),
        operations: fig("206,600", 206_600.0),
    },
    BookRow {
        listers: 5,
        buyers: 5,
        mode: Mode::Market,
        listed: Some(fig("21,000", 21_000.0)),
        bought: Some(fig("20,500", 20_500.0)),
        retries: Some(fig("0", 0.0)),
        avg_wait_ms: fig("14ms", 14.0),
        operations: fig("41,500", 41_500.0),
    },
    BookRow {
        listers: 5,
        buyers: 5,
        mode: Mode::Item,
        listed: None,
        bought: None,
        retries: None,
        avg_wait_ms: fig("<3ms", 3.0),
        operations: fig("220,000-230,000", 230_000.0),
    },
];

/// The book's row for this configuration, if the book has one.
pub fn book_row(mode: Mode, listers: usize, buyers: usize) -> Option<&'static BookRow> {
    BOOK_ROWS
        .iter()
        .find(|row| row.mode == mode && row.listers == listers && row.buyers == buyers)
}

/// The book's best row: fine-grained locks, 5 listers, 5 buyers (table 6.3).
pub fn best_row() -> &'static BookRow {
    &BOOK_ROWS[6]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_row_is_about_3800_operations_a_second() {
        let best = best_row();
        assert_eq!((best.mode, best.listers, best.buyers), (Mode::Item, 5, 5));
        assert!((best.ops_per_sec() - 3833.3).abs() < 0.1);
    }

    #[test]
    fn lookups_find_table_6_2_and_nothing_invented() {
        assert_eq!(
            book_row(Mode::Market, 5, 5).map(|r| r.avg_wait_ms.value),
            Some(14.0)
        );
        assert!(book_row(Mode::Item, 1, 1).is_none());
        for row in &BOOK_ROWS {
            if let (Some(listed), Some(bought)) = (row.listed, row.bought) {
                assert_eq!(listed.value + bought.value, row.operations.value, "{row:?}");
            }
        }
    }
}
