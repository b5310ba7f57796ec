//! What Redlock asks of one of its masters beyond [`Backend`](crate::backend::Backend):
//! a queue ordered by tickets, the master's clock against the client's, the fencing
//! counter raised to the token the majority drew, an abandoned attempt's value deleted
//! and a queue left in the background, and a claim short of a majority given back.

use std::sync::Arc;

use super::calls::{release_script, CLAIM_WINDOW_MS, LEAVE_QUEUE, RAISE_FENCE, RETURN_CLAIM};
use super::Scripted;
use crate::backend::{millis, Waiter};
use crate::connection::shared::is_connection_failure;
use crate::key::LockKeys;
use crate::LockError;

impl Scripted {
    /// One of Redlock's masters: its waiter queue orders waiters by their tickets.
    pub fn redlock_master(mut self) -> Scripted {
        self.ordered_by_ticket = true;
        self
    }

    /// How far this server's clock is ahead of `client_now_us` (a reading of the client's
    /// clock, in µs since the UNIX epoch), from `TIME` read at the middle of its round trip.
    pub async fn clock_offset_us(
        &self,
        name: &str,
        client_now_us: impl Fn() -> i64,
    ) -> Result<i64, LockError> {
        let lent = self.conn.get(name).await?;
        let mut conn = lent.conn.clone();
        let before = client_now_us();
        let (secs, micros): (i64, i64) =
            redis::cmd("TIME")
                .query_async(&mut conn)
                .await
                .map_err(|err| {
                    if is_connection_failure(&err) {
                        self.conn.retire(&lent);
                    }
                    LockError::connection(name, err.to_string())
                })?;
        let after = client_now_us();
        let server = secs.saturating_mul(1_000_000).saturating_add(micros);
        Ok(server - (before + (after - before) / 2))
    }

    /// Raises the lock's fencing counter to at least `token` (Redlock's write-back).
    pub async fn raise_fence(&self, keys: &LockKeys, token: u64) -> Result<(), LockError> {
        let lent = self.conn.get(&keys.name).await?;
        let mut conn = lent.conn.clone();
        let token = token.to_string();
        RAISE_FENCE
            .run::<i64>(self.mode, &mut conn, &[&keys.fence()], &[token.as_bytes()])
            .await
            .map(|_| ())
            .map_err(|err| {
                if is_connection_failure(&err) {
                    self.conn.retire(&lent);
                }
                LockError::from_redis(&keys.name, &keys.lock, err)
            })
    }

    /// Compare-and-deletes `value` in a task of its own, for an attempt that was abandoned
    /// after its SET may have been sent: the delete is queued behind it on the shared
    /// connection. Best effort; the TTL frees the lock if it fails.
    pub fn release_in_background(
        &self,
        runtime: &tokio::runtime::Handle,
        keys: &LockKeys,
        value: &str,
    ) {
        let conn = self.conn.clone();
        let (mode, announce) = (self.mode, self.announce);
        let waiters = Arc::clone(&self.waiters);
        let keys = keys.clone();
        let value = value.to_owned();
        runtime.spawn(async move {
            let undone = match conn.get(&keys.name).await {
                Ok(lent) => {
                    let mut conn = lent.conn.clone();
                    release_script(mode, announce, &waiters, &mut conn, &keys, &value)
                        .await
                        .map(drop)
                        .map_err(|err| err.to_string())
                }
                Err(err) => Err(err.to_string()),
            };
            if let Err(err) = undone {
                tracing::debug!(key = %keys.lock, %err, "undo of an abandoned acquire failed; the TTL will free the lock");
            }
        });
    }

    /// Takes `waiter` out of the lock's waiter queue in a task of its own, leaving the lock
    /// as it is (a Redlock waiter granted on a majority and still queued here: a
    /// reservation of its value on this node is its own, deleted by its release). Best
    /// effort; the entry expires by itself otherwise.
    pub fn leave_queue_in_background(
        &self,
        runtime: &tokio::runtime::Handle,
        keys: &LockKeys,
        waiter: &str,
    ) {
        let conn = self.conn.clone();
        let mode = self.mode;
        let waiters = Arc::clone(&self.waiters);
        let keys = keys.clone();
        let waiter = waiter.to_owned();
        runtime.spawn(async move {
            let left = match conn.get(&keys.name).await {
                Ok(lent) => {
                    let mut conn = lent.conn.clone();
                    LEAVE_QUEUE
                        .run::<i64>(
                            mode,
                            &mut conn,
                            &[&keys.lock, &keys.queue()],
                            &[
                                waiter.as_bytes(),
                                CLAIM_WINDOW_MS.as_bytes(),
                                waiters.as_bytes(),
                                b"1",
                            ],
                        )
                        .await
                        .map(drop)
                        .map_err(|err| err.to_string())
                }
                Err(err) => Err(err.to_string()),
            };
            if let Err(err) = left {
                tracing::debug!(key = %keys.lock, %err, "leaving a node's waiter queue failed; the entry expires by itself");
            }
        });
    }

    /// Gives back a Redlock waiter's claim that won fewer than a majority of masters
    /// (`return_claim.lua`): the waiter takes its place in line again, and the lock stays
    /// reserved for it while it heads the line (see the script). True when the lock held
    /// `value`.
    pub async fn return_claim(
        &self,
        keys: &LockKeys,
        value: &str,
        waiter: &Waiter<'_>,
    ) -> Result<bool, LockError> {
        let ticket = waiter.ticket.to_string();
        let life = millis(waiter.life).to_string();
        self.run_on::<i64>(
            &RETURN_CLAIM,
            keys,
            &[&keys.lock, &keys.queue()],
            &[
                value.as_bytes(),
                waiter.member.as_bytes(),
                ticket.as_bytes(),
                life.as_bytes(),
                CLAIM_WINDOW_MS.as_bytes(),
                self.waiters.as_bytes(),
            ],
        )
        .await
        .map(|n| n == 1)
    }
}
