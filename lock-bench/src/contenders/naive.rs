//! The seeds' retry loop: `SET NX PX`, and on failure sleep a fixed 1 ms and try again
//! until the deadline; compare-and-delete release. What most hand-written locks do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::Script;

use super::Contender;

const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
const RETRY_SLEEP: Duration = Duration::from_millis(1);

pub struct Naive {
    conn: MultiplexedConnection,
    release: Script,
    next_token: AtomicU64,
}

impl Naive {
    pub async fn connect(url: &str) -> redis::RedisResult<Naive> {
        let client = redis::Client::open(url)?;
        Ok(Naive {
            conn: client.get_multiplexed_async_connection().await?,
            release: Script::new(COMPARE_AND_DELETE),
            next_token: AtomicU64::new(fastrand::u64(..)),
        })
    }

    async fn set_nx(&self, key: &str, token: &str, ttl: Duration) -> bool {
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .unwrap_or(None);
        set.is_some()
    }
}

impl Contender for Naive {
    type Held = (String, String);

    fn label(&self) -> String {
        "naive 1 ms retry".into()
    }

    async fn try_lock(&self, name: &str, ttl: Duration) -> Option<Self::Held> {
        let key = format!("naive:{name}");
        let token = self.next_token.fetch_add(1, Ordering::Relaxed).to_string();
        self.set_nx(&key, &token, ttl).await.then_some((key, token))
    }

    async fn lock_wait(&self, name: &str, ttl: Duration, wait: Duration) -> Option<Self::Held> {
        let deadline = Instant::now() + wait;
        let key = format!("naive:{name}");
        let token = self.next_token.fetch_add(1, Ordering::Relaxed).to_string();
        loop {
            if self.set_nx(&key, &token, ttl).await {
                return Some((key, token));
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(RETRY_SLEEP).await;
        }
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
