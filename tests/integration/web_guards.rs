//! Web guards over real HTTP and real Redis: the example checkout service (`#[redis_locked]`
//! handlers and an `Idempotency-Key` layer), `LockLayer` on its own (path and header keys,
//! streaming bodies, other statuses, a plain tower service), replicas, and Redis outages.

mod client;
mod defaults;
mod example;
mod layer;
mod limit;
mod lost;
mod stream;
