//! The Lua scripts of semaphores, read-write locks and multi-locks, and the server they run
//! on: a Functions library of their own (`lockcore_prims_v14`), run like the lock's scripts
//! (see [`lua`](crate::backend::lua)).

use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use redis::FromRedisValue;

use crate::backend::lua::{self, Lua, ScriptMode};
use crate::backend::replicated::Replicated;
use crate::connection::shared::{is_connection_failure, Conn, Lent, SharedConnection};
use crate::LockError;

/// Versioned: a script whose keys or arguments change, or a script added, gets a new
/// library name (v6: the lean permit scripts and `multi_release`; v7: a Cluster Locker's
/// permit turns told in the permit set's shard, with SPUBLISH; v8: `permits_reweigh` and
/// the latch scripts; v9: `permits_set_capacity` and the capacity pin `#p`; v10: the
/// multi-lock release's hand-over passes over a dead waiter, as the lock's does; v11:
/// its reservations always carry the listened-for mark, as the lock's do, and
/// `permits_acquire`'s reply names the capacity a busy request was judged against).
const LIBRARY_NAME: &str = "lockcore_prims_v14";

/// The marker in a permits script where the shared functions of `permits_lib.lua` go: after
/// the script's fast path, so that a call that returns early defines none of them.
const LIB_MARKER: &str = "--[[permits_lib]]";

/// A permits script's text with `permits_lib.lua` in place of its marker (once per process).
fn with_lib(script: &str) -> &'static str {
    let lib = include_str!("../scripts/permits_lib.lua");
    let text = match script.split_once(LIB_MARKER) {
        Some((fast, slow)) => format!("{fast}{lib}{slow}"),
        None => format!("{lib}{script}"),
    };
    Box::leak(text.into_boxed_str())
}

macro_rules! permits_script {
    ($name:literal, $file:literal) => {
        LazyLock::new(|| {
            Lua::new(
                LIBRARY_NAME,
                library,
                $name,
                with_lib(include_str!(concat!("../scripts/", $file))),
            )
        })
    };
}

pub(crate) static PERMITS_ACQUIRE: LazyLock<Lua> =
    permits_script!("permits_acquire", "permits_acquire.lua");
pub(crate) static PERMITS_RELEASE: LazyLock<Lua> =
    permits_script!("permits_release", "permits_release.lua");
/// A held permit made lighter in place, the freed weight handed to the queue (a writer
/// stepping down to a reader).
pub(crate) static PERMITS_REWEIGH: LazyLock<Lua> =
    permits_script!("permits_reweigh", "permits_reweigh.lua");
/// A semaphore's capacity set (and pinned) while in use, the room it makes handed to the
/// queue.
pub(crate) static PERMITS_SET_CAPACITY: LazyLock<Lua> =
    permits_script!("permits_set_capacity", "permits_set_capacity.lua");
/// A permit's end reset; one shortened below every other holder's while someone waits tells
/// the head of the queue to look by its new end.
pub(crate) static PERMITS_EXTEND: LazyLock<Lua> =
    permits_script!("permits_extend", "permits_extend.lua");
pub(crate) static PERMITS_HOLDERS: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "permits_holders",
        include_str!("../scripts/permits_holders.lua"),
    )
});
pub(crate) static MULTI_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "multi_acquire",
        include_str!("../scripts/multi_acquire.lua"),
    )
});

/// Every lock of a multi-lock given up in one script; a value marked as listened for is
/// handed over to the lock's queue with the lock's own queue functions (`queue.lua`, shared
/// with `release.lua`), so single-lock waiters are served as a plain lock's release serves
/// them.
pub(crate) static MULTI_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "multi_release",
        concat!(
            include_str!("../scripts/multi_release.lua"),
            include_str!("../scripts/queue.lua"),
            include_str!("../scripts/multi_release_listened.lua")
        ),
    )
});

/// Countdown latches (`crate::prims::latch`): arm a round, count it down, read it.
pub(crate) static LATCH_ARM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "latch_arm",
        include_str!("../scripts/latch_arm.lua"),
    )
});
pub(crate) static LATCH_COUNT_DOWN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "latch_count_down",
        include_str!("../scripts/latch_count_down.lua"),
    )
});
pub(crate) static LATCH_STATE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "latch_state",
        include_str!("../scripts/latch_state.lua"),
    )
});

pub(crate) static MARK_LISTENED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "mark_listened",
        include_str!("../scripts/mark_listened.lua"),
    )
});

/// Every script above as one Functions library.
static LIBRARY: LazyLock<String> = LazyLock::new(|| {
    lua::library(
        LIBRARY_NAME,
        &[
            &PERMITS_ACQUIRE,
            &PERMITS_RELEASE,
            &PERMITS_REWEIGH,
            &PERMITS_SET_CAPACITY,
            &PERMITS_EXTEND,
            &PERMITS_HOLDERS,
            &MULTI_ACQUIRE,
            &MULTI_RELEASE,
            &MARK_LISTENED,
            &LATCH_ARM,
            &LATCH_COUNT_DOWN,
            &LATCH_STATE,
        ],
    )
});

fn library() -> &'static str {
    LIBRARY.as_str()
}

/// One Redis (or a Cluster) reached through the scripted backend's shared connection.
#[derive(Clone)]
pub(crate) struct Server {
    pub conn: SharedConnection,
    pub mode: ScriptMode,
    /// The scripted backend's replica acknowledgement check, when it is on: grants and
    /// extensions ([`Server::run_replicated`]) count only once replicas have them.
    pub replicated: Option<Arc<Replicated>>,
    /// `release.lua`'s announce argument for this server (`"2"` on a Cluster: announce a
    /// marked release whether or not this node has subscribers), for scripts that release
    /// the lock's way.
    pub announce: &'static [u8],
    /// The waiters' channel prefix (`<prefix>waiters:`), for scripts that hand a lock to
    /// the head of its queue the lock's way.
    pub waiters: Arc<str>,
}

impl Server {
    /// Runs `script` for primitive `name` (named in errors; `key` is the key they blame),
    /// retiring the shared connection if it broke.
    pub async fn run<T: FromRedisValue>(
        &self,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T, LockError> {
        self.run_raw(script, name, keys, args)
            .await
            .map_err(|err| blame(name, keys, err))
    }

    /// [`Server::run`], keeping Redis's own error (to tell a CROSSSLOT reply apart).
    pub async fn run_raw<T: FromRedisValue>(
        &self,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> redis::RedisResult<T> {
        self.run_raw_noting(script, name, keys, args, None).await
    }

    /// [`Server::run`] for an attempt that may take something: `sent` notes the connection
    /// the script goes out on before it is sent, and forgets it once an answer came, so
    /// that whatever must reach Redis after the attempt (a give-back of what it may have
    /// taken, should its answer never come) can be queued behind it on the same socket
    /// (see [`SentOn`]).
    pub async fn run_noting<T: FromRedisValue>(
        &self,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
        sent: &SentOn,
    ) -> Result<T, LockError> {
        self.run_raw_noting(script, name, keys, args, Some(sent))
            .await
            .map_err(|err| blame(name, keys, err))
    }

    /// [`Server::run_noting`] for a write that a holder relies on (a grant, an
    /// extension). With the replica acknowledgement check on, it goes out on one of the
    /// check's connections (noted in `sent`), and a reply that `granted` calls a grant
    /// counts only once replicas acknowledged it: [`LockError::NotReplicated`] otherwise,
    /// with the write left in place for the caller to undo (on [`SentOn::last`]).
    pub async fn run_replicated<T: FromRedisValue>(
        &self,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
        sent: &SentOn,
        granted: impl FnOnce(&T) -> bool,
    ) -> Result<T, LockError> {
        let Some(replicated) = &self.replicated else {
            return self.run_noting(script, name, keys, args, sent).await;
        };
        let key = keys.first().copied().unwrap_or("");
        let shared = replicated.writer(&self.conn, keys);
        let (reply, lent) = self
            .run_raw_via(shared, script, name, keys, args, Some(sent))
            .await
            .map_err(|err| blame(name, keys, err))?;
        if granted(&reply) {
            let mut conn = lent.conn.clone();
            replicated
                .confirm(&mut conn, name, key)
                .await
                .inspect_err(|err| {
                    if matches!(err, LockError::Connection { .. }) {
                        shared.retire(&lent);
                    }
                })?;
        }
        Ok(reply)
    }

    /// Runs `script` on `conn`, a connection an earlier attempt went out on (see
    /// [`SentOn`]), instead of the shared one. `conn` is not retired on failure: it may
    /// have been replaced already.
    pub async fn run_on<T: FromRedisValue>(
        &self,
        conn: &Conn,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T, LockError> {
        let mut conn = conn.clone();
        script
            .run(self.mode, &mut conn, keys, args)
            .await
            .map_err(|err| blame(name, keys, err))
    }

    async fn run_raw_noting<T: FromRedisValue>(
        &self,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
        sent: Option<&SentOn>,
    ) -> redis::RedisResult<T> {
        self.run_raw_via(&self.conn, script, name, keys, args, sent)
            .await
            .map(|(reply, _)| reply)
    }

    /// Runs `script` on `shared` (the shared connection, or one of the replica check's),
    /// retiring it if it broke, noting the connection in `sent` (forgotten again once
    /// answered); the reply, with the connection it went out on.
    async fn run_raw_via<T: FromRedisValue>(
        &self,
        shared: &SharedConnection,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
        sent: Option<&SentOn>,
    ) -> redis::RedisResult<(T, Lent)> {
        let mut lent = shared.get(name).await.map_err(|err| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                err.to_string(),
            ))
        })?;
        // On the socket noted, whichever task sends there later (a give-back behind this
        // script, a replica check of its write).
        lent.conn = lent.conn.pinned_here();
        if let Some(sent) = sent {
            sent.note(&lent.conn);
        }
        let mut conn = lent.conn.clone();
        let reply = script.run(self.mode, &mut conn, keys, args).await;
        if let Err(err) = &reply
            && is_connection_failure(err)
        {
            shared.retire(&lent);
        }
        if let Some(sent) = sent
            && reply.as_ref().err().is_none_or(|err| !unanswered(err))
        {
            sent.answered();
        }
        reply.map(|reply| (reply, lent))
    }

    /// The `TYPE` of each of `keys` (one pipeline; on a Cluster they share a slot), for
    /// naming the key an error was about; `None` when asking failed.
    pub async fn types(&self, name: &str, keys: &[&str]) -> Option<Vec<String>> {
        let lent = self.conn.get(name).await.ok()?;
        let mut conn = lent.conn.clone();
        let mut types = redis::pipe();
        for key in keys {
            types.cmd("TYPE").arg(*key);
        }
        types.query_async(&mut conn).await.ok()
    }

    /// True when the connection is a Redis Cluster's (keys of different slots cannot meet
    /// in one script there).
    pub async fn is_cluster(&self, name: &str) -> Result<bool, LockError> {
        let lent = self.conn.get(name).await?;
        #[cfg(feature = "cluster")]
        {
            Ok(matches!(
                lent.conn,
                crate::connection::shared::Conn::Cluster(_)
            ))
        }
        #[cfg(not(feature = "cluster"))]
        {
            let _ = lent;
            Ok(false)
        }
    }
}

/// `err` of a script run for primitive `name`, blamed on the first of `keys`.
fn blame(name: &str, keys: &[&str], err: redis::RedisError) -> LockError {
    LockError::from_redis(name, keys.first().copied().unwrap_or(""), err)
}

/// Whether `err` says the reply never came (a response timeout, a broken connection): the
/// command may still run, or already have. Any other error is the server's reply.
fn unanswered(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
}

/// The connections one request's attempts went out on whose answers never came, for its
/// give-back to follow them. A multiplexed connection keeps request order, so a give-back
/// sent on an attempt's connection reaches Redis after the attempt, even once the shared
/// connection was retired and replaced (a response timeout, a Sentinel's master that may
/// have changed); on the new connection it could reach a server that stalled with the
/// attempt unread before that attempt, or not reach it at all, and leave what the attempt
/// took held by nobody until its TTL. The plain lock's undo does the same
/// (`Backend::acquire`). Filled by [`Server::run_noting`]; each entry is an attempt that
/// timed out or broke its connection (which is then retired, so the next attempt goes out
/// on another), so a request keeps at most one per response timeout of its wait.
#[derive(Default)]
pub(crate) struct SentOn {
    sent: Mutex<Sent>,
}

#[derive(Default)]
struct Sent {
    /// Whether any attempt was sent.
    any: bool,
    /// Whether any attempt was answered.
    answered: bool,
    /// The connections of the attempts without an answer (so far), oldest first.
    unanswered: Vec<Conn>,
    /// The connection the latest attempt went out on, answered or not.
    last: Option<Conn>,
}

impl SentOn {
    /// An attempt goes out on `conn`.
    fn note(&self, conn: &Conn) {
        let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        sent.any = true;
        sent.unanswered.push(conn.clone());
        sent.last = Some(conn.clone());
    }

    /// The connection the latest attempt went out on: where an answered grant that must
    /// be undone at once (no replica acknowledged it) is given back, behind it.
    pub fn last(&self) -> Option<Conn> {
        self.sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last
            .clone()
    }

    /// The attempt noted last was answered: it has run, nothing of it is in flight.
    fn answered(&self) {
        let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        sent.answered = true;
        sent.unanswered.pop();
    }

    /// Where a give-back goes out, taken (a second call finds nothing sent): `None` when no
    /// attempt was sent (nothing to give back); else each connection whose attempt has no
    /// answer (`Some`: a give-back on each, behind its attempt), and `None` (the shared
    /// connection) when an attempt was answered: what it did has run, so a connection that
    /// works now undoes it best (an earlier attempt's connection may be broken). Giving
    /// back twice is harmless.
    pub fn take(&self) -> Option<Vec<Option<Conn>>> {
        let sent = std::mem::take(&mut *self.sent.lock().unwrap_or_else(PoisonError::into_inner));
        if !sent.any {
            return None;
        }
        let mut routes: Vec<Option<Conn>> = sent.unanswered.into_iter().map(Some).collect();
        if sent.answered {
            routes.push(None);
        }
        Some(routes)
    }
}

/// Every script, lock and primitives: a script must declare in `KEYS` every key it touches
/// (a Cluster routes a script by its declared keys and refuses keys of another slot; a key
/// built inside the script escapes that check, and the key layout's tests). The one name a
/// script may build from a key is the release channel, which is a pub/sub channel.
#[cfg(test)]
#[test]
fn scripts_touch_only_declared_keys() {
    // Each file's name and text.
    macro_rules! scripts {
        ($($file:literal),* $(,)?) => {
            [$(($file, include_str!(concat!("../scripts/", $file)))),*]
        };
    }
    let scripts = scripts!(
        "acquire.lua",
        "acquire_queued.lua",
        "extend.lua",
        "fence.lua",
        "leave_queue.lua",
        "mark_listened.lua",
        "multi_acquire.lua",
        "multi_release.lua",
        "multi_release_listened.lua",
        "permits_acquire.lua",
        "permits_extend.lua",
        "permits_holders.lua",
        "permits_lib.lua",
        "permits_release.lua",
        "permits_set_capacity.lua",
        "queue.lua",
        "raise_fence.lua",
        "release.lua",
        "release_listened.lua",
        "waits_for.lua",
        "waits_list.lua",
    );
    let mut found = Vec::new();
    for (file, text) in scripts {
        for (number, line) in text.lines().enumerate() {
            let code = line.split("--").next().unwrap_or_default();
            // A key name built by concatenation: `KEYS[1] .. ':q'`, or a key variable and a
            // literal suffix (`lock .. ':fence'`).
            let builds_from_key = code.contains("KEYS[")
                && code.contains("..")
                && code.split("KEYS[").skip(1).any(|after| {
                    after
                        .split_once(']')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with(".."))
                });
            let suffixed = [":q'", ":qe'", ":fence'", ":sem'", ":rw'"]
                .iter()
                .any(|suffix| code.contains(&format!(".. '{}", &suffix[..])));
            if (builds_from_key || suffixed) && !code.contains("':released'") {
                found.push(format!("{file}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "scripts that build a key instead of declaring it in KEYS:\n{}",
        found.join("\n")
    );
}
