//! lock-bench's raw floor, one cycle: `SET key token NX PX ttl`, then `EVALSHA` of a
//! compare-and-delete, on redis-rs alone (shared by the examples that count or time it).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Script;

/// The compare-and-delete script of the raw floor.
pub fn release_script() -> Script {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
}

/// Takes `key` with `token` for `ttl` and gives it back; an error if it was not free.
pub async fn cycle(
    conn: &mut MultiplexedConnection,
    release: &Script,
    key: &str,
    token: &str,
    ttl: Duration,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async(conn)
        .await?;
    let deleted: i64 = release.key(key).arg(token).invoke_async(conn).await?;
    if set.is_none() || deleted != 1 {
        return Err("the raw lock was not free".into());
    }
    Ok(())
}
