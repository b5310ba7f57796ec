//! `lockctl doctor --redlock`: every master gets the checks of one server, then come the
//! findings that only matter across them: how many masters there are (the majority a lock
//! needs, the failures it survives), whether they are distinct servers and masters, how far
//! apart their clocks are, and how many of them answer.
//!
//! Exit codes follow the one-server rules: 0 fine, 1 warnings (a minority of masters that
//! cannot be reached is one), 2 unsafe; 69 when no majority of masters can be used (no lock
//! can be taken, as a single server that cannot be reached), 78 instead when every master
//! that failed refused lockctl's settings.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;

use super::checks::{self, Checked, CLOCK_LIMIT_MS};
use super::{print_findings, rows, verdict, worst, Finding, Level};
use crate::exit::{Failure, UNAVAILABLE};
use crate::store::Target;

/// One master as given, and what its checks found (or why it could not be used).
struct Master {
    /// Its URL, password redacted.
    url: String,
    /// Its findings, or the failure that kept doctor from checking it.
    checked: Result<Checked, Failure>,
}

impl Master {
    /// An `INFO` field, when the master answered `INFO`.
    fn info(&self, name: &str) -> Option<&str> {
        let info = self.checked.as_ref().ok()?.info.as_ref().ok()?;
        info.get(name).map(String::as_str)
    }
}

/// The majority of `n` masters that a lock needs.
fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// `lockctl doctor --redlock URL,...`: checks every master (at once), then the deployment.
/// Returns the exit code, or fails with 69 (78) after printing the report when no majority
/// of the masters can be used.
pub async fn doctor(
    urls: &[String],
    prefix: &str,
    timeout: Duration,
    json: bool,
) -> Result<u8, Failure> {
    let targets = urls
        .iter()
        .map(|url| Target::new(url, prefix, timeout))
        .collect::<Result<Vec<_>, _>>()?;
    let results = join_all(targets.iter().map(checks::server)).await;
    let masters: Vec<Master> = targets
        .iter()
        .zip(results)
        .map(|(target, checked)| Master {
            url: target.shown_url.clone(),
            checked,
        })
        .collect();
    let across = vec![
        count(masters.len()),
        reachable(&masters),
        independent(&masters),
        clocks(&masters),
    ];
    let failures: Vec<&Failure> = masters
        .iter()
        .filter_map(|master| master.checked.as_ref().err())
        .collect();
    let answering = masters.len() - failures.len();
    let levels = masters
        .iter()
        .filter_map(|master| master.checked.as_ref().ok())
        .flat_map(|checked| checked.findings.iter())
        .chain(across.iter());
    let (mut code, mut verdict) = verdict(worst(levels));
    let usable = answering >= quorum(masters.len());
    if !usable {
        verdict = "unreachable";
        code = if failures.iter().any(|f| f.code == UNAVAILABLE) {
            UNAVAILABLE
        } else {
            failures.first().map_or(UNAVAILABLE, |f| f.code)
        };
    }
    if json {
        print_json(&masters, &across, verdict);
    } else {
        print_text(&masters, &across, verdict);
    }
    if usable {
        Ok(code)
    } else {
        Err(Failure::new(
            code,
            format!(
                "{} of the {} Redlock masters cannot be used and a lock needs {}: no lock can \
                 be taken ({})",
                failures.len(),
                masters.len(),
                quorum(masters.len()),
                failures
                    .iter()
                    .map(|f| f.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ))
    }
}

fn print_json(masters: &[Master], across: &[Finding], verdict: &str) {
    let mut findings = Vec::new();
    let mut listed = Vec::new();
    for master in masters {
        let (error, offset) = match &master.checked {
            Ok(checked) => {
                findings.extend(rows(&checked.findings, Some(Some(&master.url))));
                (None, checked.clock_offset_ms)
            }
            Err(failure) => (Some(failure.message.as_str()), None),
        };
        listed.push(json!({
            "url": master.url,
            "reachable": master.checked.is_ok(),
            "error": error,
            "run_id": master.info("run_id"),
            "role": master.info("role"),
            "clock_offset_ms": offset,
        }));
    }
    findings.extend(rows(across, Some(None)));
    let urls: Vec<&str> = masters.iter().map(|master| master.url.as_str()).collect();
    let value = json!({
        "urls": urls,
        "verdict": verdict,
        "masters": listed,
        "findings": findings,
    });
    println!("{value}");
}

fn print_text(masters: &[Master], across: &[Finding], verdict: &str) {
    let n = masters.len();
    println!("lockctl doctor: Redlock over {n} masters");
    for (i, master) in masters.iter().enumerate() {
        println!();
        match &master.checked {
            Ok(checked) => {
                println!("master {} of {n}: {}", i + 1, master.url);
                print_findings(&checked.findings);
            }
            Err(failure) => println!(
                "master {} of {n}: {}: cannot be used: {}",
                i + 1,
                master.url,
                failure.message
            ),
        }
    }
    println!();
    println!("across the {n} masters:");
    print_findings(across);
    println!("verdict: {verdict}");
}

/// The number of masters: the majority a lock needs and the failures locking survives.
fn count(n: usize) -> Finding {
    const WHY: &str = "a Redlock lock needs a majority of the masters (N/2+1), so locking \
                       survives the failure of the others, (N-1)/2 rounded down: fewer than \
                       three masters survive none, and an even number survives no more than \
                       one master fewer does, with one more server to keep up";
    let quorum = quorum(n);
    let survives = n - quorum;
    let found = format!(
        "{n} master{}: a lock needs {quorum}, locking survives {survives} failed master{}",
        if n == 1 { "" } else { "s" },
        if survives == 1 { "" } else { "s" }
    );
    if n < 3 {
        Finding::new(
            "redlock-masters",
            Level::Warning,
            format!("{found}: one master down stops every lock"),
        )
        .why(WHY)
        .fix("use 3 independent masters (or 5 to survive two failures)")
    } else if n.is_multiple_of(2) {
        Finding::new(
            "redlock-masters",
            Level::Warning,
            format!("{found}, as many as {} masters survive", n - 1),
        )
        .why(WHY)
        .fix(format!(
            "use an odd number: {} masters survive as many failures, {} survive one more",
            n - 1,
            n + 1
        ))
    } else {
        Finding::new("redlock-masters", Level::Fine, found).why(WHY)
    }
}

/// How many masters answer: a minority down is a warning, a majority down stops locking.
fn reachable(masters: &[Master]) -> Finding {
    const WHY: &str = "a master that cannot be used takes no lock: while a majority answers, \
                       locks are taken but survive fewer failures; without a majority no lock \
                       can be taken, renewed or released";
    let n = masters.len();
    let failed: Vec<String> = masters
        .iter()
        .filter_map(|master| {
            // The message names the master's URL.
            Some(master.checked.as_ref().err()?.message.clone())
        })
        .collect();
    if failed.is_empty() {
        return Finding::new(
            "redlock-reachable",
            Level::Fine,
            format!("all {n} masters answer"),
        )
        .why(WHY);
    }
    let answering = n - failed.len();
    let quorum = quorum(n);
    let found = format!(
        "{} of {n} masters cannot be used: {}",
        failed.len(),
        failed.join("; ")
    );
    if answering >= quorum {
        let left = answering - quorum;
        Finding::new(
            "redlock-reachable",
            Level::Warning,
            format!(
                "{found}; the {answering} others still make a majority ({quorum}), and \
                 survive {left} more failed master{}",
                if left == 1 { "" } else { "s" }
            ),
        )
        .why(WHY)
        .fix("bring the master back (one restarted empty must stay down for the longest lock TTL first: Redlock's delayed restart), or fix its URL, network or credentials")
    } else {
        Finding::new(
            "redlock-reachable",
            Level::Unsafe,
            format!("{found}; {answering} answer and a lock needs {quorum}: no lock can be taken"),
        )
        .why(WHY)
        .fix(format!(
            "bring back at least {} of them, or fix their URLs, network or credentials",
            quorum - answering
        ))
    }
}

/// Whether the masters are distinct servers (`run_id`), each a master (`role`), not a
/// replica of another, a Cluster node or a Sentinel.
fn independent(masters: &[Master]) -> Finding {
    const WHY: &str = "Redlock's majority counts independent servers: one server listed twice \
                       casts two votes, so fewer servers than the majority grant a lock and one \
                       crash takes several votes; a replica refuses the lock's writes and fails \
                       with its master, and copies of one master's keys are not independent";
    let mut problems = Vec::new();
    let mut unchecked = Vec::new();
    for (i, master) in masters.iter().enumerate() {
        let Ok(checked) = &master.checked else {
            continue;
        };
        if let Err(reason) = &checked.info {
            unchecked.push(format!("master {} ({reason})", i + 1));
            continue;
        }
        let name = |index: usize| format!("master {} ({})", index + 1, masters[index].url);
        // The same server under another URL (or the same one twice): the same run_id.
        if let Some(run_id) = master.info("run_id") {
            let first = masters
                .iter()
                .position(|other| other.info("run_id") == Some(run_id));
            if let Some(first) = first.filter(|first| *first < i) {
                problems.push(format!(
                    "{} is the same server as {} (run_id {run_id})",
                    name(i),
                    name(first)
                ));
            }
        }
        match master.info("redis_mode") {
            Some("cluster") => problems.push(format!("{} is a Cluster node", name(i))),
            Some("sentinel") => problems.push(format!("{} is a Sentinel", name(i))),
            _ => {}
        }
        if master.info("role") == Some("slave") {
            let of = format!(
                "{}:{}",
                master.info("master_host").unwrap_or("?"),
                master.info("master_port").unwrap_or("?")
            );
            // A replica in sync has its master's replication ID.
            let replid = master.info("master_replid");
            let listed = masters.iter().enumerate().position(|(j, other)| {
                j != i
                    && replid.is_some()
                    && other.info("master_replid") == replid
                    && other.info("role") == Some("master")
            });
            problems.push(match listed {
                Some(j) => format!("{} is a replica of {}", name(i), name(j)),
                None => format!("{} is a replica (of {of}), not a master", name(i)),
            });
        }
    }
    if !problems.is_empty() {
        let mut found = problems.join("; ");
        if !unchecked.is_empty() {
            found.push_str(&format!("; could not check {}", unchecked.join(", ")));
        }
        return Finding::new("redlock-independent", Level::Unsafe, found)
            .why(WHY)
            .fix("list each independent master once: separate Redis servers, each a master with no replica among the others (Redlock needs no replicas)");
    }
    if !unchecked.is_empty() {
        return Finding::unchecked("redlock-independent", unchecked.join(", "), WHY);
    }
    let checked = masters
        .iter()
        .filter(|master| master.checked.is_ok())
        .count();
    Finding::new(
        "redlock-independent",
        Level::Fine,
        match checked {
            1 => "1 server, a master".to_owned(),
            _ => format!("{checked} distinct servers (run_id), each a master"),
        },
    )
    .why(WHY)
}

/// The spread of the masters' clocks: each master's `TIME` against this host's.
fn clocks(masters: &[Master]) -> Finding {
    const WHY: &str = "each master expires its copy of a lock on its own clock, and waiters' \
                       places in line (tickets) are read on the masters' clock: masters whose \
                       clocks are far apart are not kept in step (NTP), and one whose clock \
                       jumps expires its copy early or late by as much, beyond Redlock's drift \
                       allowance (1% of the TTL plus 2 ms)";
    let mut offsets = Vec::new();
    let mut unchecked = Vec::new();
    for (i, master) in masters.iter().enumerate() {
        if let Ok(checked) = &master.checked {
            match checked.clock_offset_ms {
                Some(offset) => offsets.push((i, offset)),
                None => unchecked.push(format!("master {}", i + 1)),
            }
        }
    }
    if !unchecked.is_empty() {
        return Finding::unchecked(
            "redlock-clocks",
            format!("no TIME from {}", unchecked.join(", ")),
            WHY,
        );
    }
    let (Some(low), Some(high)) = (
        offsets.iter().map(|(_, offset)| *offset).reduce(f64::min),
        offsets.iter().map(|(_, offset)| *offset).reduce(f64::max),
    ) else {
        return Finding::new("redlock-clocks", Level::Fine, "no master answered").why(WHY);
    };
    let spread = high - low;
    let each = offsets
        .iter()
        .map(|(i, offset)| format!("master {} {offset:+.1} ms", i + 1))
        .collect::<Vec<_>>()
        .join(", ");
    let found = format!("masters' clocks {spread:.1} ms apart (from this host's: {each})");
    if spread > CLOCK_LIMIT_MS {
        Finding::new("redlock-clocks", Level::Warning, found)
            .why(WHY)
            .fix("run NTP (chrony, systemd-timesyncd) on every master's host")
    } else {
        Finding::new("redlock-clocks", Level::Fine, found).why(WHY)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A master that answered with these INFO fields and this clock offset.
    fn answered(fields: &[(&str, &str)], offset: Option<f64>) -> Master {
        let info = fields
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect::<HashMap<_, _>>();
        Master {
            url: "redis://h/".to_owned(),
            checked: Ok(Checked {
                findings: Vec::new(),
                info: Ok(info),
                clock_offset_ms: offset,
            }),
        }
    }

    #[test]
    fn clocks_more_than_a_second_apart_are_a_warning() {
        let at = |offsets: &[f64]| {
            let masters: Vec<Master> = offsets
                .iter()
                .map(|offset| answered(&[], Some(*offset)))
                .collect();
            clocks(&masters)
        };
        assert_eq!(at(&[0.5, -120.0, 300.0]).level, Level::Fine);
        let apart = at(&[400.0, -700.0, 0.0]);
        assert_eq!(apart.level, Level::Warning);
        assert!(apart.found.contains("1100.0 ms apart"), "{}", apart.found);
        let mut masters = vec![answered(&[], Some(0.0)), answered(&[], None)];
        assert_eq!(clocks(&masters).level, Level::Unchecked);
        masters.pop();
        assert_eq!(clocks(&masters).level, Level::Fine);
    }

    #[test]
    fn cluster_nodes_and_sentinels_are_not_independent_masters() {
        let masters = vec![
            answered(&[("run_id", "a"), ("role", "master")], None),
            answered(
                &[
                    ("run_id", "b"),
                    ("role", "master"),
                    ("redis_mode", "cluster"),
                ],
                None,
            ),
            answered(&[("run_id", "c"), ("redis_mode", "sentinel")], None),
        ];
        let finding = independent(&masters);
        assert_eq!(finding.level, Level::Unsafe);
        assert!(
            finding
                .found
                .contains("master 2 (redis://h/) is a Cluster node"),
            "{}",
            finding.found
        );
        assert!(
            finding
                .found
                .contains("master 3 (redis://h/) is a Sentinel"),
            "{}",
            finding.found
        );
        assert_eq!(independent(&masters[..1]).level, Level::Fine);
    }

    #[test]
    fn numbers_of_masters_are_graded() {
        assert_eq!(count(1).level, Level::Warning);
        assert_eq!(count(2).level, Level::Warning);
        assert!(
            count(2).found.contains("a lock needs 2"),
            "{}",
            count(2).found
        );
        assert_eq!(count(3).level, Level::Fine);
        assert!(count(3).found.contains("survives 1 failed master"));
        assert_eq!(count(4).level, Level::Warning);
        assert!(count(4).found.contains("a lock needs 3"));
        assert_eq!(count(5).level, Level::Fine);
        assert!(count(5).found.contains("survives 2 failed masters"));
    }
}
