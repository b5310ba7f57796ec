//! After an acquire failed with `WrongType`: what is left on the lock's key, node by node.
//!
//! With Redlock, an attempt that meets a foreign value on one node has already set its own
//! value on the others; it must take it back before it returns. The client cannot see the
//! failed attempt's token, so it records every string value it finds on the key, twice a
//! quarter of a TTL apart, and the checker picks out its own (rule `leftover-after-error`).
//! The looks go through the client's own proxies, as its lock traffic does.

use std::time::Duration;

use super::Ctx;
use crate::clock::{self, Nanos};
use crate::event::{Event, Look};

/// Reads `lock:{name}` on every node twice and logs what was there.
pub(super) async fn after_wrong_type(ctx: &Ctx, name: &str, t_error: Nanos) {
    let key = crate::names::lock_key(name);
    let limit = ctx.ttl();
    let mut conns = Vec::new();
    for url in &ctx.args.lock_urls {
        conns.push(connect(url, limit).await);
    }
    let mut looks = Vec::new();
    for round in 0..2 {
        if round > 0 {
            tokio::time::sleep(ctx.ttl() / 4).await;
        }
        for (node, conn) in conns.iter_mut().enumerate() {
            let Some(conn) = conn else { continue };
            // A hash answers WRONGTYPE: no string there, as with no key or no answer.
            let value = tokio::time::timeout(limit, redis::cmd("GET").arg(&key).query_async(conn))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten();
            looks.push(Look {
                t: clock::now(),
                node: u32::try_from(node).unwrap_or(u32::MAX),
                value,
            });
        }
    }
    ctx.log(&Event::Probe {
        client: ctx.args.id,
        name: name.to_owned(),
        t_error,
        looks,
    });
}

async fn connect(url: &str, limit: Duration) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url).ok()?;
    tokio::time::timeout(limit, client.get_multiplexed_async_connection())
        .await
        .ok()?
        .ok()
}
