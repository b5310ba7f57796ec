//! Which server granted which lease: one `MONITOR` stream per data node of a replicated
//! deployment.
//!
//! After a failover two servers may both have believed they were the master of a lock for
//! a while. Whether an overlap is the asynchronous replication a deployment warns about or
//! a defect depends on which servers granted the two leases, and only the servers know
//! that. `MONITOR` shows every command a server executes, those run by a script included
//! (as `[0 lua] "SET" ...`), with the server's own time stamp. An acquire script that took
//! the lock sets the lock key to the lease's value and then draws the fencing token
//! (`TIME`, then `SET lock:{n}:fence <token> GET`: see lock-core's `fence.lua`; which the
//! torture's locker asks for on every acquisition); a script that found the lock busy sets
//! nothing or draws nothing. So a `SET lock:{n} <token>:...` followed, in the same script
//! run, by a `SET` of `lock:{n}:fence` (or the `INCR` of lock-core before issue 40) is a
//! grant of that token by that server: an [`Event::Granted`]. A permit set (semaphore, read-write
//! lock) draws no token: a `ZADD` to its holders key (`lock:{n}:sem`, `lock:{n}:rw`) of a
//! holder member (`<weight> <value>`, a positive score: when it ends) is the grant, a
//! waiter's reservation and an extension included (they grant on the same server; the
//! torture runs permit sets on a Cluster only in modes that move no master).
//!
//! The stream of a killed server ends; its thread reconnects as soon as the new process
//! listens (a grant made before it is attached is missed, and the checker then treats the
//! lease as of unknown origin: nothing is excused for it).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::{self, Nanos};
use crate::event::{Event, Log};
use crate::ha::ops::{addr, token_of};
use crate::workers::Workers;
use crate::BoxError;

/// The `MONITOR` readers of a run; they stop when dropped.
#[derive(Debug)]
pub struct Monitors(Workers);

impl Monitors {
    /// Starts a reader for each port, logging grants to `dir/monitor-<port>.jsonl`, and
    /// returns once each is attached. With [`RAW`] set in the environment, every line of
    /// each stream is kept too, in `dir/monitor-<port>.raw`, after the time it was read
    /// (the history's clock): for tracing down when commands reached a server.
    pub fn start(ports: &[u16], dir: &Path) -> Result<Monitors, BoxError> {
        let mut workers = Workers::default();
        let keep_raw = std::env::var_os(RAW).is_some();
        for &port in ports {
            let log = Log::create(&dir.join(format!("monitor-{port}.jsonl")))?;
            let raw = match keep_raw {
                true => Some(std::io::BufWriter::new(std::fs::File::create(
                    dir.join(format!("monitor-{port}.raw")),
                )?)),
                false => None,
            };
            let (attached, first) = std::sync::mpsc::channel();
            workers.spawn(move |stop| follow(port, &log, raw, stop, &attached));
            if first.recv_timeout(Duration::from_secs(5)).is_err() {
                return Err(format!("MONITOR on port {port} did not start").into());
            }
        }
        Ok(Monitors(workers))
    }

    /// Stops the readers and waits for them (their logs are complete afterwards).
    pub fn stop(&mut self) {
        self.0.stop();
    }
}

/// The environment variable that keeps every `MONITOR` line (see [`Monitors::start`]).
pub const RAW: &str = "LOCK_TORTURE_MONITOR_RAW";

/// Reads `port`'s MONITOR stream until told to stop, reconnecting after the server died;
/// every line goes to `raw` too, when given.
fn follow(
    port: u16,
    log: &Log,
    mut raw: Option<std::io::BufWriter<std::fs::File>>,
    stop: &AtomicBool,
    attached: &std::sync::mpsc::Sender<()>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect_timeout(&addr(port), Duration::from_millis(100))
        else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        let ready = stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .and_then(|()| stream.write_all(b"*1\r\n$7\r\nMONITOR\r\n"));
        if ready.is_err() {
            continue;
        }
        let mut reader = BufReader::new(stream);
        let mut script = Script::default();
        let mut line = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break, // the server is gone
                Ok(_) if line.ends_with(b"\n") => {
                    let text = String::from_utf8_lossy(&line);
                    if let Some(raw) = raw.as_mut() {
                        let _ = write!(raw, "{} {text}", clock::now());
                    }
                    if text.starts_with("+OK") {
                        let _ = attached.send(());
                    } else {
                        for seen in script.feed(text.trim_end()) {
                            let t = to_shared_clock(script.stamp);
                            let _ = log.write(&match seen {
                                Seen::Grant { token, key, until } => Event::Granted {
                                    node: port,
                                    t,
                                    token,
                                    key: Some(key),
                                    until: until.map(to_shared_clock),
                                },
                                Seen::Removal { token } => Event::Ungranted {
                                    node: port,
                                    t,
                                    token,
                                },
                            });
                        }
                    }
                    line.clear();
                }
                // A line cut by the read timeout: the rest follows.
                Ok(_) => {}
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
    }
}

/// What one line completes: a grant, or the removal of one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// A lease granted by writing `key`, ending by the server's clock at `until` (ns since
    /// the epoch) when the command says.
    Grant {
        token: String,
        key: String,
        until: Option<u128>,
    },
    /// A lease's grant removed: its permit member taken out of its set, or its lock key
    /// deleted or set to another value (by a script; an expiry is its grant's `until`).
    Removal { token: String },
}

/// The state of one script run on the stream (the lock keys it set, and to what), and the
/// lease each lock key was last set to.
#[derive(Debug, Default)]
struct Script {
    /// (lock key, lease token, end, whether it was a `SET NX`) of each `SET` of a lock key
    /// in the current run.
    sets: Vec<(String, String, Option<u128>, bool)>,
    /// Lock key -> the lease token a script last set it to.
    current: HashMap<String, String>,
    /// The server's time stamp of the last line, in ns since the epoch.
    stamp: u128,
}

impl Script {
    /// Takes one MONITOR line; returns the grants and removals it completes.
    fn feed(&mut self, line: &str) -> Vec<Seen> {
        self.grants(line).unwrap_or_default()
    }

    fn grants(&mut self, line: &str) -> Option<Vec<Seen>> {
        let (stamp, rest) = line.trim_start_matches('+').split_once(' ')?;
        let (source, args) = rest.strip_prefix('[')?.split_once("] ")?;
        if !source.ends_with(" lua") {
            // A client's command: a new script run (or none) begins.
            self.sets.clear();
            return None;
        }
        self.stamp = parse_stamp(stamp)?;
        let args = parse_args(args);
        let command = args.first()?.to_ascii_uppercase();
        let key = args.get(1)?;
        let lock_key = key.starts_with("lock:{") && key.ends_with('}');
        let permit_key =
            key.starts_with("lock:{") && (key.ends_with("}:sem") || key.ends_with("}:rw"));
        match command.as_str() {
            "SET" if lock_key => {
                let token = token_of(args.get(2)?).to_owned();
                let until = expiry(&args[3..], self.stamp);
                // `SET NX` writes only an absent key, and `MONITOR` does not say whether
                // it did: it counts once the same run draws the fencing token, which the
                // scripts do only after it took the lock (a failed one replaced nothing).
                let nx = args[3..].iter().any(|o| o.eq_ignore_ascii_case("NX"));
                self.sets.push((key.clone(), token.clone(), until, nx));
                if nx {
                    return None;
                }
                replaced(self.current.insert(key.clone(), token.clone()), &token)
            }
            "DEL" if lock_key => {
                let token = self.current.remove(key)?;
                Some(vec![Seen::Removal { token }])
            }
            "SET" | "INCR" => {
                let lock = key.strip_suffix(":fence")?;
                let at = self.sets.iter().rposition(|(k, _, _, _)| k == lock)?;
                let (key, token, until, nx) = self.sets.remove(at);
                let mut seen = Vec::new();
                if nx {
                    let old = self.current.insert(key.clone(), token.clone());
                    seen.extend(replaced(old, &token).into_iter().flatten());
                }
                seen.push(Seen::Grant { token, key, until });
                Some(seen)
            }
            "ZADD" if permit_key => Some(permit_grants(key, &args[2..])),
            "ZREM" if permit_key => Some(
                args[2..]
                    .iter()
                    .filter(|member| !member.starts_with('#'))
                    .filter_map(|member| member.split_once(' '))
                    .map(|(_, value)| Seen::Removal {
                        token: token_of(value).to_owned(),
                    })
                    .collect(),
            ),
            _ => None,
        }
    }
}

/// The removal of the lease a lock key held (`old`) when it now holds `token`'s.
fn replaced(old: Option<String>, token: &str) -> Option<Vec<Seen>> {
    match old {
        Some(old) if old != token => Some(vec![Seen::Removal { token: old }]),
        _ => None,
    }
}

/// When a `SET`'s key expires, from its options after the value (`PX ms`, `PXAT ms`, `EX s`),
/// in ns since the epoch; `stamp` is the server's time of the command.
fn expiry(options: &[String], stamp: u128) -> Option<u128> {
    let at = options
        .iter()
        .position(|o| matches!(o.to_ascii_uppercase().as_str(), "PX" | "PXAT" | "EX"))?;
    let n: u128 = options.get(at + 1)?.parse().ok()?;
    match options[at].to_ascii_uppercase().as_str() {
        "PX" => Some(stamp + n * 1_000_000),
        "PXAT" => Some(n * 1_000_000),
        _ => Some(stamp + n * 1_000_000_000),
    }
}

/// The holders a permit set's `ZADD` writes: `(score, member)` pairs after any flags, a
/// holder being a member that is not a state member (`#...`) with a positive score (when it
/// ends, in ms since the epoch), `<weight> <value>`.
fn permit_grants(key: &str, args: &[String]) -> Vec<Seen> {
    let flags = args
        .iter()
        .take_while(|arg| arg.parse::<f64>().is_err())
        .count();
    args[flags..]
        .chunks_exact(2)
        .filter(|pair| !pair[1].starts_with('#'))
        .filter_map(|pair| {
            let score = pair[0].parse::<f64>().ok().filter(|score| *score > 0.0)?;
            let (_, value) = pair[1].split_once(' ')?;
            // Whole milliseconds since the epoch: exact in an f64.
            let ms = pair[0].split('.').next()?.parse::<u128>().ok()?;
            debug_assert!(score > 0.0);
            Some(Seen::Grant {
                token: token_of(value).to_owned(),
                key: key.to_owned(),
                until: Some(ms * 1_000_000),
            })
        })
        .collect()
}

/// `1700000000.123456` (seconds and microseconds) in nanoseconds.
fn parse_stamp(stamp: &str) -> Option<u128> {
    let (secs, micros) = stamp.split_once('.')?;
    Some(secs.parse::<u128>().ok()? * 1_000_000_000 + micros.parse::<u128>().ok()? * 1_000)
}

/// The quoted arguments of a MONITOR line (`"SET" "k" "v"`), unescaped.
fn parse_args(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => arg.push('\n'),
                    Some('r') => arg.push('\r'),
                    Some('t') => arg.push('\t'),
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        if let Ok(byte) = u8::from_str_radix(&hex, 16) {
                            arg.push(char::from(byte));
                        }
                    }
                    Some(other) => arg.push(other),
                    None => break,
                },
                other => arg.push(other),
            }
        }
        args.push(arg);
    }
    args
}

/// A wall-clock stamp (ns since the epoch) on the shared monotonic clock: both clocks are
/// read now, and the difference is applied (the server runs on this host).
fn to_shared_clock(wall_ns: u128) -> Nanos {
    let mono = u128::from(clock::now());
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let shifted = (wall_ns + mono).saturating_sub(wall);
    u64::try_from(shifted).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tokens of the grants among `seen`.
    fn granted(seen: impl Iterator<Item = Seen>) -> Vec<String> {
        seen.filter_map(|s| match s {
            Seen::Grant { token, .. } => Some(token),
            Seen::Removal { .. } => None,
        })
        .collect()
    }

    /// A failed `SET NX` (another client's attempt on a held lock: the script reads the
    /// holder next) replaced nothing; the holder's lease ends only at its release. The
    /// reader took every `SET` of a lock key for a write, and so counted the name free from
    /// any failed attempt on it (the Cluster's first-200-ms `liveness` suspect).
    #[test]
    fn a_failed_set_nx_replaces_nothing_a_successful_one_is_a_grant() {
        let mut script = Script::default();
        let lines = [
            r#"+1700000000.000001 [0 127.0.0.1:5000] "evalsha" "abc" "2" "lock:{n}" "lock:{n}:fence" "t1:torture-c0@h:1" "200" "1""#,
            r#"+1700000000.000002 [0 lua] "SET" "lock:{n}" "t1:torture-c0@h:1" "NX" "PX" "200""#,
            r#"+1700000000.000003 [0 lua] "TIME""#,
            r#"+1700000000.000004 [0 lua] "SET" "lock:{n}:fence" "17" "GET""#,
            r#"+1700000000.000005 [0 127.0.0.1:5001] "evalsha" "abc" "2" "lock:{n}" "lock:{n}:fence" "t2:torture-c1@h:2" "200" "1""#,
            r#"+1700000000.000006 [0 lua] "SET" "lock:{n}" "t2:torture-c1@h:2" "NX" "PX" "200""#,
            r#"+1700000000.000007 [0 lua] "GET" "lock:{n}""#,
            r#"+1700000000.000008 [0 lua] "PTTL" "lock:{n}""#,
        ];
        let seen: Vec<Seen> = lines.iter().flat_map(|l| script.feed(l)).collect();
        assert_eq!(granted(seen.iter().cloned()), ["t1"]);
        assert!(
            !seen.iter().any(|s| matches!(s, Seen::Removal { .. })),
            "{seen:?}"
        );
        // t1's release, then t2's next attempt takes the lock.
        let more = [
            r#"+1700000000.000009 [0 127.0.0.1:5000] "evalsha" "rel" "2" "lock:{n}" "lock:{n}:q" "t1:torture-c0@h:1""#,
            r#"+1700000000.000010 [0 lua] "GET" "lock:{n}""#,
            r#"+1700000000.000011 [0 lua] "DEL" "lock:{n}""#,
            r#"+1700000000.000012 [0 127.0.0.1:5001] "evalsha" "abc" "2" "lock:{n}" "lock:{n}:fence" "t3:torture-c1@h:2" "200" "1""#,
            r#"+1700000000.000013 [0 lua] "SET" "lock:{n}" "t3:torture-c1@h:2" "NX" "PX" "200""#,
            r#"+1700000000.000014 [0 lua] "TIME""#,
            r#"+1700000000.000015 [0 lua] "SET" "lock:{n}:fence" "18" "GET""#,
        ];
        let seen: Vec<Seen> = more.iter().flat_map(|l| script.feed(l)).collect();
        assert_eq!(
            seen.iter()
                .map(|s| match s {
                    Seen::Grant { token, .. } => format!("grant {token}"),
                    Seen::Removal { token } => format!("removal {token}"),
                })
                .collect::<Vec<_>>(),
            ["removal t1", "grant t3"]
        );
    }

    #[test]
    fn a_set_followed_by_the_fence_increment_is_a_grant() {
        let mut script = Script::default();
        let lines = [
            r#"+1700000000.000001 [0 127.0.0.1:5000] "evalsha" "abc" "2" "lock:{n}" "lock:{n}:fence" "t1:torture-c0@h:1" "200" "1""#,
            r#"+1700000000.000002 [0 lua] "SET" "lock:{n}" "t1:torture-c0@h:1" "NX" "PX" "200""#,
            r#"+1700000000.000003 [0 lua] "TIME""#,
            r#"+1700000000.000004 [0 lua] "SET" "lock:{n}:fence" "1700000000000003" "GET""#,
        ];
        let grants = granted(lines.iter().flat_map(|l| script.feed(l)));
        assert_eq!(grants, vec!["t1".to_owned()]);
        assert_eq!(script.stamp, 1_700_000_000_000_004_000);
        // The counter's second SET (the clock was behind it) completes nothing more; the
        // INCR of lock-core before issue 40 completes a grant too.
        let lines = [
            r#"+1.000001 [0 127.0.0.1:5000] "evalsha" "abc" "2" "lock:{n}" "lock:{n}:fence" "t2:x" "200" "1""#,
            r#"+1.000002 [0 lua] "SET" "lock:{n}" "t2:x" "NX" "PX" "200""#,
            r#"+1.000003 [0 lua] "TIME""#,
            r#"+1.000004 [0 lua] "SET" "lock:{n}:fence" "1000003" "GET""#,
            r#"+1.000005 [0 lua] "SET" "lock:{n}:fence" "9000000000""#,
            r#"+1.000006 [0 127.0.0.1:5000] "evalsha" "abc" "2" "lock:{n}" "lock:{n}:fence" "t3:x" "200" "1""#,
            r#"+1.000007 [0 lua] "SET" "lock:{n}" "t3:x" "NX" "PX" "200""#,
            r#"+1.000008 [0 lua] "INCR" "lock:{n}:fence""#,
        ];
        let grants = granted(lines.iter().flat_map(|l| script.feed(l)));
        assert_eq!(grants, vec!["t2".to_owned(), "t3".to_owned()]);
    }

    #[test]
    fn a_grant_with_the_hand_over_mark_is_the_lease_token() {
        // A queued waiter claiming the lock while others wait writes `~<value>` (issue 25).
        let mut script = Script::default();
        let lines = [
            r#"+1.000001 [0 127.0.0.1:5000] "evalsha" "abc" "4" "lock:{n}" "lock:{n}:fence" "lock:{n}:q" "lock:{n}:qe" "t1:x" "200" "1""#,
            r#"+1.000002 [0 lua] "SET" "lock:{n}" "~t1:torture-c0@h:1" "PX" "200""#,
            r#"+1.000003 [0 lua] "TIME""#,
            r#"+1.000004 [0 lua] "SET" "lock:{n}:fence" "1000003" "GET""#,
        ];
        let grants = granted(lines.iter().flat_map(|l| script.feed(l)));
        assert_eq!(grants, vec!["t1".to_owned()]);
    }

    #[test]
    fn a_busy_attempt_or_a_reservation_is_not_a_grant() {
        let mut script = Script::default();
        let lines = [
            // Busy: SET NX, then GET and PTTL, no token drawn.
            r#"+1.000001 [0 127.0.0.1:5000] "evalsha" "abc" "2" "lock:{n}" "lock:{n}:fence" "t2:x" "200" "1""#,
            r#"+1.000002 [0 lua] "SET" "lock:{n}" "t2:x" "NX" "PX" "200""#,
            r#"+1.000003 [0 lua] "GET" "lock:{n}""#,
            // A release handing the lock to the head: a reservation, no token drawn.
            r#"+1.000004 [0 127.0.0.1:5001] "evalsha" "def" "3" "lock:{n}" "lock:{n}:q" "lock:{n}:qe" "t0:y" "50""#,
            r#"+1.000005 [0 lua] "SET" "lock:{n}" "t3:z" "PX" "50""#,
            r#"+1.000006 [0 lua] "PUBLISH" "lock:waiters:1" "g:50:lock:{n}""#,
            // The next client's INCR or SET of some counter does not complete anything.
            r#"+1.000007 [0 127.0.0.1:5002] "INCR" "lock:{n}:fence""#,
            r#"+1.000008 [0 127.0.0.1:5002] "SET" "lock:{n}:fence" "5""#,
        ];
        assert!(granted(lines.iter().flat_map(|l| script.feed(l))).is_empty());
    }

    #[test]
    fn a_permit_holder_written_to_its_set_is_a_grant() {
        let mut script = Script::default();
        let lines = [
            r##"+1.000001 [0 127.0.0.1:5000] "evalsha" "abc" "2" "lock:{n}:sem" "lock:{n}:sem:q" "1 t4:torture-c0@h:1" "200""##,
            r##"+1.000002 [0 lua] "TIME""##,
            r##"+1.000003 [0 lua] "ZMSCORE" "lock:{n}:sem" "#c" "#w" "1 t4:torture-c0@h:1""##,
            // A take: the holder, and state members (negative scores, '#' names).
            r##"+1.000004 [0 lua] "ZADD" "lock:{n}:sem" "1700000000200" "1 t4:torture-c0@h:1" "-1" "#w" "-3" "#c""##,
            // A release handing two readers their permits, one of them by reservation.
            r##"+1.000005 [0 127.0.0.1:5001] "evalsha" "def" "2" "lock:{n}:rw" "lock:{n}:rw:q""##,
            r##"+1.000006 [0 lua] "ZADD" "lock:{n}:rw" "1700000000300" "1 t5:a" "1700000000100" "1 ~t6:b" "-2" "#w""##,
            // Nothing granted: a state write, a queue entry, a removal.
            r##"+1.000007 [0 lua] "ZADD" "lock:{n}:rw" "-0.5" "#w""##,
            r##"+1.000008 [0 lua] "ZADD" "lock:{n}:rw:q" "NX" "1700000000000000" "1 100 200 x 0 t7:c""##,
            r##"+1.000009 [0 lua] "ZREM" "lock:{n}:rw" "1 t5:a""##,
        ];
        let grants = granted(lines.iter().flat_map(|l| script.feed(l)));
        assert_eq!(grants, ["t4", "t5", "t6"]);
    }

    #[test]
    fn grants_carry_their_key_and_end_and_removals_are_seen() {
        let mut script = Script::default();
        let lines = [
            // A lock granted for 200 ms, then deleted by its release.
            r#"+1.000001 [0 127.0.0.1:5000] "evalsha" "abc" "2" "lock:{n}" "lock:{n}:fence" "t1:x" "200" "1""#,
            r#"+1.000002 [0 lua] "SET" "lock:{n}" "t1:x" "NX" "PX" "200""#,
            r#"+1.000003 [0 lua] "SET" "lock:{n}:fence" "5" "GET""#,
            r#"+1.000004 [0 127.0.0.1:5000] "evalsha" "def" "1" "lock:{n}" "t1:x""#,
            r#"+1.000005 [0 lua] "DEL" "lock:{n}""#,
            // A permit granted, then taken back; a state member's removal is nothing.
            r##"+1.000006 [0 127.0.0.1:5001] "evalsha" "ghi" "2" "lock:{n}:sem" "lock:{n}:sem:q""##,
            r##"+1.000007 [0 lua] "ZADD" "lock:{n}:sem" "1700000000200" "1 t2:y" "-1" "#w""##,
            r##"+1.000008 [0 lua] "ZREM" "lock:{n}:sem" "1 t2:y" "#x""##,
            // A lock key set over another lease ends that one.
            r#"+1.000009 [0 127.0.0.1:5000] "evalsha" "abc" "2" "lock:{m}" "lock:{m}:fence" "t3:x" "200" "1""#,
            r#"+1.000010 [0 lua] "SET" "lock:{m}" "t3:x" "NX" "PX" "200""#,
            r#"+1.000011 [0 lua] "SET" "lock:{m}:fence" "6" "GET""#,
            r#"+1.000012 [0 lua] "SET" "lock:{m}" "~t4:z" "PX" "100""#,
        ];
        let seen: Vec<Seen> = lines.iter().flat_map(|l| script.feed(l)).collect();
        let grant = |token: &str, key: &str, until: u128| Seen::Grant {
            token: token.into(),
            key: key.into(),
            until: Some(until),
        };
        let removal = |token: &str| Seen::Removal {
            token: token.into(),
        };
        assert_eq!(
            seen,
            [
                grant("t1", "lock:{n}", 1_200_002_000),
                removal("t1"),
                grant("t2", "lock:{n}:sem", 1_700_000_000_200_000_000),
                removal("t2"),
                grant("t3", "lock:{m}", 1_200_010_000),
                removal("t3"),
            ]
        );
    }

    #[test]
    fn quoted_arguments_are_unescaped() {
        assert_eq!(
            parse_args(r#""a\"b" "c\\d" "\x41""#),
            vec!["a\"b".to_owned(), "c\\d".to_owned(), "A".to_owned()]
        );
    }
}
