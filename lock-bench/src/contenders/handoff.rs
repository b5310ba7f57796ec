//! The floor of a semaphore's hand-off between clients (S6's scale): redis-rs alone, each
//! instance one client with a multiplexed connection and a pub/sub connection subscribed
//! to a channel of its own. A name is a count of the permits taken and a list of the
//! waiters' channels. Taking is one script (a permit if one is free and nobody waits,
//! otherwise a place at the end of the list); giving back is one script (the first in the
//! list gets the permit by a `PUBLISH` to its channel; otherwise the count goes down).
//!
//! Nothing else, and so not a lock anyone should use: no TTL (a client that dies holding a
//! permit keeps it), no token, no waiter that died passed over, no timer but the wait's.
//! What a FIFO hand-off between processes costs with the least a hand-off needs: one round
//! trip to give back, one message to the next holder.

use std::pin::Pin;
use std::time::Duration;

use futures_util::StreamExt as _;
use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::Script;
use tokio::sync::Mutex;

use super::{Contender, Outcome, Released, Spec};

/// KEYS[1] the count taken, KEYS[2] the waiters' channels; ARGV[1] the capacity, ARGV[2]
/// the caller's channel. 1: taken; 0: queued.
const TAKE: &str = "\
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n < tonumber(ARGV[1]) and redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('INCR', KEYS[1])
  return 1
end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 0";

/// KEYS as `TAKE`. 1: handed to the first waiter; 0: put back.
const GIVE: &str = "\
local next = redis.call('LPOP', KEYS[2])
if next then
  redis.call('PUBLISH', next, 'g')
  return 1
end
redis.call('DECR', KEYS[1])
return 0";

/// What `lock-bench --floor-pad N` adds to the floor's scripts, N times (2N in its give
/// script): Redis execution time that does nothing else, or one part of what a permit
/// script does, to price that part where it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Pad {
    /// A turn of an empty Lua loop.
    #[default]
    Loop,
    /// `redis.call('TIME')`: the least an inner call costs.
    Time,
    /// `ZMSCORE` of eight members of a missing key (the permit state's read, without
    /// the state).
    Zmscore,
    /// Defining `permits_lib.lua`'s functions, as every permit script past its fast path
    /// does.
    Lib,
    /// Three Lua tables.
    Tables,
}

/// `script` with `pad` done `times` first (nothing for 0).
fn padded(script: &str, pad: Pad, times: u64) -> String {
    if times == 0 {
        return script.to_owned();
    }
    let each = match pad {
        Pad::Loop => return format!("local pad = 0\nfor i = 1, {times} do pad = pad + i end\n{script}"),
        Pad::Time => "redis.call('TIME')",
        Pad::Zmscore => {
            "redis.call('ZMSCORE', KEYS[1] .. ':pad', '#c', '#w', '#l', '#q', '#h', '#e', '#t', '#f')"
        }
        Pad::Tables => "local t = { a = i, b = {}, c = {} }",
        Pad::Lib => {
            // Each copy in a block of its own, so that Lua's limit of 200 locals per
            // function is not met.
            let lib = include_str!("../../../lock-core/src/scripts/permits_lib.lua");
            let blocks = format!("do\n{lib}\nend\n").repeat(times as usize);
            return format!("{blocks}{script}");
        }
    };
    format!("for i = 1, {times} do {each} end\n{script}")
}

pub struct Handoff {
    label: String,
    client: redis::Client,
    capacity: usize,
    /// Keys and channels of this process's run: a run's leftovers are never another's.
    prefix: String,
    channel: String,
    take: Script,
    give: Script,
    /// Connected by the warm-up; one task per instance holds it through each cycle.
    link: Mutex<Option<Link>>,
}

struct Link {
    conn: MultiplexedConnection,
    turns: Pin<Box<PubSubStream>>,
}

impl Handoff {
    /// One client of the floor; `run` tells this process's instances' keys from another's.
    pub fn new(
        url: &str,
        capacity: usize,
        run: u64,
        index: usize,
        label: impl Into<String>,
        (pad, times): (Pad, u64),
    ) -> Result<Handoff, String> {
        let client = redis::Client::open(url).map_err(|err| err.to_string())?;
        let prefix = format!("handoff-floor:{run:x}");
        Ok(Handoff {
            label: label.into(),
            client,
            capacity,
            channel: format!("{prefix}:turn:{index}"),
            prefix,
            take: Script::new(&padded(TAKE, pad, times)),
            give: Script::new(&padded(GIVE, pad, 2 * times)),
            link: Mutex::new(None),
        })
    }

    async fn connect(&self) -> Result<Link, String> {
        let conn = self
            .client
            .get_multiplexed_async_connection()
            .await
            .map_err(|err| err.to_string())?;
        let mut pubsub = self
            .client
            .get_async_pubsub()
            .await
            .map_err(|err| err.to_string())?;
        pubsub
            .subscribe(&self.channel)
            .await
            .map_err(|err| err.to_string())?;
        Ok(Link {
            conn,
            turns: Box::pin(pubsub.into_on_message()),
        })
    }
}

impl Contender for Handoff {
    fn label(&self) -> &str {
        &self.label
    }

    async fn locked<B>(&self, name: &str, spec: Spec, body: B) -> Result<Outcome, String>
    where
        B: std::future::Future<Output = ()> + Send,
    {
        let mut link = self.link.lock().await;
        if link.is_none() {
            *link = Some(self.connect().await?);
        }
        let Some(link) = link.as_mut() else {
            return Err("not connected".into());
        };
        let count = format!("{}:{{{name}}}:n", self.prefix);
        let queue = format!("{}:{{{name}}}:q", self.prefix);
        let taken: i64 = self
            .take
            .key(&count)
            .key(&queue)
            .arg(self.capacity)
            .arg(&self.channel)
            .invoke_async(&mut link.conn)
            .await
            .map_err(|err| err.to_string())?;
        if taken == 0 {
            let wait = spec.wait.max(Duration::from_millis(1));
            match tokio::time::timeout(wait, link.turns.next()).await {
                Ok(Some(_)) => {}
                Ok(None) => return Err("the pub/sub connection closed".into()),
                Err(_) => {
                    let removed: i64 = redis::cmd("LREM")
                        .arg(&queue)
                        .arg(1)
                        .arg(&self.channel)
                        .query_async(&mut link.conn)
                        .await
                        .map_err(|err| err.to_string())?;
                    if removed == 1 {
                        return Err(format!("no permit of {name} within {wait:?}"));
                    }
                    // Handed over meanwhile: the message is on its way.
                    if link.turns.next().await.is_none() {
                        return Err("the pub/sub connection closed".into());
                    }
                }
            }
        }
        body.await;
        let _: i64 = self
            .give
            .key(&count)
            .key(&queue)
            .invoke_async(&mut link.conn)
            .await
            .map_err(|err| err.to_string())?;
        Ok(Outcome::released(Released::Unknown))
    }
}
