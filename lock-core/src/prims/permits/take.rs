//! A permit taken and wrapped in a guard that releases, extends and checks it.

use std::sync::{Mutex, PoisonError};
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
        member: Mutex::new(granted.member),
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
    /// `<weight> <value>`: changed only by a reweigh (a writer stepping down), which the
    /// renewal may cross (see [`PermitOps::extend`]).
    member: Mutex<String>,
}

impl PermitOps {
    fn member(&self) -> String {
        self.member
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `op` on the member; when the store says it is not there but the member was
    /// reweighed meanwhile (the renewal's extension crossing a downgrade), once more on the
    /// member as it is now.
    async fn on_member<F, Fut>(&self, op: F) -> Result<bool, LockError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<bool, LockError>>,
    {
        let member = self.member();
        if op(member.clone()).await? {
            return Ok(true);
        }
        let now = self.member();
        if now == member {
            return Ok(false);
        }
        op(now).await
    }
}

impl Ops for PermitOps {
    fn release_reads_no_clock(&self) -> bool {
        matches!(self.store, Store::Server(_))
    }

    fn release(&self) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(async move {
            let member = self.member();
            self.env
                .run(
                    &self.keys.name,
                    self.store
                        .release(&self.keys, &member, None, None, self.env.queue_notifier()),
                )
                .await
        })
    }

    fn after_lost_reply(&self) {
        if let Some(notifier) = self.env.queue_notifier() {
            notifier.wake_prefixed(&self.keys.route(""));
        }
    }

    fn extend(&self, ttl: Duration) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(self.on_member(move |member| async move {
            self.env
                .run(&self.keys.name, self.store.extend(&self.keys, &member, ttl))
                .await
        }))
    }

    fn reweigh(&self, weight: u64) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(async move {
            let member = self.member();
            let (_, value) = crate::backend::permits::parse_member(&member);
            let lighter = crate::backend::permits::member(weight, value);
            let done = self
                .env
                .run(
                    &self.keys.name,
                    self.store
                        .reweigh(&self.keys, &member, &lighter, self.env.queue_notifier()),
                )
                .await?;
            if done {
                *self.member.lock().unwrap_or_else(PoisonError::into_inner) = lighter;
            }
            Ok(done)
        })
    }

    fn held(&self) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(async move {
            let holders = self
                .env
                .run(&self.keys.name, self.store.holders(&self.keys))
                .await?
                .holders;
            let member = self.member();
            let (weight, value) = crate::backend::permits::parse_member(&member);
            let token = decode_value(value).0;
            Ok(holders
                .iter()
                .any(|h| h.weight == weight && decode_value(&h.value).0 == token))
        })
    }
}
