//! Writing and reading the JSON-lines logs.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use super::Event;

/// An append-only JSON-lines log, flushed after every event so that a killed or stopped
/// process leaves every event it logged on disk. Shared by the tasks of one process.
#[derive(Debug)]
pub struct Log {
    out: Mutex<BufWriter<File>>,
}

impl Log {
    /// Creates (truncates) the log at `path`.
    pub fn create(path: &Path) -> io::Result<Log> {
        Ok(Log {
            out: Mutex::new(BufWriter::new(File::create(path)?)),
        })
    }

    /// Appends one event.
    pub fn write(&self, event: &Event) -> io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.write_all(&line)?;
        out.flush()
    }
}

/// Reads a log. A last line cut short (the process was killed while writing it) is skipped;
/// a malformed line elsewhere is an error.
pub fn read_log(path: &Path) -> io::Result<Vec<Event>> {
    let lines: Vec<String> = BufReader::new(File::open(path)?)
        .lines()
        .collect::<io::Result<_>>()?;
    let mut events = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(event) => events.push(event),
            Err(_) if i + 1 == lines.len() => {}
            Err(err) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}:{}: {err}", path.display(), i + 1),
                ))
            }
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ReleaseOutcome;

    #[test]
    fn round_trips_and_tolerates_a_cut_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c0.jsonl");
        let log = Log::create(&path).unwrap();
        let event = Event::Release {
            id: "c0.t0.1".into(),
            t_sent: 1,
            t_reply: 2,
            outcome: ReleaseOutcome::NotHeld,
            lost_reported: true,
        };
        log.write(&event).unwrap();
        drop(log);
        let mut text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""ev":"release""#), "{text}");
        text.push_str(r#"{"ev":"relea"#);
        std::fs::write(&path, text).unwrap();
        assert_eq!(read_log(&path).unwrap(), vec![event]);
    }
}
