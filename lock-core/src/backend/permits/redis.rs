//! Permits on one Redis or a Cluster: each operation is one script (see
//! `scripts/permits_*.lua`), so admission, expiry by the server's clock and the queue's
//! hand-over are one atomic step.

use std::time::Duration;

use super::{parse_member, Ask, Attempt, PermitKeys, QueueWaiter, RawHolder, RawHolders};
use crate::backend::prim_scripts::{
    SentOn, Server, PERMITS_ACQUIRE, PERMITS_EXTEND, PERMITS_HOLDERS, PERMITS_RELEASE,
};
use crate::backend::{millis, CLAIM_WINDOW};
use crate::connection::shared::Conn;
use crate::LockError;

fn window_ms() -> String {
    millis(CLAIM_WINDOW).to_string()
}

pub(super) async fn acquire(
    server: &Server,
    keys: &PermitKeys,
    member: &str,
    ttl: Duration,
    ask: Ask,
    waiter: Option<&QueueWaiter<'_>>,
    sent: &SentOn,
) -> Result<Attempt, LockError> {
    let ttl = millis(ttl).to_string();
    let (capacity, weight) = (ask.capacity.to_string(), ask.weight.to_string());
    let (id, channel, life) = match waiter {
        Some(w) => (w.id, w.channel, millis(w.life).to_string()),
        None => ("", "", "0".to_owned()),
    };
    let reply: Result<(i64, i64, i64), LockError> = server
        .run_replicated(
            &PERMITS_ACQUIRE,
            &keys.name,
            &[&keys.holders, &keys.queue, &keys.entries],
            &[
                member.as_bytes(),
                ttl.as_bytes(),
                capacity.as_bytes(),
                weight.as_bytes(),
                id.as_bytes(),
                channel.as_bytes(),
                life.as_bytes(),
                window_ms().as_bytes(),
            ],
            sent,
            |&(taken, _, _)| taken == 1,
        )
        .await;
    let (taken, first_end, place) = match (reply, sent.last()) {
        (Ok(reply), _) => reply,
        (Err(err @ LockError::NotReplicated { .. }), Some(conn)) => {
            // Taken, but too few replicas have it: given back at once, behind the grant on
            // its connection, so that nothing of a failed attempt stays held (if this
            // fails, the request's own guard gives it back when it ends).
            let undone = server
                .run_on::<i64>(
                    &conn,
                    &PERMITS_RELEASE,
                    &keys.name,
                    &[&keys.holders, &keys.queue, &keys.entries],
                    &[member.as_bytes(), window_ms().as_bytes(), b""],
                )
                .await;
            if let Err(undo) = undone {
                tracing::debug!(name = %keys.name, %undo, "giving back a permit no replica acknowledged failed; the request gives it back when it ends");
            }
            return Err(err);
        }
        (Err(err), _) => return Err(err),
    };
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
    })
}

/// On `sent_on` when given (the connection of an attempt being given back, see
/// [`SentOn`]), else on the shared connection.
pub(super) async fn release(
    server: &Server,
    keys: &PermitKeys,
    member: &str,
    leaving: Option<&str>,
    sent_on: Option<&Conn>,
) -> Result<bool, LockError> {
    let script_keys = [keys.holders.as_str(), &keys.queue, &keys.entries];
    let window = window_ms();
    let args = [
        member.as_bytes(),
        window.as_bytes(),
        leaving.unwrap_or("").as_bytes(),
    ];
    let released: i64 = match sent_on {
        Some(conn) => {
            server
                .run_on(conn, &PERMITS_RELEASE, &keys.name, &script_keys, &args)
                .await?
        }
        None => {
            server
                .run(&PERMITS_RELEASE, &keys.name, &script_keys, &args)
                .await?
        }
    };
    Ok(released == 1)
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
            &[&keys.holders, &keys.entries],
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
            &[&keys.holders, &keys.queue, &keys.entries],
            &[],
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
