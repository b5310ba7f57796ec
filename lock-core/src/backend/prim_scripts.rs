//! The Lua scripts of semaphores, read-write locks and multi-locks, and the server they run
//! on: a Functions library of their own (`lockcore_prims_v4`), run like the lock's scripts
//! (see [`lua`](crate::backend::lua)).

use std::sync::LazyLock;

use redis::FromRedisValue;

use crate::backend::lua::{self, Lua, ScriptMode};
use crate::connection::shared::{is_connection_failure, Conn, SharedConnection};
use crate::LockError;

const LIBRARY_NAME: &str = "lockcore_prims_v4";

macro_rules! permits_script {
    ($name:literal, $file:literal) => {
        LazyLock::new(|| {
            Lua::new(
                LIBRARY_NAME,
                library,
                $name,
                concat!(
                    include_str!("../scripts/permits_lib.lua"),
                    include_str!(concat!("../scripts/", $file))
                ),
            )
        })
    };
}

pub(crate) static PERMITS_ACQUIRE: LazyLock<Lua> =
    permits_script!("permits_acquire", "permits_acquire.lua");
pub(crate) static PERMITS_RELEASE: LazyLock<Lua> =
    permits_script!("permits_release", "permits_release.lua");
pub(crate) static PERMITS_EXTEND: LazyLock<Lua> =
    permits_script!("permits_extend", "permits_extend.lua");
pub(crate) static PERMITS_HOLDERS: LazyLock<Lua> =
    permits_script!("permits_holders", "permits_holders.lua");
pub(crate) static MULTI_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "multi_acquire",
        include_str!("../scripts/multi_acquire.lua"),
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
            &PERMITS_EXTEND,
            &PERMITS_HOLDERS,
            &MULTI_ACQUIRE,
            &MARK_LISTENED,
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
            .map_err(|err| LockError::from_redis(name, keys.first().copied().unwrap_or(""), err))
    }

    /// [`Server::run`], keeping Redis's own error (to tell a CROSSSLOT reply apart).
    pub async fn run_raw<T: FromRedisValue>(
        &self,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> redis::RedisResult<T> {
        self.run_raw_noting(script, name, keys, args, |_| ()).await
    }

    /// [`Server::run`], first handing `sent_on` the connection the script goes out on, so
    /// that whatever must reach Redis after it (a give-back of what it may have taken,
    /// should its answer never come) can be queued behind it on the same socket: on a
    /// connection opened later, it could reach a stalled server first, or not at all.
    pub async fn run_noting<T: FromRedisValue>(
        &self,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
        sent_on: impl FnOnce(&Conn),
    ) -> Result<T, LockError> {
        self.run_raw_noting(script, name, keys, args, sent_on)
            .await
            .map_err(|err| LockError::from_redis(name, keys.first().copied().unwrap_or(""), err))
    }

    async fn run_raw_noting<T: FromRedisValue>(
        &self,
        script: &Lua,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
        sent_on: impl FnOnce(&Conn),
    ) -> redis::RedisResult<T> {
        let lent = self.conn.get(name).await.map_err(|err| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                err.to_string(),
            ))
        })?;
        sent_on(&lent.conn);
        let mut conn = lent.conn.clone();
        let reply = script.run(self.mode, &mut conn, keys, args).await;
        if let Err(err) = &reply {
            if is_connection_failure(err) {
                self.conn.retire(&lent);
            }
        }
        reply
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
        "leave_queue.lua",
        "mark_listened.lua",
        "multi_acquire.lua",
        "permits_acquire.lua",
        "permits_extend.lua",
        "permits_holders.lua",
        "permits_lib.lua",
        "permits_release.lua",
        "queue.lua",
        "raise_fence.lua",
        "release.lua",
        "release_listened.lua",
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
