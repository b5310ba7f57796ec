//! Permits on one Redis or a Cluster: each operation is one script (see
//! `scripts/permits_*.lua`), so admission, expiry by the server's clock and the queue's
//! hand-over are one atomic step.

use std::time::{Duration, Instant};

use super::{
    parse_member, Ask, Attempt, CapacitySet, Leaving, PermitKeys, QueueWaiter, RawHolder,
    RawHolders,
};
use crate::backend::lua::Lua;
use crate::backend::millis;
use crate::backend::prim_scripts::{
    SentOn, Server, PERMITS_ACQUIRE, PERMITS_EXTEND, PERMITS_HOLDERS, PERMITS_RELEASE,
    PERMITS_REWEIGH, PERMITS_SET_CAPACITY,
};
use crate::connection::notifier::Notifier;
use crate::connection::shared::Conn;
use crate::signal::Hint;
use crate::LockError;

/// The claim window ([`CLAIM_WINDOW`](crate::backend::CLAIM_WINDOW)) in milliseconds, as
/// the scripts take it.
const WINDOW_MS: &str = "100";

#[allow(clippy::too_many_arguments)]
pub(super) async fn acquire(
    server: &Server,
    keys: &PermitKeys,
    member: &str,
    ttl: Duration,
    ask: Ask,
    waiter: Option<&QueueWaiter<'_>>,
    sent: &SentOn,
    local: Option<&Notifier>,
) -> Result<Attempt, LockError> {
    let ttl = millis(ttl).to_string();
    let (capacity, weight) = (ask.capacity.to_string(), ask.weight.to_string());
    let (entry, channel, life) = match waiter {
        Some(w) => (w.entry, w.channel, millis(w.life).to_string()),
        None => ("", "", String::new()),
    };
    let sent_at = Instant::now();
    let unread = UnreadReply { keys, local };
    let reply: Result<Vec<redis::Value>, LockError> = server
        .run_replicated(
            &PERMITS_ACQUIRE,
            &keys.name,
            &[&keys.holders, &keys.queue],
            &[
                member.as_bytes(),
                ttl.as_bytes(),
                capacity.as_bytes(),
                weight.as_bytes(),
                entry.as_bytes(),
                WINDOW_MS.as_bytes(),
                life.as_bytes(),
                channel.as_bytes(),
            ],
            sent,
            |reply: &Vec<redis::Value>| matches!(reply.first(), Some(redis::Value::Int(1))),
        )
        .await;
    let reply = match (reply, sent.last()) {
        (Ok(reply), _) => reply,
        (Err(err @ LockError::NotReplicated { .. }), Some(conn)) => {
            // Taken, but too few replicas have it: given back at once, behind the grant on
            // its connection, so that nothing of a failed attempt stays held (if this
            // fails, the request's own guard gives it back when it ends).
            let undone = server
                .run_on::<redis::Value>(
                    &conn,
                    &PERMITS_RELEASE,
                    &keys.name,
                    &[&keys.holders, &keys.queue],
                    &[member.as_bytes(), WINDOW_MS.as_bytes(), b"", b""],
                )
                .await;
            if let Err(undo) = undone {
                tracing::debug!(name = %keys.name, %undo, "giving back a permit no replica acknowledged failed; the request gives it back when it ends");
            }
            return Err(err);
        }
        // The attempt may have run and handed permits to other waiters of this Locker
        // whose wake-up was in the lost reply: `unread` tells them to look.
        (Err(err), _) => return Err(err),
    };
    unread.read();
    let mut values = reply.into_iter();
    let mut number = || {
        values
            .next()
            .and_then(|v| redis::from_redis_value::<i64>(v).ok())
    };
    let (taken, first_end, place, capacity, server_ms) = (
        number().unwrap_or(0),
        number().unwrap_or(-1),
        number().unwrap_or(-1),
        number().unwrap_or(0),
        number().unwrap_or(0),
    );
    wake_local(keys, local, values, sent_at);
    if taken == 1 {
        return Ok(Attempt::Taken);
    }
    if taken == -1 {
        return Ok(Attempt::Mismatch {
            stored: u64::try_from(first_end).unwrap_or(0),
        });
    }
    Ok(Attempt::Busy {
        first_end: u64::try_from(first_end).ok().map(Duration::from_millis),
        place: u64::try_from(place).ok(),
        capacity: u64::try_from(capacity)
            .ok()
            .filter(|&capacity| capacity > 0)
            .unwrap_or(ask.capacity),
        server_ms: u64::try_from(server_ms).ok().filter(|&ms| ms > 0),
    })
}

/// A script sent whose reply may hand permits to waiters of this Locker (granted in the
/// script itself, or reserved for them), who learn it only from that reply. Unless the
/// reply is read ([`UnreadReply::read`]), dropping this wakes every waiter of this Locker
/// on the set, and each looks at Redis itself (finding its permit): after an error, and
/// when the caller's future is dropped at its await (a cancelled release or attempt),
/// whether or not the script ran.
struct UnreadReply<'a> {
    keys: &'a PermitKeys,
    local: Option<&'a Notifier>,
}

impl UnreadReply<'_> {
    /// The reply was read: its wake-ups go out from it.
    fn read(mut self) {
        self.local = None;
    }
}

impl Drop for UnreadReply<'_> {
    fn drop(&mut self) {
        if let Some(notifier) = self.local {
            notifier.wake_prefixed(&self.keys.route(""));
        }
    }
}

/// Wakes the waiters of this Locker that a script's reply names (lines `<kind>:<ms>:<id>`):
/// `t` granted in the script itself (valid from `sent_at`, before the script ran), `h`
/// first in line (look again in `ms`), `g` a reservation to claim.
fn wake_local(
    keys: &PermitKeys,
    local: Option<&Notifier>,
    lines: impl Iterator<Item = redis::Value>,
    sent_at: Instant,
) {
    let Some(notifier) = local else { return };
    for line in lines {
        let Ok(line) = redis::from_redis_value::<String>(line) else {
            continue;
        };
        let Some((kind, rest)) = line.split_once(':') else {
            continue;
        };
        let Some((ms, id)) = rest.split_once(':') else {
            continue;
        };
        let Some(wake) = notifier.signal(&keys.route(id)) else {
            // Gone already: its guard gives back what it was handed.
            continue;
        };
        let ms = Duration::from_millis(ms.parse().unwrap_or(0));
        match kind {
            "t" => wake.post_taken(sent_at),
            "h" => wake.post(Hint::Head(ms)),
            _ => wake.post(Hint::Granted),
        }
    }
}

/// On `sent_on` when given (the connection of an attempt being given back, see
/// [`SentOn`]), else on the shared connection.
pub(super) async fn release(
    server: &Server,
    keys: &PermitKeys,
    member: &str,
    leaving: Option<Leaving<'_>>,
    sent_on: Option<&Conn>,
    local: Option<&Notifier>,
) -> Result<bool, LockError> {
    let script_keys = [keys.holders.as_str(), &keys.queue];
    let channel = local.map_or("", Notifier::own_channel);
    let args = [
        member.as_bytes(),
        WINDOW_MS.as_bytes(),
        leaving.map_or("", |l| l.entry).as_bytes(),
        channel.as_bytes(),
    ];
    let sent_at = Instant::now();
    let unread = UnreadReply { keys, local };
    let reply: Result<Vec<redis::Value>, LockError> = match sent_on {
        Some(conn) => {
            server
                .run_on(conn, &PERMITS_RELEASE, &keys.name, &script_keys, &args)
                .await
        }
        None => {
            server
                .run(&PERMITS_RELEASE, &keys.name, &script_keys, &args)
                .await
        }
    };
    // An error: the release may have run and handed permits to waiters of this Locker
    // whose wake-up was in the lost reply: `unread` tells them to look.
    let reply = reply?;
    unread.read();
    let mut values = reply.into_iter();
    let ours = values
        .next()
        .and_then(|v| redis::from_redis_value::<i64>(v).ok())
        == Some(1);
    wake_local(keys, local, values, sent_at);
    Ok(ours)
}

/// Runs a permit script that may hand freed room to the queue: keys `[holders, queue]`,
/// arguments `args` then the hand-off window and `local`'s channel. Returns the reply's
/// values (the script's own first, then the waiters it let in, for [`wake_local`]) and
/// when it was sent; a reply never read wakes `local`'s waiters instead ([`UnreadReply`]).
async fn run_handing(
    server: &Server,
    keys: &PermitKeys,
    script: &Lua,
    args: [&[u8]; 2],
    local: Option<&Notifier>,
) -> Result<(std::vec::IntoIter<redis::Value>, Instant), LockError> {
    let channel = local.map_or("", Notifier::own_channel);
    let sent_at = Instant::now();
    let unread = UnreadReply { keys, local };
    let reply: Vec<redis::Value> = server
        .run(
            script,
            &keys.name,
            &[&keys.holders, &keys.queue],
            &[args[0], args[1], WINDOW_MS.as_bytes(), channel.as_bytes()],
        )
        .await?;
    unread.read();
    Ok((reply.into_iter(), sent_at))
}

/// Replaces the held `member` by the lighter `lighter` (same end) and hands the weight it
/// frees to the queue; false when the permit had ended.
pub(super) async fn reweigh(
    server: &Server,
    keys: &PermitKeys,
    member: &str,
    lighter: &str,
    local: Option<&Notifier>,
) -> Result<bool, LockError> {
    let (mut values, sent_at) = run_handing(
        server,
        keys,
        &PERMITS_REWEIGH,
        [member.as_bytes(), lighter.as_bytes()],
        local,
    )
    .await?;
    let done = values
        .next()
        .and_then(|v| redis::from_redis_value::<i64>(v).ok())
        == Some(1);
    wake_local(keys, local, values, sent_at);
    Ok(done)
}

/// Stores and pins `capacity` (see `scripts/permits_set_capacity.lua`); the waiters it
/// lets in are told, and those of `local` woken from the reply.
pub(super) async fn set_capacity(
    server: &Server,
    keys: &PermitKeys,
    capacity: u64,
    pin: Duration,
    local: Option<&Notifier>,
) -> Result<CapacitySet, LockError> {
    let (capacity, pin) = (capacity.to_string(), millis(pin).to_string());
    let (mut values, sent_at) = run_handing(
        server,
        keys,
        &PERMITS_SET_CAPACITY,
        [capacity.as_bytes(), pin.as_bytes()],
        local,
    )
    .await?;
    let mut number = || {
        values
            .next()
            .and_then(|v| redis::from_redis_value::<i64>(v).ok())
    };
    let (before, after) = (number().unwrap_or(0), number().unwrap_or(0));
    if before < 0 {
        return Ok(CapacitySet::WaiterAbove {
            weight: u64::try_from(after).unwrap_or(0),
        });
    }
    wake_local(keys, local, values, sent_at);
    Ok(CapacitySet::Set {
        before: u64::try_from(before).ok().filter(|&b| b > 0),
    })
}

pub(super) async fn extend(
    server: &Server,
    keys: &PermitKeys,
    member: &str,
    ttl: Duration,
) -> Result<bool, LockError> {
    let ttl = millis(ttl).to_string();
    // An extension too few replicas acknowledged is an error: the permit's validity stays
    // as it was (its longer TTL on the master costs nobody safety).
    let extended: i64 = server
        .run_replicated(
            &PERMITS_EXTEND,
            &keys.name,
            &[&keys.holders, &keys.queue],
            &[member.as_bytes(), ttl.as_bytes()],
            &SentOn::default(),
            |&extended| extended == 1,
        )
        .await?;
    Ok(extended == 1)
}

pub(super) async fn holders(server: &Server, keys: &PermitKeys) -> Result<RawHolders, LockError> {
    let reply: Vec<redis::Value> = server
        .run(
            &PERMITS_HOLDERS,
            &keys.name,
            &[&keys.holders, &keys.queue],
            &[WINDOW_MS.as_bytes()],
        )
        .await?;
    let mut values = reply.into_iter();
    let waiting = values
        .next()
        .and_then(|v| redis::from_redis_value::<u64>(v).ok())
        .unwrap_or(0);
    let capacity = values
        .next()
        .and_then(|v| redis::from_redis_value::<u64>(v).ok())
        .filter(|&c| c > 0);
    let mut holders = Vec::new();
    while let (Some(member), Some(left)) = (values.next(), values.next()) {
        let (Ok(member), Ok(left)) = (
            redis::from_redis_value::<String>(member),
            redis::from_redis_value::<i64>(left),
        ) else {
            continue;
        };
        let (weight, value) = parse_member(&member);
        holders.push(RawHolder {
            weight,
            value: value.to_owned(),
            remaining: Duration::from_millis(u64::try_from(left).unwrap_or(0)),
        });
    }
    Ok(RawHolders {
        holders,
        waiting,
        capacity,
    })
}

#[cfg(test)]
#[test]
fn the_window_sent_is_the_claim_window() {
    assert_eq!(WINDOW_MS, millis(crate::backend::CLAIM_WINDOW).to_string());
}
