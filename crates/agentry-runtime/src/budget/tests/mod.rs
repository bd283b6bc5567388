//! Property tests of the budget algebra on real supervisors, each driven as a
//! run's conductor drives it ([`standin::StandInRun`]), against an independent
//! model of the algebra (`model.rs`), never the supervisor's own code.
//!
//! - `props`: one supervisor — check-before-spend on every dimension.
//! - `tree`: a whole tree of supervisors — a tree never overspends its root,
//!   under concurrent reservations, spends, charges, releases and ends
//!   (`plan` draws a case, `concurrent` runs it, `settle` checks what every
//!   interleaving must leave, `sequential` goes on one operation at a time).

mod concurrent;
mod model;
mod plan;
mod props;
mod sequential;
mod settle;
mod standin;
mod tree;
