//! The model adapters driven through the runtime: a scripted model server
//! (`runtime`) and the maintained mock server aimock (`aimock`, ignored unless
//! `AIMOCK_DIR` is set). They live here, not in agentry-models, so that crate's
//! dev-dependencies stay free of the runtime.

mod aimock;
mod call_ids;
mod compaction;
mod failed_turns;
mod fallback;
mod interrupt;
mod long_run;
mod prompt_cache;
mod runtime;
mod tls;

// Shared with agentry-models' own tests by path: a shared test crate would put
// the runtime back into the models' dev tree. Each side uses part of them.
#[allow(dead_code, reason = "agentry-models' own tests use the rest")]
#[path = "../../../crates/agentry-models/tests/suite/server.rs"]
pub(super) mod server;
#[allow(dead_code, reason = "agentry-models' own tests use the rest")]
#[path = "../../../crates/agentry-models/tests/suite/sse.rs"]
pub(super) mod sse;
#[allow(dead_code, reason = "agentry-models' own tests use the rest")]
#[path = "../../../crates/agentry-models/tests/suite/strict.rs"]
mod strict;
#[allow(dead_code, reason = "agentry-models' own tests use the rest")]
#[path = "../../../crates/agentry-models/tests/suite/tls_server.rs"]
mod tls_server;
