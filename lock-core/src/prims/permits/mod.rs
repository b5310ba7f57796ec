//! Taking weighted permits (semaphores, read-write locks): the wait loop and the guard it
//! hands out, over the permit stores of [`crate::backend::permits`].

pub(crate) mod acquire;
pub(crate) mod take;
