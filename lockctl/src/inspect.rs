//! `status`, `list` and `release --force`: looking at locks and removing one.

use lock_core::Locker;

use crate::cli::{ListArgs, ReleaseArgs, StatusArgs};
use crate::exit::{Failure, FREE, SUCCESS};
use crate::holder::{display_safe, Holder};
use crate::output::{line, lock_json, or_dash, table, ttl_text};
use crate::permits::{self, PermitRow};
use crate::store::{Replication, Target};

/// The `state` line of `status`: the name's lock, or else its semaphore or read-write
/// lock. `free` only when nothing of the name is held, as the exit code says.
fn state_of(held: bool, permits: &[PermitRow], capacity: Option<u64>) -> String {
    if held {
        return "held".to_owned();
    }
    if permits.is_empty() {
        return "free".to_owned();
    }
    let taken: u64 = permits
        .iter()
        .filter(|row| row.kind == "permit")
        .map(|row| row.permits)
        .sum();
    match capacity {
        Some(capacity) if taken >= capacity => {
            format!("full (all {capacity} permits of the semaphore are held)")
        }
        Some(capacity) if taken > 0 => {
            format!("in use ({taken} of the semaphore's {capacity} permits held)")
        }
        _ => format!(
            "in use ({} holders of the name's permits or leases)",
            permits.len()
        ),
    }
}

/// `lockctl status NAME`: held or free, holder (label, app, host, pid), remaining TTL,
/// how many replicas acknowledged the lock's value (where the master has replicas) and
/// fencing counter. Exits 0 when the lock, or a permit or lease of the name's semaphore or
/// read-write lock, is held, and [`FREE`] when nothing of the name is.
pub async fn status(target: &Target, args: &StatusArgs) -> Result<u8, Failure> {
    let keys = target.keys(&args.name)?;
    let locker = Locker::builder()
        .url(target.url())
        .prefix(target.prefix.as_str())
        .command_timeout(target.timeout)
        .build()
        .map_err(|err| Failure::from_lock_error(&err, &target.shown_url))?;
    let info = locker
        .inspect(&args.name)
        .await
        .map_err(|err| Failure::from_lock_error(&err, &target.shown_url))?;
    let (holder, remaining, fencing_counter) = match &info {
        Some(info) => (info.holder.clone(), info.remaining, info.fencing_counter),
        // inspect says nothing about a free lock; its counter still tells which token the
        // next holder gets.
        None => (
            None,
            None,
            target.connect().await?.fencing_counter(&args.name).await?,
        ),
    };
    let held = info.is_some();
    // What a grant's replica check finds on this master now.
    let replication = target.connect().await?.replication().await;
    let standalone = replication.as_ref().map(Replication::standalone);
    let permits::NamePermits {
        rows: permits,
        waiting,
        capacity,
    } = permits::of_name(&locker, target, &args.name).await?;
    let code = if held || !permits.is_empty() {
        SUCCESS
    } else {
        FREE
    };
    let state = state_of(held, &permits, capacity);
    if args.json {
        let mut value = lock_json(
            &args.name,
            &keys.lock,
            holder.as_deref(),
            remaining,
            fencing_counter,
            held,
        );
        // How many replicas had the lock's value (null: no replica check, no replicas).
        value["on_replicas"] = info.as_ref().and_then(|i| i.on_replicas).into();
        // Replicas the master has connected (null: not a master, or not allowed to ask).
        value["replicas_connected"] = replication.map(|r| r.online).into();
        // A master that never had a replica, outside a Cluster (null: not known).
        value["standalone"] = standalone.into();
        value["permits"] = permits.iter().map(permit_json).collect();
        value["waiting"] = waiting.into();
        value["semaphore_permits"] = capacity.into();
        // One word for the whole name, as the exit code says: held, full, in use or free.
        value["state"] = state.split(' ').next().unwrap_or("free").into();
        line(&value.to_string())?;
        return Ok(code);
    }
    let mut rows = vec![
        ("lock", display_safe(&args.name).into_owned()),
        ("key", display_safe(&keys.lock).into_owned()),
        ("state", state),
    ];
    if held {
        rows.push(("holder", or_dash(holder.as_deref())));
        if let Some(parts) = holder.as_deref().map(Holder::parse) {
            if let Some(app) = &parts.app {
                rows.push(("app", display_safe(app).into_owned()));
            }
            if let (Some(host), Some(pid)) = (&parts.host, parts.pid) {
                rows.push(("host", display_safe(host).into_owned()));
                rows.push(("pid", pid.to_string()));
            }
        }
        rows.push(("ttl left", ttl_text(remaining)));
        // Whether a failover would keep this lock: replicas that acknowledged its value.
        let replicas = match info.as_ref().and_then(|i| i.on_replicas) {
            Some(0) => Some(
                "0: no replica has acknowledged this value; a failover now would lose it"
                    .to_owned(),
            ),
            Some(n) => Some(format!("{n} acknowledged this value")),
            // A lone Redis has nothing to check: the `master` row says so.
            None if standalone == Some(true) => None,
            None => Some("not checked (no replicas, or the check is off)".to_owned()),
        };
        if let Some(replicas) = replicas {
            rows.push(("replicas", replicas));
        }
    }
    rows.push(("master", replication_text(replication)));
    rows.push((
        "fencing",
        fencing_counter.map_or_else(|| "none".to_owned(), |c| c.to_string()),
    ));
    if let Some(capacity) = capacity {
        rows.push((
            "permits",
            format!("{capacity} (the semaphore's, as stored)"),
        ));
    }
    for row in &permits {
        let what = format!(
            "{} {} (ttl left {})",
            row.kind_text(),
            or_dash(row.holder.as_deref()),
            ttl_text(Some(row.remaining))
        );
        rows.push(("holds", what));
    }
    if waiting > 0 {
        rows.push(("waiting", waiting.to_string()));
    }
    for (label, value) in rows {
        line(&format!("{label:<9} {value}"))?;
    }
    Ok(code)
}

/// A semaphore permit or read-write lease as JSON.
fn permit_json(row: &PermitRow) -> serde_json::Value {
    let mut value = lock_json(
        &row.name,
        &row.key,
        row.holder.as_deref(),
        Some(row.remaining),
        None,
        true,
    );
    value["kind"] = row.kind.into();
    if row.kind == "permit" {
        value["permits"] = row.permits.into();
    }
    value
}

/// `lockctl list [--match PATTERN] [--json]`: every held lock, sorted by name.
pub async fn list(target: &Target, args: &ListArgs) -> Result<u8, Failure> {
    let mut store = target.connect().await?;
    let listing = store.list(&args.pattern).await?;
    let permits = permits::matching(&permits::locker(target)?, target, &args.pattern).await?;
    if listing.foreign > 0 {
        eprintln!(
            "lockctl: skipped {} key(s) under {}{{..}} that hold something other than a lock",
            listing.foreign,
            display_safe(&target.prefix)
        );
    }
    if args.json {
        let mut locks: Vec<_> = listing
            .locks
            .iter()
            .map(|l| {
                lock_json(
                    &l.name,
                    &l.key,
                    l.holder.as_deref(),
                    l.remaining,
                    l.fencing_counter,
                    true,
                )
            })
            .collect();
        locks.extend(permits.iter().map(permit_json));
        line(&serde_json::Value::Array(locks).to_string())?;
        return Ok(SUCCESS);
    }
    if listing.locks.is_empty() && permits.is_empty() {
        line(&format!(
            "no locks held matching {}{{{}}}",
            display_safe(&target.prefix),
            display_safe(&args.pattern)
        ))?;
        return Ok(SUCCESS);
    }
    let mut rows: Vec<Vec<String>> = listing
        .locks
        .iter()
        .map(|l| {
            vec![
                display_safe(&l.name).into_owned(),
                or_dash(l.holder.as_deref()),
                ttl_text(l.remaining),
                l.fencing_counter
                    .map_or_else(|| "-".to_owned(), |c| c.to_string()),
                "lock".to_owned(),
            ]
        })
        .collect();
    rows.extend(permits.iter().map(|p| {
        vec![
            display_safe(&p.name).into_owned(),
            or_dash(p.holder.as_deref()),
            ttl_text(Some(p.remaining)),
            "-".to_owned(),
            p.kind_text(),
        ]
    }));
    rows.sort_by(|a, b| (&a[0], &a[4]).cmp(&(&b[0], &b[4])));
    for text in table(&["NAME", "HOLDER", "TTL", "FENCE", "KIND"], &rows) {
        line(&text)?;
    }
    Ok(SUCCESS)
}

/// `lockctl release NAME --force`: deletes the lock whoever holds it, wakes its waiters, and
/// says whose lock it removed.
pub async fn release(target: &Target, args: &ReleaseArgs) -> Result<u8, Failure> {
    let name = display_safe(&args.name);
    if !args.force {
        return Err(Failure::usage(format!(
            "refusing to remove lock `{name}` without --force: its holder is not told and may \
             still be working; check `lockctl status {name}` first"
        )));
    }
    target.keys(&args.name)?;
    let mut store = target.connect().await?;
    match store.force_release(&args.name).await? {
        Some(removed) => {
            let ttl = removed
                .remaining
                .map(|left| format!(", {} left", ttl_text(Some(left))))
                .unwrap_or_default();
            let holder = removed.holder.as_deref().map_or_else(
                || "a holder without a label".to_owned(),
                |h| display_safe(h).into_owned(),
            );
            line(&format!("removed lock `{name}` held by {holder}{ttl}"))?;
        }
        None => line(&format!("lock `{name}` is not held; nothing removed"))?,
    }
    Ok(SUCCESS)
}

/// What `ReplicaSync` does on a master with these replicas. Quiet on a lone Redis (the
/// most common setup: no replica, so no failover to lose a lock); the warning is for a
/// master that had replicas and has none connected now, or a Cluster node without one.
fn replication_text(replication: Option<Replication>) -> String {
    match replication.map(|r| (r.online, r.standalone())) {
        Some((0, true)) => "a single Redis (no replicas, so no failover to lose a lock)".to_owned(),
        Some((0, false)) => "no connected replica (this master had one, or is a Cluster node): with ReplicaSync::Auto, grants here are not replicated if this master was promoted without one (a failover would lose them) and refused if it had replicas; Required refuses".to_owned(),
        Some((1, _)) => "1 connected replica: grants count once it acknowledges them".to_owned(),
        Some((n, _)) => format!("{n} connected replicas: grants count once they acknowledge them"),
        None => "replicas unknown (not a master, or INFO is not allowed)".to_owned(),
    }
}
