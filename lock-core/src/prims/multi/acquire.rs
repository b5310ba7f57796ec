//! Taking several locks all-or-nothing, waiting up to a deadline.
//!
//! - One Redis: one script checks every key and sets them all, or sets none: one round trip.
//! - WATCH/MULTI: every key watched and read in one round trip, then all set in one
//!   transaction, or none (`backend/transaction/multi.rs`).
//! - A Cluster (keys of different names live in different slots, which one script cannot
//!   touch), Redlock and memory: the locks are taken one by one, always in the
//!   order of their keys, each with its TTL; at the first busy one, those already taken are
//!   given back before anything else happens. Nobody ever holds some of them while waiting
//!   for the rest, so two multi-locks cannot deadlock, whatever their names.
//!
//! Every attempt writes a token of its own, so that the give-back of an earlier attempt can
//! never delete what a later one took. A request dropped at any point gives back, in the
//! background, whatever its attempt in flight may have taken; the TTL covers a crash.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::release::{release_all, release_each};
use crate::backend::prim_scripts::{SentOn, Server, MARK_LISTENED, MULTI_ACQUIRE};
use crate::backend::transaction::Transactional;
use crate::backend::{foreign_key, AnyBackend, Attempt, AttemptKind, Backend as _};
use crate::connection::notifier::Subscription;
use crate::connection::shared::Conn;
use crate::engine::local::NameRef;
use crate::key::LockKeys;
use crate::prims::env::Env;
use crate::signal::Wake;
use crate::token::{decode_value, new_value, LISTENED_MARK};
use crate::wait::{Backoff, LOOK_WHILE_LISTENING};
use crate::{LockError, WaitSetting};

/// Slack after a holder's TTL before looking (Redis expires at millisecond granularity).
const SLACK: Duration = Duration::from_millis(1);

/// Who held one of the locks at the last attempt.
#[derive(Debug, Default)]
struct Busy {
    name: String,
    holder: Option<String>,
    remaining: Option<Duration>,
    /// The holder's value carries the listened-for mark: its release is announced.
    marked: bool,
}

/// Gives back, in the background, what an attempt may have taken, unless disarmed.
struct GiveBack<'a> {
    env: &'a Env,
    keys: Vec<LockKeys>,
    value: String,
    route: Route<'a>,
    /// The one script's connection, noted before it is sent, until it is answered.
    sent: SentOn,
}

/// Which connection a give-back goes out on. It must reach Redis after the attempt it
/// undoes (see [`SentOn`]).
enum Route<'a> {
    /// One script on this server (`multi_release.lua`): on the acquire script's connection
    /// while its answer is missing; on the shared one once it was answered; none if it was
    /// never sent (nothing to give back).
    SentOn(&'a Server),
    /// The backend's release of each key (one by one). Every acquire whose answer is
    /// missing is undone by the backend itself, on that acquire's own connection
    /// (`Backend::acquire`'s undo); the others were answered, so nothing is left in
    /// flight for a give-back to overtake.
    Backend,
}

impl GiveBack<'_> {
    fn disarm(mut self) {
        self.keys.clear();
    }
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        if self.keys.is_empty() {
            return;
        }
        let (server, routes) = match (&self.route, self.sent.take()) {
            (Route::SentOn(_), None) => return,
            (Route::SentOn(server), Some(routes)) => (Some((*server).clone()), routes),
            (Route::Backend, _) => (None, vec![None]),
        };
        release_in_background(
            self.env,
            server,
            std::mem::take(&mut self.keys),
            &self.value,
            routes,
        );
    }
}

/// Compare-and-deletes `value` from every key (nobody else's lock is touched), on each
/// connection of `routes` (`None`: the shared connection, or the backend's own release;
/// see [`SentOn::take`]): one script per route on `server` when given, else the backend's
/// release of each key. The TTL frees them if this fails.
pub(super) fn release_in_background(
    env: &Env,
    server: Option<Server>,
    keys: Vec<LockKeys>,
    value: &str,
    routes: Vec<Option<Conn>>,
) {
    let (worker, value) = (env.clone(), value.to_owned());
    env.spawn_background(async move {
        let released = join_all(routes.iter().map(|sent_on| {
            let (worker, server, keys, value) = (&worker, &server, &keys, &value);
            async move {
                match server {
                    Some(server) => release_all(server, sent_on.as_ref(), keys, value).await,
                    None => release_each(worker, keys, value, sent_on.as_ref()).await,
                }
            }
        }))
        .await;
        if let Some(Err(err)) = released.into_iter().find(Result::is_err) {
            tracing::debug!(%err, "giving back a multi-lock attempt failed; the TTL will free the locks");
        }
    });
}

/// The locks are taken: the value they hold, when the successful attempt started, and
/// the server whose one script took them all (`None`: taken one by one), which gives them
/// back in one script too.
pub(super) struct Taken {
    pub value: String,
    pub started: Instant,
    pub server: Option<Server>,
}

/// Takes every lock of `keys` (sorted, distinct) for `ttl`, waiting up to `wait`.
pub(super) async fn acquire(
    env: &Env,
    keys: &[LockKeys],
    ttl: Duration,
    wait: Duration,
) -> Result<Taken, LockError> {
    let begun = Instant::now();
    for key in keys {
        env.server_ready(&key.name, begun, wait).await?;
    }
    let deadline = begun + wait;
    // One script where every key can meet in it: one Redis (or a single name anywhere).
    let server = match env.server() {
        Some(server) if keys.len() == 1 || !server.is_cluster(&keys[0].name).await? => Some(server),
        _ => None,
    };
    let mut busy = Busy::default();
    let mut transient = None;
    let mut outage = env.outage();
    let mut backoff = Backoff::new(false);
    // The busy lock's name, its name signal (kept: the subscription routes to this very
    // signal), and whether its release channel was subscribed to (`None`: not tried yet).
    let mut listening: Option<(String, NameRef, Option<Option<Subscription>>)> = None;
    // That subscription while it is being set up: this request looks again every
    // [`LOOK_WHILE_LISTENING`] meanwhile, since nothing would tell it of a release before.
    let mut subscribing: Option<Pin<Box<dyn Future<Output = Option<Subscription>> + Send + '_>>> =
        None;
    loop {
        // Armed before the attempt, so that a release of the lock waited for that lands
        // between the attempt and the wait still wakes this request.
        let signal = listening
            .as_ref()
            .map(|(name, local, _)| (name.clone(), Arc::clone(&local.released)));
        let armed = signal.as_ref().map(|(_, signal)| signal.notified());
        tokio::pin!(armed);
        if let Some(armed) = armed.as_mut().as_pin_mut() {
            armed.enable();
        }
        let started = Instant::now();
        let value = new_value(&keys[0].name, env.label())?;
        let give_back = GiveBack {
            env,
            keys: keys.to_vec(),
            value: value.clone(),
            route: match &server {
                Some(server) => Route::SentOn(server),
                None => Route::Backend,
            },
            sent: SentOn::default(),
        };
        let attempt = async {
            match &server {
                Some(server) => one_script(server, keys, &value, ttl, &give_back.sent).await,
                None => match env.backend() {
                    AnyBackend::Transaction(transactional) => {
                        in_one_transaction(transactional, keys, &value, ttl).await
                    }
                    _ => one_by_one(env, keys, &value, ttl).await,
                },
            }
        };
        // A waiting request's attempts end when Redis has been silent for the unreachable
        // timeout too.
        let (cap, outage_ends) = outage.cap(Some(deadline), started);
        let tried = if wait.is_zero() {
            Some(attempt.await)
        } else {
            tokio::time::timeout_at(cap.unwrap_or(deadline).into(), attempt)
                .await
                .ok()
        };
        match &tried {
            None | Some(Err(LockError::Connection { .. } | LockError::NoQuorum { .. })) => {
                outage.may_retry(started);
            }
            Some(_) => outage.answered(),
        }
        match tried {
            None if outage_ends => {
                return Err(transient.unwrap_or_else(|| {
                    LockError::connection(
                        &keys[0].name,
                        format!(
                            "Redis did not answer within the locker's unreachable timeout ({:?})",
                            outage.limit()
                        ),
                    )
                }))
            }
            None => return Err(timeout(busy, begun, transient)),
            Some(Ok(None)) => {
                let took = started.elapsed();
                let trusted = crate::engine::validity::validity(ttl);
                if !trusted.is_zero() && took >= trusted {
                    // Granted after the TTL ran out: worthless; `give_back` returns them.
                    return Err(LockError::connection(
                        &keys[0].name,
                        format!("the locks were granted after {took:?}, when their TTL of {ttl:?} had already run out"),
                    ));
                }
                give_back.disarm();
                return Ok(Taken {
                    value,
                    started,
                    server,
                });
            }
            Some(Ok(Some(found))) => {
                // Nothing of this attempt is held any more (`one_by_one` gave back its part).
                give_back.disarm();
                busy = found;
                transient = None;
            }
            Some(Err(err)) if !wait.is_zero() && err.is_transient() && outage.keeps_trying() => {
                drop(give_back);
                transient = Some(err);
            }
            Some(Err(err)) => return Err(err),
        }
        if wait.is_zero() {
            return Err(LockError::Busy {
                name: busy.name,
                holder: busy.holder,
                retry_after: busy.remaining,
                wait_setting: WaitSetting::default(),
            });
        }
        // Wait for a release of the lock that was busy (on its release channel, shared with
        // the lock's own waiters of this locker), or for its holder's TTL, or a backoff.
        if listening
            .as_ref()
            .is_none_or(|(name, _, _)| *name != busy.name)
        {
            listening = Some((busy.name.clone(), env.name_signal(&busy.name), None));
            subscribing = None;
        }
        let Some((_, local, subscribed)) = listening.as_mut() else {
            continue;
        };
        // The signal armed before the attempt, if it was this lock's; a fresh one otherwise
        // (a lock not waited for before is subscribed to and looked at again first).
        let fresh = local.released.notified();
        tokio::pin!(fresh);
        fresh.as_mut().enable();
        let armed_here = signal.as_ref().is_some_and(|(name, _)| *name == busy.name);
        if subscribed.is_none() {
            let pending = subscribing.get_or_insert_with(|| {
                Box::pin(subscribe(
                    env,
                    busy.name.clone(),
                    Arc::clone(&local.released),
                    deadline,
                ))
            });
            let Ok(subscription) = tokio::time::timeout(
                Backoff::steady(LOOK_WHILE_LISTENING).next(None),
                pending.as_mut(),
            )
            .await
            else {
                // Still being set up: look again meanwhile.
                continue;
            };
            subscribing = None;
            let now_listening = subscription.is_some();
            *subscribed = Some(subscription);
            if now_listening {
                backoff = Backoff::new(true);
                // A release during the subscription went unseen: look again now.
                continue;
            }
        } else if matches!(subscribed, Some(Some(_))) && !busy.marked {
            // One Redis, a Cluster or Redlock announce only the release of a marked value, and every
            // new holder's value starts unmarked: mark the one holding it now, whoever it
            // is, so that this release too wakes us. Marking each holder, not only the one
            // seen when subscribing, keeps a waiter from sleeping through releases once
            // the lock changes hands. Freed since the attempt (a release that went
            // unannounced): look again now.
            if mark(env, &busy.name).await == Some(FREE) {
                continue;
            }
        }
        let pause = match busy.remaining {
            Some(left) => backoff.next(Some(left + SLACK)),
            None => backoff.next(None),
        };
        let until = (Instant::now() + pause)
            .min(deadline)
            .min(outage.gives_up_at().unwrap_or(deadline));
        match armed.as_mut().as_pin_mut().filter(|_| armed_here) {
            Some(armed) => tokio::select! {
                () = armed => {}
                () = fresh => {}
                () = tokio::time::sleep_until(until.into()) => {}
            },
            None => tokio::select! {
                () = fresh => {}
                () = tokio::time::sleep_until(until.into()) => {}
            },
        }
        if Instant::now() >= deadline {
            return Err(timeout(busy, begun, transient));
        }
    }
}

/// What `mark_listened.lua` answers for a lock that is free (the PTTL of a missing key).
const FREE: i64 = -2;

/// Subscribes `signal` to the release channel of lock `name`. `None` when nothing will
/// announce the release (no pub/sub connection, or it failed): timers only then. On one
/// Redis, a Cluster or Redlock (which announce only releases of a value marked as listened
/// for; WATCH/MULTI announces every release) the caller then marks each holder's value it
/// finds (see [`mark`]).
async fn subscribe(
    env: &Env,
    name: String,
    signal: Arc<Wake>,
    deadline: Instant,
) -> Option<Subscription> {
    let notifier = env.notifier()?;
    let keys = LockKeys::new(env.prefix(), name).ok()?;
    let channel = keys.channel();
    let subscribing = notifier.subscribe(&channel, &signal);
    tokio::time::timeout_at(deadline.into(), subscribing)
        .await
        .ok()?
        .ok()
}

/// Marks the value now on lock `name` as listened for, so that its release is announced;
/// the lock's remaining TTL in ms, [`FREE`] when nobody holds it. `None` when the mark
/// failed (logged: the waiter falls back on its timers).
async fn mark(env: &Env, name: &str) -> Option<i64> {
    let keys = LockKeys::new(env.prefix(), name.to_owned()).ok()?;
    if let AnyBackend::Redlock(redlock) = env.backend() {
        // On every node: any of them may announce the release.
        return redlock.mark_listened(&keys).await;
    }
    let server = env.server()?;
    let marked = server
        .run::<i64>(&MARK_LISTENED, name, &[&keys.lock], &[])
        .await;
    match marked {
        Ok(pttl) => Some(pttl),
        Err(err) => {
            tracing::debug!(%name, %err, "cannot mark the lock as listened for; its release may go unannounced");
            None
        }
    }
}

fn timeout(busy: Busy, begun: Instant, transient: Option<LockError>) -> LockError {
    transient.unwrap_or(LockError::Timeout {
        name: busy.name,
        waited: begun.elapsed(),
        holder: busy.holder,
        retry_after: busy.remaining,
        wait_setting: WaitSetting::default(),
    })
}

/// Every key in one script: `None` when all were taken, else who holds one of them.
async fn one_script(
    server: &Server,
    keys: &[LockKeys],
    value: &str,
    ttl: Duration,
    sent: &SentOn,
) -> Result<Option<Busy>, LockError> {
    let lock_keys: Vec<&str> = keys.iter().map(|k| k.lock.as_str()).collect();
    let ttl = crate::backend::millis(ttl).to_string();
    // Too few replicas acknowledging the grant is an error; the caller's give-back, noted
    // on the grant's connection, returns the locks.
    let ran = server
        .run_replicated(
            &MULTI_ACQUIRE,
            &keys[0].name,
            &lock_keys,
            &[value.as_bytes(), ttl.as_bytes()],
            sent,
            |(taken, ..): &(i64, i64, i64, Vec<u8>)| *taken == 1,
        )
        .await;
    let (taken, index, pttl, holder): (i64, i64, i64, Vec<u8>) = match ran {
        // The script names its first key; the foreign value is on the one `TYPE` finds.
        Err(LockError::WrongType { .. }) if keys.len() > 1 => {
            let types = server.types(&keys[0].name, &lock_keys).await;
            let key = types
                .and_then(|types| foreign_key(keys, &types))
                .unwrap_or(&keys[0]);
            return Err(LockError::WrongType {
                name: key.name.clone(),
                key: key.lock.clone(),
            });
        }
        ran => ran?,
    };
    if taken == 1 {
        return Ok(None);
    }
    let busy_key = usize::try_from(index - 1)
        .ok()
        .and_then(|i| keys.get(i))
        .unwrap_or(&keys[0]);
    let holder = String::from_utf8_lossy(&holder);
    Ok(Some(Busy {
        name: busy_key.name.clone(),
        holder: decode_value(&holder).1.map(str::to_owned),
        remaining: crate::backend::remaining_from_pttl(pttl),
        marked: is_marked(&holder),
    }))
}

/// Every key in one WATCH/MULTI transaction: `None` when all were taken, else who holds the
/// first one found held (its value marked, so that its release is announced on the release
/// channel this request listens on).
async fn in_one_transaction(
    transactional: &Transactional,
    keys: &[LockKeys],
    value: &str,
    ttl: Duration,
) -> Result<Option<Busy>, LockError> {
    let Some(held) = transactional.acquire_all(keys, value, ttl).await? else {
        return Ok(None);
    };
    let name = keys.get(held.index).unwrap_or(&keys[0]).name.clone();
    Ok(Some(Busy {
        name,
        holder: held
            .holder_value
            .as_deref()
            .and_then(|v| decode_value(v).1)
            .map(str::to_owned),
        remaining: held.remaining,
        // Marked by the look that found it, or by its holder already.
        marked: held.holder_value.is_some(),
    }))
}

/// One key at a time in key order; at the first busy one, those taken are given back.
async fn one_by_one(
    env: &Env,
    keys: &[LockKeys],
    value: &str,
    ttl: Duration,
) -> Result<Option<Busy>, LockError> {
    let backend = env.backend();
    for (taken, key) in keys.iter().enumerate() {
        // `Listening`: on WATCH/MULTI a busy answer marks the holder's value, so that its
        // release is announced on the release channel this request listens on, whatever
        // protocol the holder uses (on scripts the caller marks it; the other backends
        // take it as a plain try).
        let attempt = env
            .run(
                &key.name,
                backend.acquire(key, value, ttl, false, AttemptKind::Listening),
            )
            .await;
        let busy = match attempt {
            Ok(Attempt::Acquired { .. }) => continue,
            Ok(Attempt::Busy {
                remaining,
                holder_value,
                ..
            }) => Busy {
                name: key.name.clone(),
                holder: holder_value
                    .as_deref()
                    .and_then(|v| decode_value(v).1)
                    .map(str::to_owned),
                remaining,
                marked: holder_value.as_deref().is_some_and(is_marked),
            },
            Err(err) => {
                // The failed key may have been taken before the connection broke.
                release_in_background(env, None, keys[..=taken].to_vec(), value, vec![None]);
                return Err(err);
            }
        };
        // Given back before the request reports or waits: nobody sees part of it held.
        // Dropped mid-way, the attempt's guard gives them back in the background.
        let released = join_all(
            keys[..taken]
                .iter()
                .map(|k| env.run(&k.name, backend.release(k, value))),
        )
        .await;
        if released.iter().any(Result::is_err) {
            release_in_background(env, None, keys[..taken].to_vec(), value, vec![None]);
        }
        return Ok(Some(busy));
    }
    Ok(None)
}

/// Whether a stored value carries the listened-for mark.
fn is_marked(value: &str) -> bool {
    value.as_bytes().first() == Some(&LISTENED_MARK)
}
