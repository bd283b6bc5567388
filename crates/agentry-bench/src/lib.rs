//! agentry's benchmarks: the scripted-agent workload of WORKLOAD.md (W1–W4),
//! the bare-channel floor, issue 3's cancellation and parallel-call figures, and
//! the cost of durable runs (W1 and W2 on a SQLite store against in memory),
//! and the kernel sandbox's cost per process start.
//!
//! Everything runs through agentry's public embedding API — [`agentry::Runtime`],
//! [`agentry::RunConfig`], a [`agentry::Policy`] for the scripted model and
//! [`agentry::Tool`]s with real JSON Schemas — so the real actors, executor
//! pipeline (schema validation, grants, idempotency table, fingerprint) and
//! budget supervisor are what is measured. The binary `agentry-bench` prints
//! one JSON line per run; BENCHMARKS.md at the repository root explains each
//! figure and holds the latest ones.
//!
//! # Layout
//! - [`cli`]: arguments and dispatch; [`harness`]: shared run set-up and checks.
//! - [`model`]: the scripted models (policies) and the [`model::Probe`] they stamp.
//! - [`tools`]: `add`, `sleep_echo`, `sleep_subprocess`, the process-group tools.
//! - [`floor`]: W1's step on bare tokio channels.
//! - [`actor_floor`]: W1's step in agentry's actor shape on bare ractor actors.
//! - [`workloads`]: one function per workload, each returning a [`report::Report`].
//! - [`procfs`]: process and memory readings from `/proc`; [`alloc_count`]: the
//!   counting allocator of the `count-alloc` build.
//! - [`otlp`]: `w1 --otlp`'s local OTLP receiver and exporting subscriber.
//!
//! ```
//! use agentry_bench::report::Report;
//! let mut r = Report::new("w1");
//! r.param("m", 10).metric("wall_s", 0.5);
//! assert!(r.to_line().starts_with(r#"{"peer": "agentry", "workload": "w1""#));
//! ```

pub mod actor_floor;
pub mod alloc_count;
pub mod cli;
pub mod floor;
pub mod harness;
pub mod model;
pub mod otlp;
pub mod outside;
pub mod procfs;
pub mod report;
pub mod tools;
pub mod workloads;
