//! Giving a multi-lock back: on one Redis (or a single name on a Cluster), every lock in
//! one script, `multi_release.lua`; elsewhere each lock through the backend's own release.
//!
//! The script hands a lock whose value is marked as listened for to the first live waiter
//! of its queue (popping it and reserving the lock for it) with the same Lua functions the plain lock's `release.lua` uses
//! (`queue.lua`), so a single-lock waiter queued behind a multi-lock is served exactly as
//! behind a plain lock; a change to that queue's keys or to `hand_over` is a change here
//! too.

use std::sync::{Mutex, PoisonError};

use futures_util::future::join_all;

use crate::backend::prim_scripts::{Server, MULTI_RELEASE};
use crate::backend::scripted::CLAIM_WINDOW_MS;
use crate::connection::shared::Conn;
use crate::key::LockKeys;
use crate::prims::env::Env;
use crate::LockError;

/// Gives up every lock of `keys` that holds `value` (nobody else's lock is touched), in one
/// script on `server`: on `conn` when given (the connection an unanswered attempt went out
/// on, so that the give-back reaches Redis after it; not retired on failure), else on the
/// shared connection. True when every lock still held `value`.
pub(super) async fn release_all(
    server: &Server,
    conn: Option<&Conn>,
    keys: &[LockKeys],
    value: &str,
) -> Result<bool, LockError> {
    let queues: Vec<String> = keys.iter().map(LockKeys::queue).collect();
    let mut script_keys = Vec::with_capacity(keys.len() * 2);
    for (lock, queue) in keys.iter().zip(&queues) {
        script_keys.extend([lock.lock.as_str(), queue.as_str()]);
    }
    let args: [&[u8]; 4] = [
        value.as_bytes(),
        server.announce,
        CLAIM_WINDOW_MS.as_bytes(),
        server.waiters.as_bytes(),
    ];
    let name = keys.first().map_or("", |k| k.name.as_str());
    let given: i64 = match conn {
        Some(conn) => {
            server
                .run_on(conn, &MULTI_RELEASE, name, &script_keys, &args)
                .await?
        }
        None => {
            server
                .run(&MULTI_RELEASE, name, &script_keys, &args)
                .await?
        }
    };
    Ok(usize::try_from(given).is_ok_and(|given| given == keys.len()))
}

/// Gives up each lock of `keys` holding `value` through the backend's own release (a
/// Cluster across slots, Redlock, WATCH/MULTI, memory), all at once. True when every lock
/// still held `value`.
pub(super) async fn release_each(
    env: &Env,
    keys: &[LockKeys],
    value: &str,
    sent_on: Option<&Conn>,
) -> Result<bool, LockError> {
    let released = join_all(
        keys.iter()
            .map(|k| env.run(&k.name, env.give_back(sent_on, k, value))),
    )
    .await;
    released
        .into_iter()
        .try_fold(true, |all, one| one.map(|held| all && held))
}

/// The answers to a multi-lock's releases, lock by lock (`None`: not answered yet).
#[derive(Debug, Default)]
pub(super) struct GivenBack(Mutex<Vec<Option<bool>>>);

/// Gives up each lock of `keys` holding `value` whose release has not been answered yet
/// (`given_back`), as [`release_each`] does: a release tried again after some locks failed
/// (see `wait::retry_release`) does not take a lock it freed itself for one that had gone.
/// True once every lock is answered, all still held; the first error while any is not.
pub(super) async fn release_rest(
    env: &Env,
    keys: &[LockKeys],
    value: &str,
    given_back: &GivenBack,
) -> Result<bool, LockError> {
    let pending: Vec<usize> = {
        let mut answers = given_back.0.lock().unwrap_or_else(PoisonError::into_inner);
        answers.resize(keys.len(), None);
        (0..keys.len()).filter(|&i| answers[i].is_none()).collect()
    };
    let released = join_all(
        pending
            .iter()
            .filter_map(|&i| keys.get(i))
            .map(|k| env.run(&k.name, env.give_back(None, k, value))),
    )
    .await;
    let mut answers = given_back.0.lock().unwrap_or_else(PoisonError::into_inner);
    let mut failed = None;
    for (&i, answer) in pending.iter().zip(released) {
        match answer {
            Ok(held) => answers[i] = Some(held),
            Err(err) => {
                failed.get_or_insert(err);
            }
        }
    }
    match failed {
        Some(err) => Err(err),
        None => Ok(answers.iter().all(|answer| *answer == Some(true))),
    }
}
