//! Work left to undo if the code that started it is dropped half-way (leaves layer).
//!
//! Two kinds of code use it. An acquire arms one as soon as its value may be on a key, and
//! disarms it once the outcome is known and handed back (a caller that gives up half-way
//! leaves nothing held). And each background task a Locker starts on the runtime of the
//! code that uses it (the renewal task, key tracking's task and heartbeat, the eviction
//! check, the followers of a Sentinel's switches, a Cluster node's probe, a sharded
//! channel's follower) is marked running so that it is started once; a runtime that shuts
//! down drops the task at an await, before it takes its mark back, and the Locker, used on
//! another runtime afterwards, would never start it again. The task's spawner arms an
//! [`Undo`] that takes the mark back and moves it into the task (made in the task's body,
//! it would not exist for a task dropped before its first poll), and the task disarms it
//! when it ends on its own (having taken the mark back itself).

/// Runs `undo` when dropped, unless disarmed first.
pub(crate) struct Undo<F: FnOnce()> {
    undo: Option<F>,
}

impl<F: FnOnce()> Undo<F> {
    pub fn new(undo: F) -> Undo<F> {
        Undo { undo: Some(undo) }
    }

    pub fn disarm(mut self) {
        self.undo = None;
    }
}

impl<F: FnOnce()> Drop for Undo<F> {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            undo();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn runs_once_unless_disarmed() {
        let ran = Cell::new(0);
        drop(Undo::new(|| ran.set(ran.get() + 1)));
        Undo::new(|| ran.set(ran.get() + 10)).disarm();
        assert_eq!(ran.get(), 1);
    }

    #[test]
    fn a_task_dropped_with_its_runtime_takes_its_mark_back() {
        let running = Arc::new(AtomicBool::new(true));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mark = Arc::clone(&running);
        runtime.spawn(async move {
            let unfinished = Undo::new(|| mark.store(false, Ordering::SeqCst));
            tokio::time::sleep(Duration::from_secs(3600)).await;
            unfinished.disarm();
        });
        runtime.block_on(tokio::task::yield_now());
        assert!(running.load(Ordering::SeqCst));
        drop(runtime);
        assert!(
            !running.load(Ordering::SeqCst),
            "the mark outlived its task"
        );
    }

    #[test]
    fn a_task_dropped_before_its_first_poll_takes_its_mark_back_if_it_holds_the_guard() {
        let running = Arc::new(AtomicBool::new(true));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        // Made before the task, moved into it: a guard made in the task's body would
        // never exist, the body never having run.
        let mark = Arc::clone(&running);
        let unfinished = Undo::new(move || mark.store(false, Ordering::SeqCst));
        runtime.spawn(async move {
            unfinished.disarm();
        });
        drop(runtime);
        assert!(
            !running.load(Ordering::SeqCst),
            "the mark outlived its task"
        );
    }
}
