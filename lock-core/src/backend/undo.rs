//! What an acquire leaves to do if its caller gives up half-way.

/// Runs `undo` when dropped, unless disarmed first: an acquire arms one as soon as its value
/// may be on a key, and disarms it once the outcome is known and handed back.
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
    use super::*;
    use std::cell::Cell;

    #[test]
    fn runs_once_unless_disarmed() {
        let ran = Cell::new(0);
        drop(Undo::new(|| ran.set(ran.get() + 1)));
        Undo::new(|| ran.set(ran.get() + 10)).disarm();
        assert_eq!(ran.get(), 1);
    }
}
