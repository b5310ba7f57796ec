//! Each lock operation as the one Redis call it is: the plain `SET NX PX GET` of the fast
//! path, and the Lua scripts (their library, how their arguments are laid out, how their
//! replies are read).

use std::sync::LazyLock;
use std::time::Duration;

use crate::backend::lua::{self, Lua, ScriptMode};
use crate::backend::{millis, remaining_from_pttl, Attempt, Place, Waiter};
use crate::connection::shared::Conn;
use crate::key::LockKeys;

pub(super) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "acquire",
        concat!(
            include_str!("../../scripts/fence.lua"),
            include_str!("../../scripts/acquire.lua")
        ),
    )
});
pub(super) static ACQUIRE_QUEUED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "acquire_queued",
        concat!(
            include_str!("../../scripts/queue.lua"),
            include_str!("../../scripts/fence.lua"),
            include_str!("../../scripts/acquire_queued.lua")
        ),
    )
});
pub(super) static CLAIM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "claim",
        concat!(
            include_str!("../../scripts/fence.lua"),
            include_str!("../../scripts/claim.lua")
        ),
    )
});
pub(super) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "release",
        concat!(
            include_str!("../../scripts/release.lua"),
            include_str!("../../scripts/queue.lua"),
            include_str!("../../scripts/release_listened.lua")
        ),
    )
});
pub(super) static RELEASE_LEAN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "release_lean",
        include_str!("../../scripts/release_lean.lua"),
    )
});
pub(super) static LEAVE_QUEUE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "leave_queue",
        concat!(
            include_str!("../../scripts/queue.lua"),
            include_str!("../../scripts/leave_queue.lua")
        ),
    )
});
pub(super) static RETURN_CLAIM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "return_claim",
        concat!(
            include_str!("../../scripts/queue.lua"),
            include_str!("../../scripts/return_claim.lua")
        ),
    )
});
pub(super) static EXTEND: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "extend",
        include_str!("../../scripts/extend.lua"),
    )
});
pub(super) static RAISE_FENCE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "raise_fence",
        include_str!("../../scripts/raise_fence.lua"),
    )
});

/// The Redis Functions library holding the same scripts, for [`ScriptMode::Functions`].
static LIBRARY: LazyLock<String> = LazyLock::new(|| {
    lua::library(
        LIBRARY_NAME,
        &[
            &ACQUIRE,
            &ACQUIRE_QUEUED,
            &CLAIM,
            &RELEASE,
            &RELEASE_LEAN,
            &LEAVE_QUEUE,
            &RETURN_CLAIM,
            &EXTEND,
            &RAISE_FENCE,
        ],
    )
});
/// Versioned: a script whose keys or arguments change gets a new library name, so that
/// Lockers of different versions on one server each call their own (v4: `release` declares
/// the queue's keys; v5: `acquire_queued` takes a Redlock waiter's ticket; v6:
/// `return_claim`; v7: the queue without its entries hash, reservations `?<member>`,
/// `release_lean`; v8: turns told with SPUBLISH to waiters whose channel begins with `$`,
/// and `release`'s announce flag "3"; v9: `claim`, a reserved lock's claim declaring the
/// lock key only, for a Cluster slot's migration, and `leave_queue` telling the new first
/// two of the line; v10: fencing tokens drawn from the server's clock, `fence.lua`; v11: a
/// hand-over passes over a dead waiter, whose turn message reaches no listener; v12: a
/// reservation always carries the listened-for mark).
const LIBRARY_NAME: &str = "lockcore_v12";

fn library() -> &'static str {
    LIBRARY.as_str()
}

/// The uncontended fast path: `SET key value NX PX ttl GET` takes a free lock in one plain
/// command (no script to run on the server), and on a held lock answers with the holder's
/// value. `GET` makes a foreign non-string value a WRONGTYPE error, never "taken".
pub(super) async fn set_nx_get(
    conn: &mut Conn,
    keys: &LockKeys,
    value: &str,
    ttl: Duration,
) -> redis::RedisResult<Attempt> {
    let ttl_ms = millis(ttl);
    let mut set = redis::Cmd::with_capacity(7, 16 + keys.lock.len() + value.len() + 20);
    let previous: Option<Vec<u8>> = set
        .arg("SET")
        .arg(&keys.lock)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .arg("GET")
        .query_async(conn)
        .await?;
    Ok(match previous {
        None => Attempt::Acquired {
            fencing_token: None,
            listened: false,
        },
        Some(holder) => Attempt::Busy {
            remaining: None,
            holder_value: Some(String::from_utf8_lossy(&holder).into_owned()),
            place: None,
        },
    })
}

/// The scripted acquire: SET NX PX, plus the next fencing token when asked, atomically;
/// on a held lock it returns the holder's PTTL and value in the same round trip.
pub(super) async fn acquire_script(
    mode: ScriptMode,
    conn: &mut Conn,
    keys: &LockKeys,
    value: &str,
    ttl: Duration,
    fencing: bool,
) -> redis::RedisResult<Attempt> {
    let ttl = millis(ttl).to_string();
    let fencing_flag: &[u8] = if fencing { b"1" } else { b"0" };
    let fence = fencing.then(|| keys.fence());
    let (taken, number, holder) = ACQUIRE
        .run::<(i64, i64, Vec<u8>)>(
            mode,
            conn,
            &[&keys.lock, counter(keys, &fence)],
            &[value.as_bytes(), ttl.as_bytes(), fencing_flag],
        )
        .await?;
    Ok(attempt_of(taken, number, &holder, fencing, None, false))
}

/// The key an acquire script declares as its fencing counter: the counter when a token is
/// drawn (`fence`), the lock key again otherwise. The script touches the counter only to
/// draw a token, and a declared key that does not exist makes a Cluster refuse the script
/// while its slot migrates (TRYAGAIN, until the migration ends): the counter of a lock
/// never fenced does not exist.
fn counter<'a>(keys: &'a LockKeys, fence: &'a Option<String>) -> &'a str {
    fence.as_deref().unwrap_or(&keys.lock)
}

/// An acquire script's reply: taken (1) or not, then the fencing token or the holder's
/// PTTL, and the holder's value; `listened`: a value taken with the listened-for mark.
fn attempt_of(
    taken: i64,
    number: i64,
    holder: &[u8],
    fencing: bool,
    place: Option<Place>,
    listened: bool,
) -> Attempt {
    if taken == 1 {
        return Attempt::Acquired {
            fencing_token: fencing.then(|| u64::try_from(number).unwrap_or(0)),
            listened,
        };
    }
    Attempt::Busy {
        remaining: remaining_from_pttl(number),
        holder_value: (!holder.is_empty()).then(|| String::from_utf8_lossy(holder).into_owned()),
        place,
    }
}

/// The queued acquire: take the lock if it is free and nobody waits ahead, claim it if it is
/// reserved for this Locker, or join (keep our place in) its waiter queue.
// The script's arguments, one by one, as it takes them.
#[allow(clippy::too_many_arguments)]
pub(super) async fn acquire_queued(
    mode: ScriptMode,
    conn: &mut Conn,
    keys: &LockKeys,
    value: &str,
    ttl: Duration,
    fencing: bool,
    waiter: &Waiter<'_>,
    queue: &Queue<'_>,
) -> redis::RedisResult<Attempt> {
    let ttl = millis(ttl).to_string();
    let life = millis(waiter.life).to_string();
    let fencing_flag: &[u8] = if fencing { b"1" } else { b"0" };
    let (fence, queue_key) = (fencing.then(|| keys.fence()), keys.queue());
    let ticket = waiter.ticket.to_string();
    let args: [&[u8]; 8] = [
        value.as_bytes(),
        ttl.as_bytes(),
        fencing_flag,
        waiter.member.as_bytes(),
        life.as_bytes(),
        CLAIM_WINDOW_MS.as_bytes(),
        queue.waiters.as_bytes(),
        ticket.as_bytes(),
    ];
    // The ticket orders the queue only on Redlock's masters.
    let args = if queue.ordered_by_ticket {
        &args[..]
    } else {
        &args[..7]
    };
    if queue.claim_first
        && waiter.told_turn
        && let Some(claimed) =
            Box::pin(claim(mode, conn, keys, value, &ttl, fencing, waiter)).await?
    {
        return Ok(claimed);
    }
    let (taken, number, holder, position, head_reserved) = ACQUIRE_QUEUED
        .run::<(i64, i64, Vec<u8>, i64, i64)>(
            mode,
            conn,
            &[&keys.lock, counter(keys, &fence), &queue_key],
            args,
        )
        .await?;
    let place = Place {
        position: u64::try_from(position).unwrap_or(0),
        head_reserved: head_reserved == 1,
    };
    // Taken: the last field says whether the value carries the mark.
    let listened = taken == 1 && head_reserved == 1;
    Ok(attempt_of(
        taken,
        number,
        &holder,
        fencing,
        Some(place),
        listened,
    ))
}

/// Redis refused a script because the slot of its keys is migrating and only some of them
/// are on the node (TRYAGAIN), after the cluster client's own retries.
fn is_try_again(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
}

/// The claim of a lock reserved for this waiter (`?<member>`), declaring the lock key
/// only (and the fencing counter when a token is drawn): not the queue's key, which the
/// release that reserved the lock deleted if it popped the queue's last entry. While a
/// Cluster slot migrates, Redis refuses a script whose declared keys are only partly on a
/// node (TRYAGAIN) until the migration ends; this one runs wherever the lock key is.
/// `None` when the lock is not reserved for this waiter (the reservation lapsed): the
/// queued attempt follows.
async fn claim(
    mode: ScriptMode,
    conn: &mut Conn,
    keys: &LockKeys,
    value: &str,
    ttl: &str,
    fencing: bool,
    waiter: &Waiter<'_>,
) -> redis::RedisResult<Option<Attempt>> {
    let fence = fencing.then(|| keys.fence());
    let fencing_flag: &[u8] = if fencing { b"1" } else { b"0" };
    let (taken, number, listened) = CLAIM
        .run::<(i64, i64, i64)>(
            mode,
            conn,
            &[&keys.lock, counter(keys, &fence)],
            &[
                value.as_bytes(),
                ttl.as_bytes(),
                fencing_flag,
                waiter.member.as_bytes(),
            ],
        )
        .await?;
    Ok((taken == 1).then(|| attempt_of(taken, number, &[], fencing, None, listened == 1)))
}

/// What the queue scripts need besides a lock's keys.
#[derive(Debug, Clone, Copy)]
pub(super) struct Queue<'a> {
    /// The waiters' channel prefix, `<prefix>waiters:`: a waiter's channel is this and the
    /// first 16 characters of its member.
    pub waiters: &'a str,
    /// A Redlock master: the queue is ordered by the waiters' tickets.
    pub ordered_by_ticket: bool,
    /// A waiter told that the lock is reserved for it claims it first with a script that
    /// declares the lock key only (a Cluster, whose slots may migrate: see [`claim`]).
    pub claim_first: bool,
}

/// Which releases take the release script's full path (waiter queue, release channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Announce {
    /// Only releases of a value marked as listened for (see `scripts/queue.lua`); on the
    /// release channel only when this server has subscribers to it.
    WhenListened,
    /// Only releases of a value marked as listened for, on the release channel with
    /// SPUBLISH whether or not the node has subscribers: a Cluster, whose waiters listen in
    /// the lock's shard (PUBLISH on a server without sharded pub/sub, before Redis 7).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    InShard,
}

impl Announce {
    /// The release script's `ARGV[2]` for this setting.
    pub(super) fn flag(self) -> &'static [u8] {
        match self {
            Announce::WhenListened => b"0",
            Announce::InShard => b"3",
        }
    }
}

/// The release script: compare-and-delete, or hand the lock to the head of the queue.
pub(super) async fn release_script(
    mode: ScriptMode,
    announce: Announce,
    waiters: &str,
    conn: &mut Conn,
    keys: &LockKeys,
    value: &str,
) -> redis::RedisResult<i64> {
    let args: [&[u8]; 4] = [
        value.as_bytes(),
        announce.flag(),
        CLAIM_WINDOW_MS.as_bytes(),
        waiters.as_bytes(),
    ];
    // The queue's key is declared although only a release of a marked value reads it: a
    // script must declare every key it touches (a Cluster checks that they share a slot,
    // and routes by them).
    let reply = RELEASE
        .run::<i64>(mode, conn, &[&keys.lock, &keys.queue()], &args)
        .await;
    match reply {
        // The lock's slot is migrating and one of the two keys is missing where the script
        // was sent. Mostly the queue's, while the lock is still ours: nobody is in line, so
        // the lock is deleted and the release announced. Or the lock's: expired (nothing is
        // touched), or moved to the new master in an earlier batch of keys than its queue,
        // where it is then deleted without a hand-over (its waiters take it at their
        // timers). Either way the lock key alone decides.
        Err(err) if is_try_again(&err) => {
            Box::pin(RELEASE.run::<i64>(mode, conn, &[&keys.lock], &args)).await
        }
        reply => reply,
    }
}

/// The lean release of a value granted without the mark: 1 deleted, 0 not ours, 2 ours but
/// marked since (run [`release_script`] then).
pub(super) async fn release_lean_script(
    mode: ScriptMode,
    conn: &mut Conn,
    keys: &LockKeys,
    value: &str,
) -> redis::RedisResult<i64> {
    RELEASE_LEAN
        .run::<i64>(mode, conn, &[&keys.lock], &[value.as_bytes()])
        .await
}

/// [`CLAIM_WINDOW`](crate::backend::CLAIM_WINDOW) in milliseconds, as the scripts take it (no formatting per call).
pub(crate) const CLAIM_WINDOW_MS: &str = "100";

#[cfg(test)]
#[test]
fn the_claim_window_argument_matches_the_constant() {
    assert_eq!(
        CLAIM_WINDOW_MS,
        millis(crate::backend::CLAIM_WINDOW).to_string()
    );
}
