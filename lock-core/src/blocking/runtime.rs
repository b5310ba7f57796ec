//! The runtime behind `lock_core::blocking`: a tokio current-thread runtime whose driver
//! (timers, sockets, the locker's spawned tasks) runs on a thread of its own, and the
//! check that refuses a blocking call made inside an async runtime.
//!
//! A caller's thread runs its own call's future (`Handle::block_on`), so many threads may
//! call at once; the driver thread wakes each when its reply arrives.

use std::future::Future;
use std::sync::Mutex;
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::LockError;

/// How long the last handle's drop waits for the releases still in flight (of leases and
/// permits dropped just before) before the runtime stops.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The runtime and the thread that drives it. Stopped (and its thread joined) on drop.
#[derive(Debug)]
pub(super) struct Runtime {
    handle: Handle,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
}

impl Runtime {
    /// Starts the runtime and its driver thread.
    pub fn start() -> Result<Runtime, LockError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("lock-core-blocking")
            .build()
            .map_err(|err| {
                LockError::Config(format!(
                    "cannot start the runtime of lock_core::blocking: {err}"
                ))
            })?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("lock-core-blocking".into())
            .spawn(move || {
                // Drives the IO and timers of every call made through `Handle::block_on`
                // on other threads, and runs the locker's tasks, until told to stop (or
                // until the sender is dropped).
                runtime.block_on(async move {
                    let _ = stopped.await;
                });
                // The runtime drops here, on its own thread, outside any async context:
                // the tasks still running (a renewal whose guard is gone) are cancelled.
            })
            .map_err(|err| {
                LockError::Config(format!(
                    "cannot start the thread of lock_core::blocking: {err}"
                ))
            })?;
        let thread_id = thread.thread().id();
        Ok(Runtime {
            handle,
            stop: Mutex::new(Some(stop)),
            thread: Mutex::new(Some(thread)),
            thread_id,
        })
    }

    /// The runtime's handle, to enter it (so that what a call spawns runs on it).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `work` to its end on the calling thread, with the runtime's timers and sockets.
    /// Refused with [`LockError::BlockingInAsync`] on a thread that runs async code: blocking
    /// there would stall one of that runtime's workers (or, on a current-thread runtime,
    /// the whole runtime, which may be the one that would have answered).
    pub fn block_on<F: Future>(&self, call: &'static str, work: F) -> Result<F::Output, LockError> {
        refuse_inside_runtime(call)?;
        Ok(self.handle.block_on(work))
    }
}

/// [`LockError::BlockingInAsync`] when the calling thread is inside a tokio runtime.
pub(super) fn refuse_inside_runtime(call: &'static str) -> Result<(), LockError> {
    if Handle::try_current().is_ok() {
        return Err(LockError::BlockingInAsync { call });
    }
    Ok(())
}

/// True on a thread inside a tokio runtime (where nothing may block).
pub(super) fn inside_runtime() -> bool {
    Handle::try_current().is_ok()
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Ok(mut stop) = self.stop.lock()
            && let Some(stop) = stop.take()
        {
            let _ = stop.send(());
        }
        // Joined, so that the runtime's sockets are closed when the last handle is gone;
        // not from the driver thread itself, nor from inside an async runtime, where the
        // thread is left to end by itself.
        if std::thread::current().id() == self.thread_id || inside_runtime() {
            return;
        }
        let thread = self.thread.lock().ok().and_then(|mut thread| thread.take());
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::warn!("the thread of lock_core::blocking panicked");
        }
    }
}
