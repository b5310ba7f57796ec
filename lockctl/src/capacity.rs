//! `lockctl capacity NAME [--set N]`: the number of permits stored with a name's semaphore,
//! shown or changed while the semaphore is in use (`Semaphore::set_capacity`).

use lock_core::Locker;

use crate::cli::CapacityArgs;
use crate::exit::{Failure, SUCCESS};
use crate::output::line;
use crate::store::Target;

/// Shows the stored number of permits (none while the semaphore is idle and none was
/// set), or, with `--set N`, stores N: raising it lets waiters in at once, lowering it
/// takes no permit from a holder. Exits 0 unless Redis fails or refuses the number.
pub async fn capacity(target: &Target, args: &CapacityArgs) -> Result<u8, Failure> {
    target.keys(&args.name)?;
    let locker = Locker::builder()
        .url(target.url())
        .prefix(target.prefix.as_str())
        .command_timeout(target.timeout)
        .build()
        .map_err(|err| Failure::from_lock_error(&err, &target.shown_url))?;
    // The handle's own number is never sent as the stored one: only `--set` stores.
    let semaphore = locker.semaphore(args.name.as_str(), 1);
    let fail = |err: lock_core::LockError| Failure::from_lock_error(&err, &target.shown_url);
    let (before, now) = match args.set {
        Some(permits) => {
            let before = semaphore.set_capacity(permits).await.map_err(fail)?;
            (before, Some(permits))
        }
        None => (None, semaphore.holders().await.map_err(fail)?.capacity),
    };
    if args.json {
        let mut value = serde_json::json!({ "name": args.name, "permits": now });
        if args.set.is_some() {
            value["before"] = before.into();
        }
        line(&value.to_string())?;
        return Ok(SUCCESS);
    }
    let text = match (now, args.set) {
        (Some(permits), Some(_)) => format!(
            "permits   {permits} (set; was {})",
            before.map_or_else(|| "none".to_owned(), |b| b.to_string())
        ),
        (Some(permits), None) => format!("permits   {permits} (the semaphore's, as stored)"),
        (None, _) => {
            "permits   none stored (the semaphore is idle: the next request stores its own)"
                .to_owned()
        }
    };
    line(&format!("name      {}", args.name))?;
    line(&text)?;
    Ok(SUCCESS)
}
