//! Clones of the shared connection kept by each thread between lock operations.
//!
//! A lock operation needs a clone of the multiplexed connection of its own (redis-rs sends
//! through `&mut`). Cloning one and dropping it bumps and drops reference counts that every
//! thread shares, and on a multi-threaded runtime those counts' cache lines move between
//! cores on every operation: a clone and its drop took about 30 ns on one thread and
//! 370-600 ns on each of two threads doing it at once (this project's 2-core machine;
//! `lock-bench/examples/clone_cost.rs`). The uncontended
//! lock and release give their clone back here after use, and the next operation on the
//! same thread takes it again, touching nothing another thread writes.
//!
//! Each [`SharedConnection`](super::shared::SharedConnection) has its own `Spares`, dropped
//! with it: a dropped `Locker` leaves no connection open in any thread.

use std::cell::RefCell;

use thread_local::ThreadLocal;

/// The most clones a thread keeps for one shared connection (one per operation in flight
/// at once on that thread is all that is ever reused); a clone given back beyond is
/// dropped.
const PER_THREAD: usize = 32;

/// A kept clone, and which opening of the shared connection it is a clone of.
pub(crate) struct Spare<C> {
    pub conn: C,
    /// The opening's generation (see `SharedConnection`): a clone of a retired connection
    /// is never handed out again.
    pub generation: u64,
    /// The Sentinel failovers announced before the connection was opened.
    pub switches: u64,
}

/// Each thread's kept clones of one shared connection (`C`: its `Conn`).
pub(crate) struct Spares<C: Send> {
    threads: ThreadLocal<RefCell<Vec<Spare<C>>>>,
}

impl<C: Send> Spares<C> {
    pub fn new() -> Spares<C> {
        Spares {
            threads: ThreadLocal::new(),
        }
    }

    /// A clone this thread kept of opening `generation` that `usable` accepts; the clones
    /// met on the way that do not qualify (of a retired opening) are dropped.
    pub fn take(&self, generation: u64, usable: impl Fn(&Spare<C>) -> bool) -> Option<Spare<C>> {
        let mut kept = self.threads.get()?.try_borrow_mut().ok()?;
        while let Some(spare) = kept.pop() {
            if spare.generation == generation && usable(&spare) {
                return Some(spare);
            }
        }
        None
    }

    /// Keeps `spare` for this thread's next operation, unless the thread keeps enough.
    /// Clones of an older opening kept under it are dropped on the way (`take` stops at
    /// the first usable clone, so they could stay under newer ones for good, and hold a
    /// retired connection's sockets open).
    pub fn put(&self, spare: Spare<C>) {
        let kept = self.threads.get_or(|| RefCell::new(Vec::new()));
        if let Ok(mut kept) = kept.try_borrow_mut() {
            if kept
                .first()
                .is_some_and(|oldest| oldest.generation != spare.generation)
            {
                kept.retain(|kept| kept.generation == spare.generation);
            }
            if kept.len() < PER_THREAD {
                kept.push(spare);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn spare(conn: &Arc<()>, generation: u64) -> Spare<Arc<()>> {
        Spare {
            conn: Arc::clone(conn),
            generation,
            switches: 0,
        }
    }

    #[test]
    fn a_clone_of_a_newer_opening_drops_the_older_ones_kept_under_it() {
        let spares = Spares::new();
        let (old, new) = (Arc::new(()), Arc::new(()));
        for _ in 0..3 {
            spares.put(spare(&old, 1));
        }
        assert_eq!(Arc::strong_count(&old), 4);
        spares.put(spare(&new, 2));
        assert_eq!(
            Arc::strong_count(&old),
            1,
            "the retired opening's clones stayed"
        );
        assert!(spares.take(2, |_| true).is_some());
        assert!(spares.take(2, |_| true).is_none());
    }

    #[test]
    fn clones_of_the_same_opening_are_all_kept_and_taken_newest_first() {
        let spares = Spares::new();
        let conn = Arc::new(());
        spares.put(Spare {
            conn: Arc::clone(&conn),
            generation: 3,
            switches: 7,
        });
        spares.put(spare(&conn, 3));
        assert_eq!(Arc::strong_count(&conn), 3);
        assert_eq!(spares.take(3, |_| true).map(|s| s.switches), Some(0));
        assert_eq!(spares.take(3, |_| true).map(|s| s.switches), Some(7));
        // One of an opening not asked for is dropped on the way, not handed out.
        spares.put(spare(&conn, 3));
        assert!(spares.take(4, |_| true).is_none());
        assert_eq!(Arc::strong_count(&conn), 1);
    }
}
