//! `agentry sandbox-check`: what this kernel can enforce of the sandbox
//! (`agentry_sandbox::probe`), and whether the default sandbox can be
//! prepared here — tried for real, in a scratch directory, so the answer is
//! the one `agentry run` would get.

use std::io::Write;

use agentry::sandbox::{KernelSupport, Sandbox, SandboxPlaces, SandboxSpec, probe};
use serde::Serialize;

/// What the command prints (`--json`: this object).
#[derive(Debug, Serialize)]
pub(crate) struct SandboxCheck {
    /// The default sandbox (workspace-write, no network) can be enforced.
    pub(crate) enforceable: bool,
    /// What is missing for it, in the kernel's words (empty when enforceable).
    pub(crate) missing: Vec<String>,
    /// What the kernel offers.
    pub(crate) kernel: KernelSupport,
}

/// Probes the kernel and prepares the default sandbox once.
pub(crate) fn check() -> SandboxCheck {
    let kernel = probe();
    let missing = match prepare_default() {
        Ok(()) => Vec::new(),
        Err(why) => vec![why],
    };
    SandboxCheck {
        enforceable: missing.is_empty(),
        missing,
        kernel,
    }
}

fn prepare_default() -> Result<(), String> {
    let scratch = tempfile::tempdir().map_err(|e| format!("no scratch directory: {e}"))?;
    let places = SandboxPlaces {
        workdir: scratch.path().join("work"),
        temp_parent: scratch.path().join("tmp"),
        deny: Vec::new(),
    };
    std::fs::create_dir_all(&places.workdir).map_err(|e| e.to_string())?;
    let sandbox = Sandbox::prepare(&SandboxSpec::default(), &places).map_err(|e| e.to_string())?;
    sandbox.call().map(drop).map_err(|e| e.to_string())
}

/// Prints the check: lines, or with `json` one JSON object.
pub(crate) fn print(check: &SandboxCheck, json: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, check)?;
        return writeln!(out);
    }
    writeln!(out, "{}", check.kernel)?;
    if check.enforceable {
        writeln!(
            out,
            "the default sandbox (workspace-write, no network) can be enforced here"
        )
    } else {
        for why in &check.missing {
            writeln!(out, "missing: {why}")?;
        }
        writeln!(
            out,
            "the default sandbox cannot be enforced here: runs fail to start (exit 2) unless their task says [sandbox] mode = \"off\""
        )
    }
}
