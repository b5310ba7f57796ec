//! An acquire in flight on the scripted backend: the connection its commands go out on,
//! and the undo of what they may have taken when its answer never comes.

use std::time::Duration;

use super::calls::{release_script, Announce};
use super::Scripted;
use crate::backend::lua::ScriptMode;
use crate::connection::shared::{Conn, Lent, SharedConnection};
use crate::key::LockKeys;

/// The connection one acquire's commands go out on (lent from the shared connection, used
/// as it is: no second clone per attempt; the caller gives it back once the flight is
/// over), and the undo of whatever they may have taken:
/// dropped while armed (the caller gave up, the reply never came, or no replica
/// acknowledged the grant), it compare-and-deletes the value on this very connection, behind
/// the attempt's commands, and behind a Sentinel retires the connection so that the next
/// operation asks where the master is now (it could lock on a deposed one otherwise).
pub(super) struct InFlight<'a> {
    pub lent: &'a mut Lent,
    pub shared: &'a SharedConnection,
    pub mode: ScriptMode,
    pub announce: Announce,
    /// The waiters' channel prefix the release script announces turns on.
    pub waiters: &'a str,
    pub keys: &'a LockKeys,
    pub value: &'a str,
    pub armed: bool,
    /// The response timeout this clone of the connection had before an attempt cut it
    /// short (see `Scripted::acquire_cut_at`): put back before anything else is sent on
    /// it, the undo included.
    pub restore: Option<Duration>,
}

impl Scripted {
    /// An armed flight of `value` on `keys`, sent on `lent` (a clone of this backend's
    /// shared connection).
    pub(super) fn flight<'a>(
        &'a self,
        lent: &'a mut Lent,
        keys: &'a LockKeys,
        value: &'a str,
    ) -> InFlight<'a> {
        InFlight {
            lent,
            shared: &self.conn,
            mode: self.mode,
            announce: self.announce,
            waiters: &self.waiters,
            keys,
            value,
            armed: true,
            restore: None,
        }
    }
}

impl InFlight<'_> {
    /// Puts back the response timeout the attempt cut short, if it did.
    pub fn restore_timeout(&mut self) {
        if let Some(timeout) = self.restore.take() {
            self.lent.conn.set_response_timeout(timeout);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.restore_timeout();
        spawn_release(
            (self.mode, self.announce, self.waiters),
            &self.lent.conn,
            self.keys,
            self.value,
        );
        if self.shared.follows_master() {
            self.shared.retire(self.lent);
        }
    }
}

/// Compare-and-deletes `value` on `conn` from a task of its own; the TTL frees the lock if
/// it fails or there is no runtime to run it on.
pub(super) fn spawn_release(
    (mode, announce, waiters): (ScriptMode, Announce, &str),
    conn: &Conn,
    keys: &LockKeys,
    value: &str,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    // Behind the attempt, on its socket (this task may not be the attempt's).
    let mut conn = conn.following();
    let keys = keys.clone();
    let value = value.to_owned();
    let waiters = waiters.to_owned();
    runtime.spawn(async move {
        let undone = release_script(mode, announce, &waiters, &mut conn, &keys, &value).await;
        if let Err(err) = undone {
            tracing::debug!(key = %keys.lock, %err, "undo of an abandoned acquire failed; the TTL will free the lock");
        }
    });
}
