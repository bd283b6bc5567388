mod anthropic;
mod fallback;
mod fits;
mod gate;
mod openai;
// Shared by path with the workspace suite's models tests (tests/suite/models),
// which use the rest of them.
#[allow(dead_code, reason = "the workspace suite's models tests use the rest")]
mod server;
#[allow(dead_code, reason = "the workspace suite's models tests use the rest")]
mod sse;
#[allow(dead_code, reason = "the workspace suite's models tests use the rest")]
mod strict;
mod strict_rules;
mod tls;
#[allow(
    dead_code,
    reason = "the workspace suite's and the CLI's tests use the rest"
)]
mod tls_server;
