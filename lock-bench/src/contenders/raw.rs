//! The floor: redis-rs alone on one multiplexed connection per node, sending exactly the
//! commands a lock needs (`SET NX PX`, then `EVALSHA` of a compare-and-delete), with no
//! library logic: a counter for a token, no validation, no waiting strategy (a busy lock is
//! a failure). On N nodes (the Redlock floor) both commands go to every node at once and a
//! majority wins.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::Script;

use super::{Contender, Outcome, Released, Spec};

pub const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

pub struct Raw {
    nodes: Vec<MultiplexedConnection>,
    release: Script,
    next_token: AtomicU64,
    label: String,
}

impl Raw {
    pub async fn connect(urls: &[String], label: impl Into<String>) -> Result<Raw, String> {
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            nodes.push(connect(url).await?);
        }
        Ok(Raw {
            nodes,
            release: Script::new(COMPARE_AND_DELETE),
            next_token: AtomicU64::new(fastrand::u64(..)),
            label: label.into(),
        })
    }

    pub(super) async fn set_nx(
        mut conn: MultiplexedConnection,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, String> {
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .map_err(|err| err.to_string())?;
        Ok(set.is_some())
    }

    async fn delete(&self, mut conn: MultiplexedConnection, key: &str, token: &str) -> bool {
        let deleted: Result<i64, _> = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut conn)
            .await;
        deleted.is_ok_and(|n| n == 1)
    }

    async fn release_all(&self, key: &str, token: &str) -> usize {
        if let [conn] = self.nodes.as_slice() {
            return usize::from(self.delete(conn.clone(), key, token).await);
        }
        let deletes = self
            .nodes
            .iter()
            .map(|conn| self.delete(conn.clone(), key, token));
        join_all(deletes).await.into_iter().filter(|d| *d).count()
    }
}

pub async fn connect(url: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|err| format!("bad Redis URL {url:?}: {err}"))?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| format!("cannot connect to {url}: {err}"))
}

impl Contender for Raw {
    fn label(&self) -> &str {
        &self.label
    }

    async fn locked<B>(&self, name: &str, spec: Spec, body: B) -> Result<Outcome, String>
    where
        B: Future<Output = ()> + Send,
    {
        let key = format!("raw:{name}");
        let token = self.next_token.fetch_add(1, Ordering::Relaxed).to_string();
        let ttl = spec.ttl;
        let taken = if let [conn] = self.nodes.as_slice() {
            Raw::set_nx(conn.clone(), &key, &token, ttl).await?
        } else {
            let sets = self
                .nodes
                .iter()
                .map(|conn| Raw::set_nx(conn.clone(), &key, &token, ttl));
            let won = join_all(sets).await.into_iter().flatten().filter(|s| *s);
            if won.count() <= self.nodes.len() / 2 {
                self.release_all(&key, &token).await;
                false
            } else {
                true
            }
        };
        if !taken {
            return Err("busy".into());
        }
        body.await;
        let deleted = self.release_all(&key, &token).await;
        Ok(Outcome::released(if deleted > self.nodes.len() / 2 {
            Released::Held
        } else {
            Released::Lost
        }))
    }
}
