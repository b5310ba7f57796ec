//! The checks of one server: each returns a [`Finding`] that says what was found, why it
//! matters for locks, and what to change; a check the server would not answer is "could not
//! check", with the reason, never "fine".

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::Value;

use super::{Finding, Level};
use crate::exit::Failure;
use crate::store::Target;

/// `INFO everything` as name -> value, or why the server would not answer it.
pub(super) type Info = Result<HashMap<String, String>, String>;

/// What the checks of one server found.
pub(super) struct Checked {
    /// The findings, in the order they are printed.
    pub findings: Vec<Finding>,
    /// The server's `INFO everything` (Redlock's checks read `run_id`, `role`, ...).
    pub info: Info,
    /// The server's clock minus this host's, in milliseconds (`None`: `TIME` refused, or
    /// not asked of a Sentinel).
    pub clock_offset_ms: Option<f64>,
}

/// Runs every check against the server of `target`. Fails (69, or 78 when the server
/// refuses the credentials) only when the server cannot be reached at all.
pub(super) async fn server(target: &Target) -> Result<Checked, Failure> {
    let mut conn = target.connection().await?;
    let info = match info(&mut conn, "everything").await {
        Ok(info) => Ok(info),
        Err(err) if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() => {
            return Err(Failure::from_redis(&err, &target.shown_url))
        }
        Err(err) => Err(format!("INFO refused ({err})")),
    };
    let mut findings = vec![version(&info), topology(&mut conn, &info).await];
    let sentinel = info
        .as_ref()
        .is_ok_and(|info| info.get("redis_mode").map(String::as_str) == Some("sentinel"));
    let mut clock_offset_ms = None;
    if !sentinel {
        findings.push(eviction(&info));
        findings.push(persistence(&mut conn).await);
        findings.push(replicas(&info));
        let (finding, offset) = clock(&mut conn).await;
        clock_offset_ms = offset;
        findings.push(finding);
        findings.push(acl(&mut conn, target).await);
    }
    findings.push(tls(target.url()));
    Ok(Checked {
        findings,
        info,
        clock_offset_ms,
    })
}

/// `INFO <section>` as name -> value.
async fn info(
    conn: &mut MultiplexedConnection,
    section: &str,
) -> redis::RedisResult<HashMap<String, String>> {
    let text: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect())
}

/// `CONFIG GET <pattern>` as name -> value, or why it was refused.
async fn config(
    conn: &mut MultiplexedConnection,
    pattern: &str,
) -> Result<HashMap<String, String>, String> {
    let reply: Value = redis::cmd("CONFIG")
        .arg("GET")
        .arg(pattern)
        .query_async(conn)
        .await
        .map_err(|err| format!("CONFIG GET refused ({err})"))?;
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let mut out = HashMap::new();
    match &reply {
        Value::Array(items) => {
            for pair in items.chunks(2) {
                if let [name, value] = pair {
                    if let (Some(name), Some(value)) = (text(name), text(value)) {
                        out.insert(name, value);
                    }
                }
            }
        }
        Value::Map(pairs) => {
            for (name, value) in pairs {
                if let (Some(name), Some(value)) = (text(name), text(value)) {
                    out.insert(name, value);
                }
            }
        }
        _ => {}
    }
    Ok(out)
}

/// `major.minor` of a version string.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn version(info: &Info) -> Finding {
    const WHY: &str = "every acquisition is one SET ... NX PX ... GET (Redis 6.2 and later); \
                       a Cluster's waiters listen with sharded pub/sub, and key tracking and \
                       ACL checks need 7.0";
    let info = match info {
        Ok(info) => info,
        Err(reason) => return Finding::unchecked("version", reason, WHY),
    };
    let Some(version) = info.get("redis_version") else {
        return Finding::unchecked("version", "INFO server reports no redis_version", WHY);
    };
    match major_minor(version) {
        Some(v) if v < (6, 2) => Finding::new("version", Level::Unsafe, format!("Redis {version}"))
            .why(WHY)
            .fix("upgrade to Redis 7.0 or later (6.2 at the very least)"),
        Some(v) if v < (7, 0) => {
            Finding::new("version", Level::Warning, format!("Redis {version}"))
                .why(WHY)
                .fix("upgrade to Redis 7.0 or later")
        }
        Some(_) => Finding::new("version", Level::Fine, format!("Redis {version}")).why(WHY),
        None => Finding::unchecked("version", format!("unreadable version {version:?}"), WHY),
    }
}

async fn topology(conn: &mut MultiplexedConnection, info: &Info) -> Finding {
    let info = match info {
        Ok(info) => info,
        Err(reason) => {
            return Finding::unchecked(
                "topology",
                reason,
                "INFO tells a master from a replica, a Cluster node or a Sentinel",
            )
        }
    };
    let mode = info.get("redis_mode").map_or("standalone", String::as_str);
    match mode {
        "cluster" => {
            const WHY: &str = "a lock whose slot has no master can be neither taken nor \
                               released until the slot is served again";
            let Ok(cluster) = info_raw(conn, "CLUSTER", "INFO").await else {
                return Finding::unchecked("topology", "CLUSTER INFO refused", WHY);
            };
            let assigned: u32 = cluster
                .get("cluster_slots_assigned")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let state = cluster.get("cluster_state").cloned().unwrap_or_default();
            let found =
                format!(
                "Redis Cluster, state {state}, {assigned} of 16384 slots assigned, {} known nodes",
                cluster.get("cluster_known_nodes").map_or("?", String::as_str)
            );
            if assigned < 16384 || state != "ok" {
                Finding::new("topology", Level::Unsafe, found)
                    .why(WHY)
                    .fix("assign every slot to a master (redis-cli --cluster fix) and bring the cluster to state ok")
            } else {
                Finding::new("topology", Level::Fine, found).why(WHY)
            }
        }
        "sentinel" => {
            const WHY: &str = "the Sentinels decide failovers: fewer than three, or a \
                               quorum above their number, and a failover either cannot \
                               happen or can be decided by a minority";
            let reply: redis::RedisResult<Vec<Vec<String>>> = redis::cmd("SENTINEL")
                .arg("MASTERS")
                .query_async(conn)
                .await;
            let masters = match reply {
                Ok(masters) => masters,
                Err(err) => {
                    return Finding::unchecked(
                        "topology",
                        format!("SENTINEL MASTERS refused ({err})"),
                        WHY,
                    )
                }
            };
            let mut level = Level::Fine;
            let mut parts = Vec::new();
            for fields in masters {
                let field = |name: &str| {
                    fields
                        .chunks(2)
                        .find(|pair| pair[0] == name)
                        .and_then(|pair| pair.get(1).cloned())
                        .unwrap_or_default()
                };
                let quorum: u32 = field("quorum").parse().unwrap_or(0);
                let sentinels: u32 = field("num-other-sentinels").parse::<u32>().unwrap_or(0) + 1;
                if sentinels < 3 || quorum > sentinels || quorum <= sentinels / 2 {
                    level = Level::Warning;
                }
                parts.push(format!(
                    "master {} at {}:{} ({}), quorum {quorum} of {sentinels} Sentinels",
                    field("name"),
                    field("ip"),
                    field("port"),
                    field("flags")
                ));
            }
            let found = format!(
                "a Sentinel: {}; point doctor at the master for the other checks",
                parts.join("; ")
            );
            Finding::new("topology", level, found)
                .why(WHY)
                .fix("run at least three Sentinels on separate hosts, with a quorum that is a majority of them")
        }
        _ => {
            let role = info.get("role").map_or("?", String::as_str);
            const WHY: &str = "locks are taken on a master; a replica refuses writes, and \
                               a lock written on a master that fails over before its \
                               replica copied it is granted again";
            if role == "slave" {
                Finding::new("topology", Level::Unsafe, format!(
                    "one Redis, a replica of {}:{}",
                    info.get("master_host").map_or("?", String::as_str),
                    info.get("master_port").map_or("?", String::as_str)
                ))
                .why(WHY)
                .fix("point the lockers (and doctor) at the master, or at the Sentinels that name it")
            } else {
                Finding::new("topology", Level::Fine, "one Redis, a master").why(WHY)
            }
        }
    }
}

/// A two-word command whose reply is `name:value` lines (CLUSTER INFO).
async fn info_raw(
    conn: &mut MultiplexedConnection,
    command: &str,
    sub: &str,
) -> redis::RedisResult<HashMap<String, String>> {
    let text: String = redis::cmd(command).arg(sub).query_async(conn).await?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect())
}

fn eviction(info: &Info) -> Finding {
    const WHY: &str = "with a memory limit and any policy but noeviction, Redis deletes keys \
                       under memory pressure (volatile-* policies exactly the keys with a \
                       TTL, which is every lock), and the holder works on under a lock that \
                       is gone";
    let info = match info {
        Ok(info) => info,
        Err(reason) => return Finding::unchecked("eviction", reason, WHY),
    };
    let (Some(policy), Some(maxmemory)) = (
        info.get("maxmemory_policy"),
        info.get("maxmemory").and_then(|n| n.parse::<u64>().ok()),
    ) else {
        return Finding::unchecked("eviction", "INFO memory reports no maxmemory_policy", WHY);
    };
    let found = format!("maxmemory-policy {policy}, maxmemory {maxmemory}");
    if maxmemory > 0 && policy != "noeviction" {
        Finding::new("eviction", Level::Unsafe, found)
            .why(WHY)
            .fix("CONFIG SET maxmemory-policy noeviction (and in redis.conf), or keep locks on a Redis without maxmemory")
    } else {
        Finding::new("eviction", Level::Fine, found).why(WHY)
    }
}

async fn persistence(conn: &mut MultiplexedConnection) -> Finding {
    const WHY: &str = "a Redis that restarts without its data forgets every held lock and \
                       grants them again while their holders still work";
    let aof = match config(conn, "append*").await {
        Ok(settings) => settings,
        Err(reason) => return Finding::unchecked("persistence", reason, WHY),
    };
    let save = config(conn, "save").await.unwrap_or_default();
    let appendonly = aof.get("appendonly").map_or("no", String::as_str);
    let fsync = aof.get("appendfsync").map_or("?", String::as_str);
    let save = save.get("save").cloned().unwrap_or_default();
    let rdb = if save.is_empty() {
        "off".to_owned()
    } else {
        format!("save {save}")
    };
    let found = format!("AOF {appendonly} (appendfsync {fsync}), RDB {rdb}");
    match (appendonly, fsync) {
        ("yes", "always") => Finding::new("persistence", Level::Fine, found).why(WHY),
        ("yes", "everysec") => Finding::new("persistence", Level::Fine, format!(
            "{found}: a crash loses at most the last second of grants"
        ))
        .why(WHY),
        ("yes", _) => Finding::new("persistence", Level::Warning, found)
            .why(WHY)
            .fix("appendfsync everysec (or always), or restart Redis only after the longest lock TTL has passed"),
        _ => Finding::new("persistence", Level::Warning, found)
            .why(WHY)
            .fix("appendonly yes with appendfsync everysec or always; or, if Redis may lose its data, keep it down after a restart for longer than the longest lock TTL"),
    }
}

fn replicas(info: &Info) -> Finding {
    const WHY: &str = "replication is asynchronous: a lock written on the master and not yet \
                       on the replica that a failover promotes is granted again (lag is how \
                       far behind they are; ReplicaSync waits for acknowledgements)";
    let info = match info {
        Ok(info) => info,
        Err(reason) => return Finding::unchecked("replicas", reason, WHY),
    };
    let connected: u32 = info
        .get("connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if connected == 0 {
        return Finding::new("replicas", Level::Fine, "no replicas connected").why(WHY);
    }
    let mut level = Level::Fine;
    let mut parts = Vec::new();
    for i in 0..connected {
        let Some(line) = info.get(&format!("slave{i}")) else {
            continue;
        };
        let field = |name: &str| {
            line.split(',')
                .filter_map(|kv| kv.split_once('='))
                .find(|(key, _)| *key == name)
                .map_or("?", |(_, value)| value)
        };
        let lag: u64 = field("lag").parse().unwrap_or(0);
        if lag > 1 || field("state") != "online" {
            level = Level::Warning;
        }
        parts.push(format!(
            "{}:{} {} lag {lag}s",
            field("ip"),
            field("port"),
            field("state")
        ));
    }
    Finding::new("replicas", level, format!("{connected} connected: {}", parts.join("; ")))
        .why(WHY)
        .fix("find why the replica lags (network, disk, load); use ReplicaSync for locks that must survive a failover")
}

/// An offset between clocks above this (in ms) is a warning: a second is several times the
/// drift Redlock allows for over a 30 s TTL (lockctl's and lock-core's default; 1% plus
/// 2 ms), and more than NTP leaves between hosts that run it.
pub(super) const CLOCK_LIMIT_MS: f64 = 1000.0;

/// The clock finding, and the server's clock minus this host's in ms (when `TIME` answered).
async fn clock(conn: &mut MultiplexedConnection) -> (Finding, Option<f64>) {
    const WHY: &str = "holders count validity on their own clock and Redis expires keys on \
                       its clock; a large offset means the clocks are not kept in step (NTP), \
                       and a clock that jumps shortens or stretches TTLs";
    let sent = Instant::now();
    let before = SystemTime::now();
    let reply: redis::RedisResult<(u64, u64)> = redis::cmd("TIME").query_async(conn).await;
    let rtt = sent.elapsed();
    let (secs, micros) = match reply {
        Ok(time) => time,
        Err(err) => {
            let finding = Finding::unchecked("clock", format!("TIME refused ({err})"), WHY);
            return (finding, None);
        }
    };
    let server = Duration::from_secs(secs) + Duration::from_micros(micros);
    let local = (before + rtt / 2)
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let offset_ms = server.as_secs_f64() * 1000.0 - local.as_secs_f64() * 1000.0;
    let found = format!(
        "server clock {offset_ms:+.1} ms from this host's (round trip {:.1} ms)",
        rtt.as_secs_f64() * 1000.0
    );
    let finding = if offset_ms.abs() > CLOCK_LIMIT_MS {
        Finding::new("clock", Level::Warning, found)
            .why(WHY)
            .fix("run NTP (chrony, systemd-timesyncd) on the Redis hosts and the clients")
    } else {
        Finding::new("clock", Level::Fine, found).why(WHY)
    };
    (finding, Some(offset_ms))
}

/// The commands lockers send, and whether each is needed (false: a feature degrades).
fn acl_commands(prefix: &str) -> Vec<(bool, &'static str, Vec<String>)> {
    let key = format!("{prefix}{{doctor}}");
    let channel = format!("{prefix}waiters:doctor");
    let strings = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    vec![
        (
            true,
            "SET NX PX GET",
            strings(&["SET", &key, "v", "NX", "PX", "1000", "GET"]),
        ),
        (true, "GET", strings(&["GET", &key])),
        (true, "DEL", strings(&["DEL", &key])),
        (true, "PEXPIRE", strings(&["PEXPIRE", &key, "1000"])),
        (true, "EVAL", strings(&["EVAL", "return 1", "1", &key])),
        (
            true,
            "EVALSHA",
            strings(&[
                "EVALSHA",
                "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
                "1",
                &key,
            ]),
        ),
        (true, "PUBLISH", strings(&["PUBLISH", &channel, "m"])),
        (true, "SUBSCRIBE", strings(&["SUBSCRIBE", &channel])),
        (
            false,
            "FCALL (ScriptMode::Functions)",
            strings(&["FCALL", "lock_acquire", "1", &key]),
        ),
        (
            false,
            "SSUBSCRIBE (Cluster waiters)",
            strings(&["SSUBSCRIBE", &channel]),
        ),
        (
            false,
            "INFO (replica count)",
            strings(&["INFO", "replication"]),
        ),
        (false, "WAIT (ReplicaSync)", strings(&["WAIT", "0", "0"])),
        (
            false,
            "CLIENT TRACKING (lost leases told at once)",
            strings(&["CLIENT", "TRACKING", "ON"]),
        ),
        (
            false,
            "MGET (lost leases told at once)",
            strings(&["MGET", &key]),
        ),
    ]
}

async fn acl(conn: &mut MultiplexedConnection, target: &Target) -> Finding {
    const WHY: &str = "the lockers run scripts and pub/sub under this user; a right missing \
                       makes acquisitions fail, or turns off what depends on it";
    let user: String = match redis::cmd("ACL").arg("WHOAMI").query_async(conn).await {
        Ok(user) => user,
        Err(err) => return Finding::unchecked("acl", format!("ACL WHOAMI refused ({err})"), WHY),
    };
    let mut missing_needed = Vec::new();
    let mut missing_optional = Vec::new();
    for (needed, what, words) in acl_commands(&target.prefix) {
        let reply: redis::RedisResult<Value> = redis::cmd("ACL")
            .arg("DRYRUN")
            .arg(&user)
            .arg(&words)
            .query_async(conn)
            .await;
        match reply {
            Ok(Value::Okay) => {}
            Ok(Value::SimpleString(text)) if text == "OK" => {}
            Ok(_) => {
                if needed {
                    missing_needed.push(what);
                } else {
                    missing_optional.push(what);
                }
            }
            Err(err) => {
                let text = err.to_string();
                // Unknown command (FCALL on Redis 6) is not a right missing.
                if text.contains("unknown command")
                    || text.contains("Command") && text.contains("not found")
                {
                    continue;
                }
                return Finding::unchecked("acl", format!("ACL DRYRUN refused ({err})"), WHY);
            }
        }
    }
    if !missing_needed.is_empty() {
        return Finding::new("acl", Level::Unsafe, format!(
            "user {user} may not run: {}",
            missing_needed
                .iter()
                .chain(missing_optional.iter())
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .why(WHY)
        .fix("ACL SETUSER <user> +@string +@keyspace +@scripting +@pubsub (or the single commands listed) on the lock keys' prefix");
    }
    if !missing_optional.is_empty() {
        return Finding::new(
            "acl",
            Level::Warning,
            format!("user {user} may not run: {}", missing_optional.join(", ")),
        )
        .why(WHY)
        .fix("grant these commands to the user if the features are wanted");
    }
    Finding::new(
        "acl",
        Level::Fine,
        format!("user {user} may run every command lockers send"),
    )
    .why(WHY)
}

fn tls(url: &str) -> Finding {
    const WHY: &str = "lock tokens (which prove ownership) and the password cross the \
                       network with every command";
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("rediss://") || lower.starts_with("valkeys://") {
        return Finding::new("tls", Level::Fine, "TLS (rediss://)").why(WHY);
    }
    if lower.contains("unix") {
        return Finding::new("tls", Level::Fine, "a local Unix socket").why(WHY);
    }
    let host = lower
        .split("://")
        .nth(1)
        .unwrap_or_default()
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, host)| host);
    let host = if host.starts_with('[') {
        host.split(']')
            .next()
            .unwrap_or_default()
            .trim_start_matches('[')
    } else {
        host.split(':').next().unwrap_or_default()
    };
    if matches!(host, "127.0.0.1" | "localhost" | "::1") {
        Finding::new(
            "tls",
            Level::Fine,
            format!("plain TCP to {host}, this host"),
        )
        .why(WHY)
    } else {
        Finding::new("tls", Level::Warning, format!("plain TCP to {host}"))
            .why(WHY)
            .fix("enable TLS on the server (tls-port) and use a rediss:// URL")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_findings_follow_the_url() {
        assert_eq!(tls("rediss://h:6380/").level, Level::Fine);
        assert_eq!(tls("redis://127.0.0.1:6379/").level, Level::Fine);
        assert_eq!(tls("redis://:pw@[::1]:6379/").level, Level::Fine);
        assert_eq!(tls("redis://cache.internal:6379/").level, Level::Warning);
    }

    #[test]
    fn versions_are_graded() {
        let of = |v: &str| {
            version(&Ok(HashMap::from([(
                "redis_version".to_owned(),
                v.to_owned(),
            )])))
            .level
        };
        assert_eq!(of("6.0.9"), Level::Unsafe);
        assert_eq!(of("6.2.14"), Level::Warning);
        assert_eq!(of("7.0.15"), Level::Fine);
    }
}
