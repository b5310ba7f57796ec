//! What Redis itself says about a measurement window: `INFO stats`, `INFO commandstats`
//! and `INFO cpu`, read before and after, on a connection of the benchmark's own.

use redis::aio::MultiplexedConnection;

/// A connection for INFO snapshots.
#[derive(Clone)]
pub struct Probe {
    conn: MultiplexedConnection,
}

/// Counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `total_commands_processed` (a script counts once, whatever it calls).
    pub commands: u64,
    /// The sum of `calls=` over commandstats, INFO excluded: scripts' inner calls count too.
    pub calls: u64,
    /// `calls=` per command.
    pub per_command: Vec<(String, u64)>,
    /// `usec=` per command: its execution time, a script's including its inner calls.
    pub per_command_usec: Vec<(String, u64)>,
    /// `total_reads_processed`: read events on client sockets, about one per round trip of
    /// a client (a large pipeline can take several reads).
    pub reads: u64,
    /// `used_cpu_user + used_cpu_sys`, seconds.
    pub cpu_s: f64,
    /// Microseconds Redis spent executing the commands clients sent (commandstats `usec`):
    /// the scripts (`EVAL*`, `FCALL*`, their own calls included) and `SET` (the plain lock's
    /// take, and the raw floor's), not counting the scripts' inner calls twice.
    pub exec_us: f64,
}

/// What changed between two snapshots.
#[derive(Debug, Clone, Default)]
pub struct Delta {
    pub commands: u64,
    pub calls: u64,
    pub reads: u64,
    pub cpu_s: f64,
    /// See [`Snapshot::exec_us`].
    pub exec_us: f64,
    pub per_command: Vec<(String, u64)>,
    pub per_command_usec: Vec<(String, u64)>,
}

impl Probe {
    pub async fn connect(url: &str) -> Result<Probe, String> {
        let client =
            redis::Client::open(url).map_err(|err| format!("bad Redis URL {url:?}: {err}"))?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|err| format!("cannot connect to {url}: {err}"))?;
        Ok(Probe { conn })
    }

    /// Reads the counters. Fails only if Redis does not answer.
    pub async fn snapshot(&self) -> Result<Snapshot, String> {
        let mut conn = self.conn.clone();
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .arg("commandstats")
            .arg("cpu")
            .query_async(&mut conn)
            .await
            .map_err(|err| format!("INFO failed: {err}"))?;
        Ok(parse(&info))
    }

    /// `INFO server`'s `redis_version`.
    pub async fn version(&self) -> Result<String, String> {
        let mut conn = self.conn.clone();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .map_err(|err| format!("INFO failed: {err}"))?;
        Ok(field(&info, "redis_version")
            .unwrap_or("unknown")
            .to_owned())
    }
}

/// `after - before`, per command, the commands that did not change left out.
fn per_command_delta(after: &[(String, u64)], before: &[(String, u64)]) -> Vec<(String, u64)> {
    after
        .iter()
        .map(|(name, after)| {
            let before = before
                .iter()
                .find(|(b, _)| b == name)
                .map_or(0, |(_, n)| *n);
            (name.clone(), after.saturating_sub(before))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

impl Delta {
    /// Redis's execution time in µs of the commands clients sent: scripts (`EVAL`,
    /// `EVALSHA`, `FCALL` and their read-only forms, whose time includes their inner
    /// calls) and `top_level`, the other commands the measured code sends itself. A
    /// script's inner calls are counted in commandstats too; summing every command would
    /// count them twice.
    pub fn exec_us_with(&self, top_level: &[&str]) -> u64 {
        self.per_command_usec
            .iter()
            .filter(|(name, _)| {
                name.starts_with("eval")
                    || name.starts_with("fcall")
                    || top_level.contains(&name.as_str())
            })
            .map(|(_, usec)| usec)
            .sum()
    }
}

impl Snapshot {
    pub fn delta_since(&self, before: &Snapshot) -> Delta {
        let per_command = per_command_delta(&self.per_command, &before.per_command);
        let per_command_usec = per_command_delta(&self.per_command_usec, &before.per_command_usec);
        Delta {
            // The snapshot's own INFO is one command and one read: negligible.
            commands: self.commands.saturating_sub(before.commands),
            calls: self.calls.saturating_sub(before.calls),
            reads: self.reads.saturating_sub(before.reads),
            cpu_s: (self.cpu_s - before.cpu_s).max(0.0),
            exec_us: (self.exec_us - before.exec_us).max(0.0),
            per_command,
            per_command_usec,
        }
    }
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

fn parse(info: &str) -> Snapshot {
    let number = |name: &str| field(info, name).and_then(|v| v.parse::<u64>().ok());
    let seconds = |name: &str| field(info, name).and_then(|v| v.parse::<f64>().ok());
    let per_command: Vec<(String, u64)> = info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect();
    let exec_us = info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            if !(TOP_LEVEL.contains(&name) || name.starts_with("eval") || name.starts_with("fcall"))
            {
                return None;
            }
            rest.split(',')
                .find_map(|field| field.strip_prefix("usec="))?
                .parse::<f64>()
                .ok()
        })
        .sum();
    let per_command_usec: Vec<(String, u64)> = info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let usec = rest
                .split(',')
                .find_map(|field| field.strip_prefix("usec="))?
                .trim()
                .parse()
                .ok()?;
            Some((name.to_owned(), usec))
        })
        .collect();
    Snapshot {
        commands: number("total_commands_processed").unwrap_or(0),
        calls: per_command
            .iter()
            .filter(|(name, _)| name != "info")
            .map(|(_, n)| n)
            .sum(),
        per_command,
        per_command_usec,
        reads: number("total_reads_processed").unwrap_or(0),
        cpu_s: seconds("used_cpu_user").unwrap_or(0.0) + seconds("used_cpu_sys").unwrap_or(0.0),
        exec_us,
    }
}

/// Commands counted in [`Snapshot::exec_us`] besides the scripts: sent by clients, never
/// from inside a script of the uncontended paths measured.
const TOP_LEVEL: &[&str] = &["set"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info() {
        let info = "# Stats\r\ntotal_commands_processed:120\r\ntotal_reads_processed:90\r\n\
                    # CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n\
                    # Commandstats\r\ncmdstat_set:calls=10,usec=5,usec_per_call=0.5\r\n\
                    cmdstat_info:calls=7,usec=1\r\ncmdstat_evalsha:calls=3,usec=9\r\n\
                    cmdstat_zadd:calls=3,usec=4\r\n";
        let snapshot = parse(info);
        assert_eq!(snapshot.commands, 120);
        assert_eq!(snapshot.reads, 90);
        assert_eq!(snapshot.calls, 16);
        // SET and the script; not the script's own ZADD again.
        assert_eq!(snapshot.exec_us, 14.0);
        assert!((snapshot.cpu_s - 3.75).abs() < 1e-9);
        let later = parse(&info.replace("calls=10", "calls=15"));
        let delta = later.delta_since(&snapshot);
        assert_eq!(delta.calls, 5);
        assert_eq!(delta.per_command, vec![("set".to_owned(), 5)]);
    }

    #[test]
    fn exec_time_counts_scripts_and_the_named_commands_once() {
        let info = "# Commandstats\r\ncmdstat_set:calls=10,usec=5,usec_per_call=0.5\r\n\
                    cmdstat_get:calls=4,usec=2,usec_per_call=0.5\r\n\
                    cmdstat_evalsha:calls=3,usec=9,usec_per_call=3.0\r\n";
        let before = parse("# Commandstats\r\n");
        let delta = parse(info).delta_since(&before);
        // The scripts' 9 µs include their GETs; SET is sent by the client itself.
        assert_eq!(delta.exec_us_with(&[]), 9);
        assert_eq!(delta.exec_us_with(&["set"]), 14);
    }
}
