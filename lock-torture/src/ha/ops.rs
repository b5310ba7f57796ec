//! What the orchestrator asks the servers of a replicated deployment, with short deadlines
//! and errors instead of panics: a paused or killed server is the normal case here.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use redis::Value;

use crate::clock::{self, Nanos};
use crate::BoxError;

/// How long one question may take: a paused server must not stall the orchestrator.
pub const ASK_LIMIT: Duration = Duration::from_millis(300);

/// `127.0.0.1:port`.
pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A connection to `port` with [`ASK_LIMIT`] on every step.
pub fn connect(port: u16) -> Result<redis::Connection, BoxError> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let conn = client.get_connection_with_timeout(ASK_LIMIT)?;
    conn.set_read_timeout(Some(ASK_LIMIT))?;
    conn.set_write_timeout(Some(ASK_LIMIT))?;
    Ok(conn)
}

/// One command on a fresh connection.
pub fn ask(port: u16, args: &[&str]) -> Result<Value, BoxError> {
    let mut conn = connect(port)?;
    run(&mut conn, args)
}

/// One command on a fresh connection, asked again while the server does not answer in
/// time (a loaded machine leaves a server unscheduled for hundreds of milliseconds), for
/// up to `limit`; for the orchestrator's own steps that must happen (a slot's move), and
/// only for commands that can run twice. An error reply is returned at once; the last
/// failure names the command and the server.
pub fn insist(port: u16, args: &[&str], limit: Duration) -> Result<Value, BoxError> {
    let deadline = clock::now() + clock::nanos(limit);
    loop {
        let err = match ask(port, args) {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        let unanswered = err
            .downcast_ref::<redis::RedisError>()
            .is_none_or(|e| e.is_io_error() || e.is_timeout());
        if !unanswered || clock::now() > deadline {
            let what = args.iter().take(3).copied().collect::<Vec<_>>().join(" ");
            return Err(format!("{what} on port {port}: {err}").into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One command on `conn`.
pub fn run(conn: &mut redis::Connection, args: &[&str]) -> Result<Value, BoxError> {
    let mut cmd = redis::cmd(args.first().copied().unwrap_or("PING"));
    for arg in args.iter().skip(1) {
        cmd.arg(*arg);
    }
    Ok(cmd.query::<Value>(conn)?)
}

/// A reply as text (bulk and simple strings), if it is one.
pub fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_owned()),
        _ => None,
    }
}

/// A reply as an integer, if it is one.
pub fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other).and_then(|t| t.trim().parse().ok()),
    }
}

/// Whether the master on `port` has a replica that acknowledges its writes: a write of
/// `key` (a key of one of its own slots, on a Cluster), then `WAIT 1`. A replica can say
/// its link is up (`ROLE`: `connected`) while its master streams it nothing yet: in one
/// Cluster smoke a replica's first command arrived 850 ms after the clients started, and
/// the grants of its master, which the replica check makes wait for it, waited until
/// then. Grants with the check on need this, not the link alone.
pub fn acknowledged(port: u16, key: &str) -> bool {
    let Ok(mut conn) = connect(port) else {
        return false;
    };
    run(&mut conn, &["SET", key, "1", "PX", "10000"]).is_ok()
        && run(&mut conn, &["WAIT", "1", "200"])
            .ok()
            .as_ref()
            .and_then(int)
            .is_some_and(|n| n >= 1)
}

/// What `ROLE` says a data server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A master, with the ports of the replicas connected to it.
    Master(Vec<u16>),
    /// A replica of the master on this port, and whether its link is up (`connected`).
    Replica(u16, bool),
}

/// The role of the server on `port`, or `None` when it does not answer in time.
pub fn role(port: u16) -> Option<Role> {
    let reply = ask(port, &["ROLE"]).ok()?;
    let Value::Array(items) = reply else {
        return None;
    };
    match items.first().and_then(text).as_deref() {
        Some("master") => {
            let replicas = match items.get(2) {
                Some(Value::Array(list)) => list
                    .iter()
                    .filter_map(|r| match r {
                        Value::Array(fields) => fields.get(1).and_then(int),
                        _ => None,
                    })
                    .filter_map(|p| u16::try_from(p).ok())
                    .collect(),
                _ => Vec::new(),
            };
            Some(Role::Master(replicas))
        }
        Some("slave") => {
            let master = items
                .get(2)
                .and_then(int)
                .and_then(|p| u16::try_from(p).ok())?;
            let state = items.get(3).and_then(text).unwrap_or_default();
            Some(Role::Replica(master, state == "connected"))
        }
        _ => None,
    }
}

/// Asks `what` every 10 ms until it is true or `limit` has passed; the moment it was first
/// seen true.
pub fn poll(limit: Duration, mut what: impl FnMut() -> bool) -> Option<Nanos> {
    let deadline = clock::now() + clock::nanos(limit);
    loop {
        if what() {
            return Some(clock::now());
        }
        if clock::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A lock name's key (lock-core's layout; its fencing counter is this and `:fence`).
pub fn lock_key(name: &str) -> String {
    crate::names::lock_key(name)
}

/// The lease token in a lock key's value (`[~]<token>:<holder label>`, see
/// [`crate::event::lease_token`]): without the hand-over mark, or a lease claimed while
/// others were queued matches no client's lease.
pub fn token_of(value: &str) -> &str {
    crate::event::lease_token(value)
}

/// What a replica holds for `name` right now: the lease token on the lock key, when that
/// key expires (on the shared clock), and the fencing counter. `READONLY` first, so that a
/// Cluster replica answers for its master's slots instead of redirecting.
pub fn read_copy(
    port: u16,
    name: &str,
    cluster: bool,
) -> Result<(Option<String>, Option<Nanos>, u64), BoxError> {
    let mut conn = connect(port)?;
    if cluster {
        run(&mut conn, &["READONLY"])?;
    }
    let key = lock_key(name);
    let value = text(&run(&mut conn, &["GET", &key])?);
    let pttl = int(&run(&mut conn, &["PTTL", &key])?).unwrap_or(-2);
    let now = clock::now();
    let fence = int(&run(&mut conn, &["GET", &format!("{key}:fence")])?).unwrap_or(0);
    let expires = u64::try_from(pttl)
        .ok()
        .map(|ms| now + ms.saturating_mul(1_000_000));
    Ok((
        value.as_deref().map(|v| token_of(v).to_owned()),
        expires,
        u64::try_from(fence).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_tests::RedisServer;

    #[test]
    fn insisting_outlasts_a_server_that_does_not_run_and_stops_at_an_error_reply() {
        let server = RedisServer::start();
        let port = server.port();
        server.signal("-STOP");
        // Asked once, a stopped server is an error (the harness's fatal one before).
        assert!(ask(port, &["PING"]).is_err());
        let resumer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            server.signal("-CONT");
            server
        });
        let answer = insist(port, &["PING"], Duration::from_secs(10));
        let server = resumer.join().expect("the resuming thread");
        assert_eq!(answer.ok().as_ref().and_then(text).as_deref(), Some("PONG"));
        let started = clock::now();
        let refused = insist(port, &["NO-SUCH-COMMAND"], Duration::from_secs(10));
        let err = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("NO-SUCH-COMMAND on port"), "{err}");
        assert!(clock::now() - started < clock::nanos(Duration::from_secs(5)));
        drop(server);
    }
}
