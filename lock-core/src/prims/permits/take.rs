//! A permit taken and wrapped in a guard that releases, extends and checks it.

use std::time::Duration;

use futures_util::future::BoxFuture;

use super::acquire::{acquire, Request};
use crate::backend::permits::{Ask, PermitKeys, Store};
use crate::prims::env::Env;
use crate::prims::guard::{Guard, Ops, Parts};
use crate::prims::options::Options;
use crate::token::{decode_value, new_value};
use crate::LockError;

/// Takes one permit of `keys` (waiting as `options` say) and returns its guard.
pub(crate) async fn take(
    env: Env,
    keys: PermitKeys,
    ask: Ask,
    options: Options,
) -> Result<Guard, LockError> {
    let (ttl, wait) = options.resolve(&env, &keys.name)?;
    let store = env.store(&keys.name)?;
    let value = new_value(&keys.name, env.label())?;
    let token = decode_value(&value).0.to_owned();
    let granted = acquire(Request {
        env: &env,
        store: store.clone(),
        keys: &keys,
        value,
        ask,
        ttl,
        wait,
    })
    .await?;
    let name = keys.name.clone();
    let ops = PermitOps {
        env: env.clone(),
        store,
        keys,
        member: granted.member,
    };
    Ok(Guard::new(Parts {
        env,
        name,
        token,
        ops: Box::new(ops),
        ttl,
        started: granted.started,
        renew: options.renew,
    }))
}

struct PermitOps {
    env: Env,
    store: Store,
    keys: PermitKeys,
    member: String,
}

impl Ops for PermitOps {
    fn release_reads_no_clock(&self) -> bool {
        matches!(self.store, Store::Server(_))
    }

    fn release(&self) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(self.env.run(
            &self.keys.name,
            self.store.release(
                &self.keys,
                &self.member,
                None,
                None,
                self.env.queue_notifier(),
            ),
        ))
    }

    fn after_lost_reply(&self) {
        if let Some(notifier) = self.env.queue_notifier() {
            notifier.wake_prefixed(&self.keys.route(""));
        }
    }

    fn extend(&self, ttl: Duration) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(self.env.run(
            &self.keys.name,
            self.store.extend(&self.keys, &self.member, ttl),
        ))
    }

    fn held(&self) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(async move {
            let holders = self
                .env
                .run(&self.keys.name, self.store.holders(&self.keys))
                .await?
                .holders;
            let (weight, value) = crate::backend::permits::parse_member(&self.member);
            let token = decode_value(value).0;
            Ok(holders
                .iter()
                .any(|h| h.weight == weight && decode_value(&h.value).0 == token))
        })
    }
}
