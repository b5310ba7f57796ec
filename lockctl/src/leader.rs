//! `lockctl leader`: who leads an election (label, term, since when; exit 0, or 1 when
//! nobody leads, as `status` for a lock), and with `--watch`
//! every change of leadership as lock-core's observers see it (pub/sub, each change once,
//! in order), until Ctrl-C or `--count` changes.

use std::time::SystemTime;

use lock_core::{Leader, LeaderChange, Locker};

use crate::cli::LeaderArgs;
use crate::exit::{Failure, FREE, SUCCESS};
use crate::holder::display_safe;
use crate::output::line;
use crate::signals::Signals;
use crate::store::Target;

/// Runs `lockctl leader`.
pub async fn leader(target: &Target, args: &LeaderArgs) -> Result<u8, Failure> {
    let locker = Locker::builder()
        .url(target.url())
        .prefix(target.prefix.as_str())
        .command_timeout(target.timeout)
        .build()
        .map_err(|err| Failure::from_lock_error(&err, &target.shown_url))?;
    let election = locker.election(args.name.as_str());
    let failed = |err: lock_core::LockError| Failure::from_lock_error(&err, &target.shown_url);
    if !args.watch {
        let leader = election.leader().await.map_err(failed)?;
        line(&describe(leader.as_ref()))?;
        // As `status` for a lock: 0 when someone leads, 1 when nobody does.
        return Ok(if leader.is_some() { SUCCESS } else { FREE });
    }
    let mut signals = Signals::install()?;
    let mut observer = election.observe().await.map_err(failed)?;
    line(&format!(
        "{}  {}",
        stamp(SystemTime::now()),
        describe(observer.current())
    ))?;
    let mut seen = 0u64;
    while args.count.is_none_or(|count| seen < count) {
        let change = tokio::select! {
            change = observer.next() => change.map_err(failed)?,
            _ = signals.recv() => return Ok(0),
        };
        seen += 1;
        let text = match change {
            LeaderChange::Elected(leader) => format!(
                "{}  elected   {}",
                stamp(leader.since.unwrap_or_else(SystemTime::now)),
                describe(Some(&leader))
            ),
            LeaderChange::Resigned { term, label, at } => format!(
                "{}  resigned  term {term} ({})",
                stamp(at),
                display_safe(label.as_deref().unwrap_or("-"))
            ),
            LeaderChange::Expired { term, label } => format!(
                "{}  expired   term {term} ({}): its lease ran out unrenewed and nobody leads",
                stamp(SystemTime::now()),
                display_safe(label.as_deref().unwrap_or("-"))
            ),
            other => format!("{}  {other:?}", stamp(SystemTime::now())),
        };
        line(&text)?;
    }
    Ok(0)
}

fn describe(leader: Option<&Leader>) -> String {
    let Some(leader) = leader else {
        return "no leader".to_owned();
    };
    let since = leader
        .since
        .map(|since| format!(", since {}", stamp(since)))
        .unwrap_or_default();
    format!(
        "leader {} (term {}{since})",
        display_safe(leader.label.as_deref().unwrap_or("-")),
        leader.term
    )
}

fn stamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}
