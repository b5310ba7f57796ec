//! Times when a lock server ran no command: one heartbeat per data server, logged as
//! [`Event::ServerStall`].
//!
//! A server that does not run (its process not scheduled on a loaded machine, or busy with
//! one long command) answers nobody: a release sent to it, the waiters' turn and every
//! grant wait with it, and the name looks free to the checker all the while. The clients'
//! own tickers ([`Event::Hiccup`]) cannot see it: they run. So the orchestrator asks each
//! server for its clock (`TIME`) every [`TICK`], and compares when the server ran the
//! command with when it was sent. The server's clock and the history's differ by an
//! offset that this heartbeat learns from its quickest answers (the smallest difference
//! between the server's time and the sending time); a command the server ran more than
//! [`NOTICEABLE`] after its quickest is a stall of that server from the sending to the
//! running. A slow answer whose command ran on time (the orchestrator itself not
//! scheduled) is no stall.
//!
//! After a stall the heartbeat reads the server's `SLOWLOG` (commands of 10 ms or more by
//! default): a stall that a slow command explains is the server's own work (a lock script
//! that ran long would be the library's), and the checker does not excuse it.
//!
//! A killed server's heartbeat reconnects when the new process listens; a paused one's
//! stall is logged when it resumes (the pause is a fault of its own as well).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::Value;

use crate::clock;
use crate::event::{Event, Log};
use crate::workers::Workers;
use crate::BoxError;

/// How often each server is asked.
const TICK: Duration = Duration::from_millis(5);

/// A command run this much later than the quickest is a stall.
const NOTICEABLE: Duration = Duration::from_millis(20);

/// A sending that took longer than this (the heartbeat's thread not scheduled) is not used.
const SEND_LIMIT: Duration = Duration::from_millis(1);

/// How long one answer may take before the connection is dropped and opened again (a
/// server paused for longer is a fault of the run's own).
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// The heartbeats of a run; they stop when dropped.
#[derive(Debug)]
pub struct Heartbeats(Workers);

impl Heartbeats {
    /// Starts a heartbeat for each port, logging stalls to `dir/heartbeat-<port>.jsonl`.
    pub fn start(ports: &[u16], dir: &Path) -> Result<Heartbeats, BoxError> {
        let mut workers = Workers::default();
        for &port in ports {
            let log = Log::create(&dir.join(format!("heartbeat-{port}.jsonl")))?;
            workers.spawn(move |stop| beat(port, &log, stop));
        }
        Ok(Heartbeats(workers))
    }

    /// Stops the heartbeats and waits for them (their logs are complete afterwards).
    pub fn stop(&mut self) {
        self.0.stop();
    }
}

/// Asks `port` for its clock until told to stop, reconnecting after the server died.
fn beat(port: u16, log: &Log, stop: &AtomicBool) {
    let noticeable = clock::nanos(NOTICEABLE);
    let send_limit = clock::nanos(SEND_LIMIT);
    let packed = redis::cmd("TIME").get_packed_command();
    // The smallest (server's time - sending time) seen: the offset between the clocks.
    let mut quickest: Option<i128> = None;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut conn) = connect(port) else {
            std::thread::sleep(TICK);
            continue;
        };
        // The last `SLOWLOG` entry already looked at (a restarted server's log begins again).
        let mut slow_seen = Some(slowlog(&mut conn, None).1);
        while !stop.load(Ordering::Relaxed) {
            let before = clock::now();
            if conn.send_packed_command(&packed).is_err() {
                break;
            }
            let sent = clock::now();
            let Ok(reply) = conn.recv_response() else {
                break;
            };
            let answered = clock::now();
            let Ok((seconds, micros)) = redis::from_redis_value::<(u64, u64)>(reply) else {
                break;
            };
            if sent - before > send_limit {
                // This thread did not run while it sent: when the command left is not
                // known closely enough to time the server.
                std::thread::sleep(TICK);
                continue;
            }
            let server = i128::from(seconds) * 1_000_000_000 + i128::from(micros) * 1_000;
            let gap = server - i128::from(sent);
            let offset = *quickest.get_or_insert(gap);
            if gap < offset {
                quickest = Some(gap);
            }
            let late = u64::try_from(gap - offset).unwrap_or(0);
            if sent + late > answered + send_limit {
                // Run after its answer came back: the server's clock was set forward (the
                // offset is stale), not stalled. Learnt again from here.
                quickest = Some(gap);
            } else if late > noticeable {
                let (slow, last) = slowlog(&mut conn, slow_seen);
                slow_seen = Some(last);
                let _ = log.write(&Event::ServerStall {
                    port,
                    t_start: sent,
                    t_end: sent + late,
                    slow,
                });
            }
            std::thread::sleep(TICK);
        }
    }
}

/// A connection to `port` whose answers may take up to [`ANSWER_LIMIT`].
fn connect(port: u16) -> Result<redis::Connection, BoxError> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let conn = client.get_connection_with_timeout(Duration::from_millis(100))?;
    conn.set_read_timeout(Some(ANSWER_LIMIT))?;
    conn.set_write_timeout(Some(ANSWER_LIMIT))?;
    Ok(conn)
}

/// The `SLOWLOG` entries after `after` (the command with its first argument, and the
/// microseconds it ran), and the newest entry's id (`after` when there is none, -1 for an
/// empty log).
fn slowlog(conn: &mut redis::Connection, after: Option<i64>) -> (Vec<(String, u64)>, i64) {
    let mut newest = after.unwrap_or(-1);
    let Ok(Value::Array(entries)) = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(32)
        .query::<Value>(conn)
    else {
        return (Vec::new(), newest);
    };
    let mut slow = Vec::new();
    for entry in entries {
        let Value::Array(fields) = entry else {
            continue;
        };
        let (Some(Value::Int(id)), Some(Value::Int(micros)), Some(Value::Array(args))) =
            (fields.first(), fields.get(2), fields.get(3))
        else {
            continue;
        };
        newest = newest.max(*id);
        if after.is_some_and(|seen| *id <= seen) || after.is_none() {
            continue;
        }
        let words: Vec<String> = args
            .iter()
            .take(2)
            .filter_map(|arg| match arg {
                Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                _ => None,
            })
            .collect();
        slow.push((words.join(" "), u64::try_from(*micros).unwrap_or(0)));
    }
    (slow, newest)
}
