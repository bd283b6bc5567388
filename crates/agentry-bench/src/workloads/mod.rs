//! One module per workload family; each function returns the [`Report`](crate::report::Report) to print.

mod actor_floor;
mod durable;
mod idle;
mod sandbox;
mod w1;
mod w2;
mod w3;
mod w4;

pub use actor_floor::{actor_floor, actor_floor_w2};
// `Mode` is an `Options` field, so it lives in the harness; kept here for old paths.
pub use crate::harness::Mode;
pub use durable::{CountingStore, Counts, durable, durable_w2};
pub use idle::idle;
pub use sandbox::sandbox;
pub use w1::{floor, w1};
pub use w2::w2;
pub use w3::{parallel, w3};
pub use w4::{cancel, w4};
