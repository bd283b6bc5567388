//! MCP tools for agentry: any Model Context Protocol server's tools under
//! agentry's contracts, deadlines and ledger.
//!
//! Depends on the tool seam (agentry-tools), not on the runtime: a started
//! server's tools are [`agentry_tools::Tool`]s, registered like any other.

mod config;

pub use config::{
    ContractOverride, DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT, McpServerConfig, McpTransport,
};
