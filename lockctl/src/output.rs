//! Writing results: text tables, JSON, and a closed pipe that is not an error.

use std::io::{self, Write};
use std::time::Duration;

use serde_json::{json, Value};

use crate::duration::{format_duration, millis};
use crate::exit::Failure;
use crate::holder::{display_safe, Holder};

/// Writes `text` and a newline to stdout. A reader that went away (`lockctl list | head`)
/// ends the command quietly ([`Closed`]).
pub fn line(text: &str) -> Result<(), Closed> {
    let mut out = io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(Closed::from)
}

/// Stdout could not be written: the reader is gone, or the device failed.
#[derive(Debug)]
pub struct Closed(io::Error);

impl From<io::Error> for Closed {
    fn from(err: io::Error) -> Closed {
        Closed(err)
    }
}

impl From<Closed> for Failure {
    fn from(Closed(err): Closed) -> Failure {
        if err.kind() == io::ErrorKind::BrokenPipe {
            Failure::new(crate::exit::SUCCESS, String::new())
        } else {
            Failure::internal(format!("cannot write to stdout: {err}"))
        }
    }
}

/// One lock as a JSON object: name, key, held, holder and its parts, ttl_ms, fencing_counter.
pub fn lock_json(
    name: &str,
    key: &str,
    holder: Option<&str>,
    remaining: Option<Duration>,
    fencing_counter: Option<u64>,
    held: bool,
) -> Value {
    let parts = holder.map(Holder::parse);
    json!({
        "name": name,
        "key": key,
        "held": held,
        "holder": holder,
        "app": parts.as_ref().and_then(|h| h.app.clone()),
        "host": parts.as_ref().and_then(|h| h.host.clone()),
        "pid": parts.as_ref().and_then(|h| h.pid),
        "ttl_ms": remaining.map(millis),
        "fencing_counter": fencing_counter,
    })
}

/// `27.9s`, or `none` for a key without TTL.
pub fn ttl_text(remaining: Option<Duration>) -> String {
    remaining.map_or_else(|| "none".to_owned(), format_duration)
}

/// `-` for "not known".
pub fn or_dash(text: Option<&str>) -> String {
    text.map_or_else(|| "-".to_owned(), |t| display_safe(t).into_owned())
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let render = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            if i + 1 < widths.len() {
                let pad = width.saturating_sub(cell.chars().count());
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        text.trim_end().to_owned()
    };
    let mut lines = vec![render(&mut header.iter().copied())];
    for row in rows {
        lines.push(render(&mut row.iter().map(String::as_str)));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_on_characters() {
        let lines = table(
            &["NAME", "TTL"],
            &[
                vec!["ünï".into(), "1s".into()],
                vec!["plain name".into(), "2s".into()],
            ],
        );
        assert_eq!(lines[0], "NAME        TTL");
        assert_eq!(lines[1], "ünï         1s");
        assert_eq!(lines[2], "plain name  2s");
    }

    #[test]
    fn json_splits_the_holder() {
        let value = lock_json(
            "a",
            "lock:{a}",
            Some("app@h:7"),
            Some(Duration::from_millis(1500)),
            Some(3),
            true,
        );
        assert_eq!(value["app"], "app");
        assert_eq!(value["pid"], 7);
        assert_eq!(value["ttl_ms"], 1500);
        assert_eq!(value["fencing_counter"], 3);
    }
}
