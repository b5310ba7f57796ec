//! A background task's mark that it runs, taken back if the task is dropped before it
//! ends (leaves layer).
//!
//! A Locker starts tasks of its own on the runtime of the code that uses it (the renewal
//! task, key tracking's, the follower of a Sentinel's switches, a probe of a Cluster node),
//! and marks each one running so that it is started once. A runtime that shuts down drops
//! its tasks at their awaits: they never reach the code that takes the mark back. The
//! Locker lives on, used on another runtime (a service that rebuilds its runtime, tests
//! that share one Locker), and a mark still set would keep the next task from ever being
//! started. [`Unfinished`] runs the mark's undoing when it is dropped, unless the task said
//! it [`finished`](Unfinished::finished) (having taken its mark back itself).

/// Undoes a task's mark when dropped, unless [`Unfinished::finished`] was called.
///
/// ```ignore
/// let unfinished = Unfinished::new(|| state.lock().running = false);
/// work().await; // dropped here with the runtime: `running` is set back to false
/// unfinished.finished(); // the work cleared `running` itself
/// ```
#[must_use = "dropped at once, it undoes the mark at once"]
pub(crate) struct Unfinished<F: FnOnce()> {
    undo: Option<F>,
}

impl<F: FnOnce()> Unfinished<F> {
    /// A task that will run `undo` if it is dropped before it ends.
    pub fn new(undo: F) -> Unfinished<F> {
        Unfinished { undo: Some(undo) }
    }

    /// The task ended on its own, and took its mark back itself.
    pub fn finished(mut self) {
        self.undo = None;
    }
}

impl<F: FnOnce()> Drop for Unfinished<F> {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            undo();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn marked_task(running: Arc<AtomicBool>) -> impl std::future::Future<Output = ()> {
        running.store(true, Ordering::SeqCst);
        async move {
            let unfinished = Unfinished::new(|| running.store(false, Ordering::SeqCst));
            tokio::time::sleep(Duration::from_millis(20)).await;
            running.store(false, Ordering::SeqCst);
            unfinished.finished();
        }
    }

    #[test]
    fn a_task_dropped_with_its_runtime_takes_its_mark_back() {
        let running = Arc::new(AtomicBool::new(false));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.spawn(marked_task(Arc::clone(&running)));
        runtime.block_on(tokio::task::yield_now());
        assert!(running.load(Ordering::SeqCst));
        drop(runtime);
        assert!(
            !running.load(Ordering::SeqCst),
            "the mark outlived its task"
        );
    }

    #[tokio::test]
    async fn a_finished_task_leaves_a_later_mark_alone() {
        let running = Arc::new(AtomicBool::new(false));
        let unfinished = Unfinished::new(|| running.store(false, Ordering::SeqCst));
        // Marked meanwhile by a task started after this one took its mark back.
        running.store(true, Ordering::SeqCst);
        unfinished.finished();
        assert!(running.load(Ordering::SeqCst));
        marked_task(Arc::clone(&running)).await;
        assert!(!running.load(Ordering::SeqCst));
    }
}
