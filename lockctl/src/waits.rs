//! `lockctl waits NAME`: the deadlock detector's records about a lock.

use lock_core::Locker;

use crate::cli::StatusArgs;
use crate::exit::{Failure, SUCCESS};
use crate::output::{line, or_dash, table, ttl_text};
use crate::store::Target;

/// Prints who waits for `NAME` while holding other locks (each with the locks it holds
/// and how long its record still counts), and what `NAME`'s holder waits for. Requests
/// that hold nothing are not recorded (they cannot be part of a deadlock).
pub async fn waits(target: &Target, args: &StatusArgs) -> Result<u8, Failure> {
    target.keys(&args.name)?;
    let locker = Locker::builder()
        .url(target.url())
        .prefix(target.prefix.as_str())
        .command_timeout(target.timeout)
        .build()
        .map_err(|err| Failure::from_lock_error(&err, &target.shown_url))?;
    let waits = locker
        .waits_for(&args.name)
        .await
        .map_err(|err| Failure::from_lock_error(&err, &target.shown_url))?;
    if args.json {
        let value = serde_json::json!({
            "name": args.name,
            "held": waits.held,
            "holder": waits.holder,
            "holder_waits_for": waits.holder_waits_for,
            "waiters": waits.waiters.iter().map(|w| serde_json::json!({
                "holder": w.label,
                "holding": w.holding,
                "ttl_ms": u64::try_from(w.remaining.as_millis()).unwrap_or(u64::MAX),
            })).collect::<Vec<_>>(),
        });
        line(&value.to_string())?;
        return Ok(SUCCESS);
    }
    line(&format!("lock      {}", args.name))?;
    let state = if waits.held { "held" } else { "free" };
    line(&format!("state     {state}"))?;
    line(&format!("holder    {}", or_dash(waits.holder.as_deref())))?;
    let waiting_for = if waits.holder_waits_for.is_empty() {
        "-".to_owned()
    } else {
        waits.holder_waits_for.join(", ")
    };
    line(&format!("its holder waits for  {waiting_for}"))?;
    if waits.waiters.is_empty() {
        line("no waiter holding other locks")?;
        return Ok(SUCCESS);
    }
    let rows: Vec<Vec<String>> = waits
        .waiters
        .iter()
        .map(|w| {
            vec![
                or_dash(w.label.as_deref()),
                w.holding.join(", "),
                ttl_text(Some(w.remaining)),
            ]
        })
        .collect();
    for text in table(&["WAITER", "HOLDING", "RECORD LEFT"], &rows) {
        line(&text)?;
    }
    Ok(SUCCESS)
}
