//! End-to-end tests of the `lockctl` binary against private redis-server processes.

mod consistency;
mod doctor;
mod doctor_redlock;
mod elect;
mod errors;
mod inspect;
mod operator;
mod permits;
mod queue;
mod run;
mod support;
mod watch;
