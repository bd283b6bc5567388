//! Integration test modules, one per area of the runtime.

mod acceptance;
mod budget;
mod deadline;
mod durable;
mod embedding;
mod events;
mod executor;
mod fs_confinement;
mod handle;
mod idempotency;
mod interrupt;
mod mcp;
mod metrics;
mod models;
mod policy;
mod process;
mod retries;
mod run;
mod security;
mod service;
mod service_bin;
mod task_tools;
mod trace;
mod tree;
mod tree_wait;
mod validation;
