//! The Lua scripts of semaphores, read-write locks and multi-locks, and how they are run.
//!
//! Same conventions as the exclusive lock's scripts: `EVALSHA`, then `EVAL` after a
//! `NOSCRIPT` reply (a restarted or failed-over server); with [`ScriptMode::Functions`], a
//! Redis Functions library of their own (`lockcore_prims_v2`), loaded again when missing.
//! Keys and values travel as `KEYS`/`ARGV`, never inside script text.

use std::sync::LazyLock;

use redis::{FromRedisValue, Script};

use crate::backend::scripted::ScriptMode;
use crate::conn::{is_connection_failure, Conn, SharedConnection};
use crate::LockError;

const LIBRARY_NAME: &str = "lockcore_prims_v2";

macro_rules! permits_script {
    ($name:literal, $file:literal) => {
        LazyLock::new(|| {
            PrimScript::new(
                $name,
                concat!(
                    include_str!("../scripts/permits_lib.lua"),
                    include_str!(concat!("../scripts/", $file))
                ),
            )
        })
    };
}

pub(crate) static PERMITS_ACQUIRE: LazyLock<PrimScript> =
    permits_script!("permits_acquire", "permits_acquire.lua");
pub(crate) static PERMITS_RELEASE: LazyLock<PrimScript> =
    permits_script!("permits_release", "permits_release.lua");
pub(crate) static PERMITS_EXTEND: LazyLock<PrimScript> =
    permits_script!("permits_extend", "permits_extend.lua");
pub(crate) static PERMITS_HOLDERS: LazyLock<PrimScript> =
    permits_script!("permits_holders", "permits_holders.lua");
pub(crate) static MULTI_ACQUIRE: LazyLock<PrimScript> = LazyLock::new(|| {
    PrimScript::new(
        "multi_acquire",
        include_str!("../scripts/multi_acquire.lua"),
    )
});

pub(crate) static MARK_LISTENED: LazyLock<PrimScript> = LazyLock::new(|| {
    PrimScript::new(
        "mark_listened",
        include_str!("../scripts/mark_listened.lua"),
    )
});

/// Every script above as one Functions library.
static LIBRARY: LazyLock<String> = LazyLock::new(|| {
    let mut library = format!("#!lua name={LIBRARY_NAME}\n");
    for script in [
        &*PERMITS_ACQUIRE,
        &*PERMITS_RELEASE,
        &*PERMITS_EXTEND,
        &*PERMITS_HOLDERS,
        &*MULTI_ACQUIRE,
        &*MARK_LISTENED,
    ] {
        // Naming the parameters KEYS and ARGV lets the same text run as a function.
        library.push_str(&format!(
            "redis.register_function('{}', function(KEYS, ARGV)\n{}\nend)\n",
            script.function, script.source
        ));
    }
    library
});

/// A script, its SHA1 and its function name.
pub(crate) struct PrimScript {
    source: &'static str,
    sha1: String,
    function: String,
}

impl PrimScript {
    fn new(name: &'static str, source: &'static str) -> PrimScript {
        PrimScript {
            source,
            sha1: Script::new(source).get_hash().to_owned(),
            function: format!("{LIBRARY_NAME}_{name}"),
        }
    }

    fn command(&self, verb: &str, script: &str, keys: &[&str], args: &[&[u8]]) -> redis::Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(keys.len()).arg(keys);
        for arg in args {
            cmd.arg(*arg);
        }
        cmd
    }

    async fn run_on<T: FromRedisValue>(
        &self,
        mode: ScriptMode,
        conn: &mut Conn,
        keys: &[&str],
        args: &[&[u8]],
    ) -> redis::RedisResult<T> {
        if mode == ScriptMode::Functions {
            let fcall = self.command("FCALL", &self.function, keys, args);
            return match fcall.query_async(conn).await {
                Err(err) if err.to_string().contains("Function not found") => {
                    redis::cmd("FUNCTION")
                        .arg("LOAD")
                        .arg("REPLACE")
                        .arg(LIBRARY.as_str())
                        .query_async::<()>(conn)
                        .await?;
                    fcall.query_async(conn).await
                }
                other => other,
            };
        }
        let reply = self
            .command("EVALSHA", &self.sha1, keys, args)
            .query_async(conn)
            .await;
        match reply {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.command("EVAL", self.source, keys, args)
                    .query_async(conn)
                    .await
            }
            other => other,
        }
    }
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
        script: &PrimScript,
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
        script: &PrimScript,
        name: &str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> redis::RedisResult<T> {
        let lent = self.conn.get(name).await.map_err(|err| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                err.to_string(),
            ))
        })?;
        let mut conn = lent.conn.clone();
        let reply = script.run_on(self.mode, &mut conn, keys, args).await;
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
            Ok(matches!(lent.conn, Conn::Cluster(_)))
        }
        #[cfg(not(feature = "cluster"))]
        {
            let _ = lent;
            Ok(false)
        }
    }
}
