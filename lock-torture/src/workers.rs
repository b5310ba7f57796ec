//! The orchestrator's background threads (the `MONITOR` readers, the heartbeats): each runs
//! until told to stop, and stopping waits for them, so that their logs are complete.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Threads sharing one stop flag; stopped when dropped.
#[derive(Debug, Default)]
pub struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Runs `work` on a thread of its own, with the flag it must watch to stop.
    pub fn spawn(&mut self, work: impl FnOnce(&AtomicBool) + Send + 'static) {
        let stop = Arc::clone(&self.stop);
        self.threads.push(std::thread::spawn(move || work(&stop)));
    }

    /// Tells every thread to stop and waits for them.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}
