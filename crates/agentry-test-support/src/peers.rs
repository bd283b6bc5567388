//! Where the tests' MCP peers are: the reference server `server-everything`
//! (an npm package `.ci/run` installs) and agentry-mcp's own test server (an
//! example `cargo test --workspace` builds). A missing peer is an error
//! saying how to get it, never a silent pass.

use std::path::{Path, PathBuf};

use crate::TestError;

/// `mcp-server-everything` under `MCP_EVERYTHING_DIR`.
pub fn mcp_everything_bin() -> Result<PathBuf, TestError> {
    let dir = std::env::var_os("MCP_EVERYTHING_DIR").ok_or(
        "MCP_EVERYTHING_DIR is not set: point it at a folder where `npm install @modelcontextprotocol/server-everything@2026.8.31` ran (.ci/run does)",
    )?;
    let bin = PathBuf::from(dir).join("node_modules/.bin/mcp-server-everything");
    if !bin.is_file() {
        return Err(format!(
            "MCP_EVERYTHING_DIR is set but {} does not exist: run `npm install --prefix $MCP_EVERYTHING_DIR @modelcontextprotocol/server-everything@2026.8.31`",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

/// agentry-mcp's test server as cargo builds it beside the calling test
/// binary (`target/<profile>/examples/test_server`); `profile_dir` is that
/// `target/<profile>` directory.
pub fn mcp_test_server(profile_dir: &Path) -> Result<PathBuf, TestError> {
    let binary = profile_dir.join("examples").join("test_server");
    if !binary.exists() {
        return Err(format!(
            "{} is missing: build it with `cargo build -p agentry-mcp --example test_server` (`cargo test --workspace` does)",
            binary.display()
        )
        .into());
    }
    Ok(binary)
}
