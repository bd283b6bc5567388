//! A task in a temporary directory: a working directory with files, a
//! [`RunConfig`] to run it with, and the trace path.
//!
//! Layout of the temporary directory:
//!
//! ```text
//! <root>/work/         the run's working directory (file tools are confined to it)
//! <root>/outside/      a directory outside the working directory (escape targets)
//! <root>/trace.jsonl   the trace, once `.trace()` is set
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry::protocol::accept::AcceptCheck;
use agentry::protocol::envelope::ResultEnvelope;
use agentry::protocol::fingerprint::sha256_hex;
use agentry::{Grants, RunConfig, Runtime, RuntimeError, Tool, ToolRegistry};
use serde_json::Value;
use tempfile::TempDir;

/// The seed's sum task input: `numbers.txt` whose numbers add up to 23.
pub const NUMBERS_TXT: &str = "5\n7\n11\n";

/// A task with its own temporary directory; removed on drop.
#[derive(Debug)]
pub struct TestTask {
    dir: TempDir,
    config: RunConfig,
}

impl TestTask {
    /// A task with `goal` and these files (path relative to the working directory,
    /// content). Parent directories are created. Grants default to `fs.read`, the
    /// step limit to 50, no trace.
    pub fn new(goal: &str, files: &[(&str, &str)]) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("agentry-test-").tempdir()?;
        let workdir = dir.path().join("work");
        std::fs::create_dir(&workdir)?;
        std::fs::create_dir(dir.path().join("outside"))?;
        let task = TestTask {
            config: RunConfig::new(goal, &workdir),
            dir,
        };
        for (rel, content) in files {
            task.write_file(rel, content)?;
        }
        Ok(task)
    }

    /// The seed's sum task: `numbers.txt` in the workdir, `sum.txt` must equal `23`,
    /// `fs.read` and `fs.write` granted.
    pub fn sum() -> io::Result<Self> {
        Ok(TestTask::new(
            "read numbers.txt, add the numbers, write the sum to sum.txt",
            &[("numbers.txt", NUMBERS_TXT)],
        )?
        .grant(&["fs.read", "fs.write"])
        .accept_file_equals("sum.txt", "23"))
    }

    /// Replaces the grants.
    pub fn grant(mut self, grants: &[&str]) -> Self {
        self.config.grants = Grants::new(grants.iter().copied());
        self
    }

    /// Sets the step limit.
    pub fn max_steps(mut self, n: u64) -> Self {
        self.config.limits.max_steps = Some(n);
        self
    }

    /// Sets the tool-call limit.
    pub fn max_tool_calls(mut self, n: u64) -> Self {
        self.config.limits.max_tool_calls = Some(n);
        self
    }

    /// Sets the token limit.
    pub fn max_tokens(mut self, n: u64) -> Self {
        self.config.limits.max_tokens = Some(n);
        self
    }

    /// Sets the wall-clock deadline.
    pub fn deadline_ms(mut self, ms: u64) -> Self {
        self.config.limits.deadline_ms = Some(ms);
        self
    }

    /// Sets the no-progress window (0 disables it).
    pub fn window(mut self, n: usize) -> Self {
        self.config.progress_window = n;
        self
    }

    /// Sets how many `EPERM` results in a row stop the run (0 disables it),
    /// for a test whose hostile model is meant to try many forbidden things.
    pub fn max_denied(mut self, n: usize) -> Self {
        self.config.max_denied = n;
        self
    }

    /// Sets the run id.
    pub fn run_id(mut self, id: &str) -> Self {
        self.config.run_id = Some(id.to_string());
        self
    }

    /// Adds an acceptance check.
    pub fn accept(mut self, check: AcceptCheck) -> Self {
        self.config.accept.push(check);
        self
    }

    /// Adds a check: `file` must exist and equal `content` (trimmed).
    pub fn accept_file_equals(self, file: &str, content: &str) -> Self {
        self.accept(AcceptCheck::File {
            file: file.to_string(),
            equals: Some(content.to_string()),
            contains: None,
        })
    }

    /// Adds a check: `argv` run in the working directory must exit 0 within 5 s.
    pub fn accept_command(self, argv: &[&str]) -> Self {
        self.accept(AcceptCheck::Command {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            timeout_ms: 5_000,
        })
    }

    /// Writes the trace to `<root>/trace.jsonl`.
    pub fn trace(mut self) -> Self {
        self.config.trace = Some(self.trace_path());
        self
    }

    /// The run configuration (a copy; edit it freely).
    pub fn config(&self) -> RunConfig {
        self.config.clone()
    }

    /// The temporary root, which contains the working directory.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The run's working directory.
    pub fn workdir(&self) -> &Path {
        &self.config.workdir
    }

    /// A directory outside the working directory.
    pub fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    /// Where the trace goes when `.trace()` is set.
    pub fn trace_path(&self) -> PathBuf {
        self.dir.path().join("trace.jsonl")
    }

    /// Writes a file in the working directory, creating parent directories.
    pub fn write_file(&self, rel: &str, content: &str) -> io::Result<()> {
        let path = self.config.workdir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)
    }

    /// Reads a file of the working directory.
    pub fn read_file(&self, rel: &str) -> io::Result<String> {
        std::fs::read_to_string(self.config.workdir.join(rel))
    }

    /// The trace records, parsed.
    pub fn read_trace(&self) -> io::Result<Vec<Value>> {
        read_trace(&self.trace_path())
    }

    /// A result's whole data: its `data`, or, when the runtime kept only its
    /// head (`cut`), the saved file it names, checked against its hash.
    pub fn whole_data(&self, result: &ResultEnvelope) -> Result<Value, crate::TestError> {
        if let Some(data) = &result.data {
            return Ok(data.clone());
        }
        let saved = result.saved.as_ref().ok_or(format!(
            "{}: no data and nothing saved",
            result.tool_call_id
        ))?;
        let bytes = std::fs::read(self.config.workdir.join(&saved.path))?;
        if sha256_hex(&bytes) != saved.sha256 {
            return Err(format!("{}: the saved file changed", saved.path).into());
        }
        Ok(serde_json::from_slice(&bytes)?)
    }
}

/// Parses a JSONL trace: one JSON value per non-empty line. A line that is not
/// valid JSON is an `InvalidData` error naming the line.
pub fn read_trace(path: &Path) -> io::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}:{}: not valid JSON: {e}", path.display(), i + 1),
                )
            })
        })
        .collect()
}

/// A runtime with the built-in tools plus `extra`.
pub fn runtime_with(extra: Vec<Arc<dyn Tool>>) -> Result<Runtime, RuntimeError> {
    let mut registry = ToolRegistry::with_builtins()?;
    for tool in extra {
        registry.register(tool)?;
    }
    Ok(Runtime::new(registry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lays_out_the_directory() -> io::Result<()> {
        let task = TestTask::new("g", &[("a/b.txt", "x")])?.trace();
        assert_eq!(task.read_file("a/b.txt")?, "x");
        assert!(task.outside().is_dir());
        assert!(task.workdir().starts_with(task.root()));
        assert_eq!(task.config().trace, Some(task.trace_path()));
        Ok(())
    }

    #[test]
    fn read_trace_names_the_bad_line() -> io::Result<()> {
        let task = TestTask::new("g", &[])?;
        std::fs::write(task.trace_path(), "{\"a\":1}\n\n{broken\n")?;
        let err = task.read_trace().err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains(":3: not valid JSON")),
            "{err:?}"
        );
        Ok(())
    }
}
