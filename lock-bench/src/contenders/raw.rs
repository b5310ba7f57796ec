//! The floor: redis-rs alone on one multiplexed connection, sending exactly the commands a
//! lock needs (`SET NX PX`, then `EVALSHA` of a compare-and-delete), with no library logic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Script;

use super::Contender;

const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

pub struct Raw {
    conn: MultiplexedConnection,
    release: Script,
    next_token: AtomicU64,
}

impl Raw {
    pub async fn connect(url: &str) -> redis::RedisResult<Raw> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(Raw {
            conn,
            release: Script::new(COMPARE_AND_DELETE),
            next_token: AtomicU64::new(fastrand::u64(..)),
        })
    }
}

impl Contender for Raw {
    type Held = (String, String);

    fn label(&self) -> String {
        "raw redis-rs".into()
    }

    async fn try_lock(&self, name: &str, ttl: Duration) -> Option<Self::Held> {
        let key = format!("raw:{name}");
        let token = self.next_token.fetch_add(1, Ordering::Relaxed).to_string();
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .ok()?;
        set.map(|_| (key, token))
    }

    async fn release(&self, (key, token): Self::Held) {
        let mut conn = self.conn.clone();
        let _: Result<i64, _> = self
            .release
            .key(&key)
            .arg(&token)
            .invoke_async(&mut conn)
            .await;
    }
}
