//! How the Lua scripts run: `EVALSHA`, then `EVAL` after a `NOSCRIPT` reply (a restarted
//! or failed-over server, or `SCRIPT FLUSH`); or, with [`ScriptMode::Functions`], `FCALL` on
//! a Redis Functions library, loaded again when missing. Keys and values travel as
//! `KEYS`/`ARGV`, never inside script text. Shared by the lock's scripts
//! ([`scripted`](crate::backend::scripted)) and the primitives'
//! ([`prim_scripts`](crate::backend::prim_scripts)), each a library of its own.

use redis::{FromRedisValue, Script};

use crate::connection::shared::Conn;

/// How the lock scripts are invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ScriptMode {
    /// `EVALSHA`, falling back to `EVAL` after `NOSCRIPT`. Works on every Redis with
    /// scripting, keeps no state on the server beyond its script cache. The default.
    #[default]
    Eval,
    /// Redis Functions (7.0+): the scripts are loaded once as a library (`FUNCTION LOAD`),
    /// which is persisted and replicated, so a promoted replica already has them; calls use
    /// `FCALL`. If the library is missing (an older server state), it is loaded again.
    Functions,
}

/// A Lua script and its SHA1, sent as `EVALSHA` and, after a `NOSCRIPT` reply (a restarted
/// or failed-over server, or `SCRIPT FLUSH`), as `EVAL` with its source, which also caches it
/// again.
///
/// Hand-rolled rather than `redis::Script::invoke_async` because that future is several
/// kilobytes and is moved at every await level of a lock operation; this one is small, and
/// the rare fallback is boxed.
pub(crate) struct Lua {
    source: &'static str,
    sha1: String,
    /// `<library>_<name>`: its name in the library.
    function: String,
    /// The text of its whole library, loaded when `FCALL` finds the function missing.
    library: fn() -> &'static str,
}

impl Lua {
    /// Script `name` of the library `library_name`, whose text `library` returns.
    pub fn new(
        library_name: &str,
        library: fn() -> &'static str,
        name: &str,
        source: &'static str,
    ) -> Lua {
        Lua {
            source,
            sha1: Script::new(source).get_hash().to_owned(),
            function: format!("{library_name}_{name}"),
            library,
        }
    }

    pub async fn run<T: FromRedisValue>(
        &self,
        mode: ScriptMode,
        conn: &mut Conn,
        keys: &[&str],
        args: &[&[u8]],
    ) -> redis::RedisResult<T> {
        if mode == ScriptMode::Functions {
            return Box::pin(self.call_function(conn, keys, args)).await;
        }
        let reply = self
            .command("EVALSHA", &self.sha1, keys, args)
            .query_async(conn)
            .await;
        match reply {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                let eval = self.command("EVAL", self.source, keys, args);
                Box::pin(eval.query_async(conn)).await
            }
            other => other,
        }
    }

    async fn call_function<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
        keys: &[&str],
        args: &[&[u8]],
    ) -> redis::RedisResult<T> {
        let fcall = self.command("FCALL", &self.function, keys, args);
        match fcall.query_async(conn).await {
            Err(err) if err.to_string().contains("Function not found") => {
                redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg("REPLACE")
                    .arg((self.library)())
                    .query_async::<()>(conn)
                    .await?;
                fcall.query_async(conn).await
            }
            other => other,
        }
    }

    pub fn mode_command(&self, mode: ScriptMode, keys: &[&str], args: &[&[u8]]) -> redis::Cmd {
        match mode {
            ScriptMode::Eval => self.command("EVALSHA", &self.sha1, keys, args),
            ScriptMode::Functions => self.command("FCALL", &self.function, keys, args),
        }
    }

    fn command(&self, verb: &str, script: &str, keys: &[&str], args: &[&[u8]]) -> redis::Cmd {
        // Sized up front: growing the buffers argument by argument was a measurable share
        // of a lock cycle's client time.
        let data = verb.len()
            + script.len()
            + 4
            + keys.iter().map(|key| key.len()).sum::<usize>()
            + args.iter().map(|arg| arg.len()).sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(3 + keys.len() + args.len(), data);
        cmd.arg(verb).arg(script).arg(keys.len()).arg(keys);
        for arg in args {
            cmd.arg(*arg);
        }
        cmd
    }
}

/// A Functions library of `scripts` named `name` (`#!lua name=..`), each registered under
/// its function name. Versioned by name: a library of another lock-core version never
/// shadows this one.
pub(crate) fn library(name: &str, scripts: &[&Lua]) -> String {
    let mut library = format!("#!lua name={name}\n");
    for script in scripts {
        // Function bodies get (keys, args); naming them KEYS and ARGV lets the very same
        // script text run as a function.
        library.push_str(&format!(
            "redis.register_function('{}', function(KEYS, ARGV)\n{}\nend)\n",
            script.function, script.source
        ));
    }
    library
}
