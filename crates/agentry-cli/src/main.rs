//! `agentry`: the command-line interface of the agentry runtime.
//!
//! ```text
//! agentry run TASK_DIR [--policy script:FILE|openai:MODEL|anthropic:MODEL]
//!                      [--base-url URL] [--trace FILE] [--json]
//!                      [--max-steps N] [--deadline 30s] [--workdir DIR]
//!                      [--store FILE | --no-store] [--run-id ID] [--approve TOOL]...
//!                      [--durability strict|grouped]
//! agentry resume RUN_ID [--store FILE] [--decide CALL_ID=happened|retry|skip]...
//!                      [--policy ...] [--base-url URL] [--json] [--durability ...]
//! agentry runs [--store FILE] [--all] [--json]
//! ```
//!
//! Runs are durable by default: committed to `$AGENTRY_STORE`, else
//! `agentry/runs.db` in the system temp dir, so `agentry resume RUN_ID` works with no flags.
//!
//! ```text
//! ```
//!
//! Exit codes: 0 when the run stops `done`, 1 for any other stop reason, 2 for bad
//! input (unreadable or invalid task or script, bad flags, an unusable working
//! directory, a missing API key or an unreachable model server, an unusable
//! store, an unknown or finished run, a run another live process owns), 3 when
//! a durable run parks `awaiting_decision` (it stays in the store; `agentry
//! resume --decide` goes on), 4 when the run finished but its `--trace` file
//! could not be written completely. With `--json`, an error is also printed as
//! one JSON object on stdout: `{"error": "...", "exit_code": N}`. This file
//! only parses arguments, sets up logging and maps results to exit codes; the
//! run itself is in `run.rs`, the output in `report.rs`.

mod durable;
mod report;
mod run;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Exit code for a run that stopped with any reason other than `done`.
const EXIT_NOT_DONE: u8 = 1;
/// Exit code for bad input. clap uses it for usage errors too.
const EXIT_BAD_INPUT: u8 = 2;
/// Exit code for a durable run parked until a human settles an interrupted call.
const EXIT_PARKED: u8 = 3;
/// Exit code for a run whose `--trace` file could not be written completely
/// (the run itself finished; its report is printed).
const EXIT_TRACE_LOST: u8 = 4;

#[derive(Debug, Parser)]
#[command(
    name = "agentry",
    version,
    about = "Run LLM agent tasks on the agentry actor runtime."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a task directory (task.toml, script.json, workspace/) in a fresh working directory.
    Run(RunArgs),
    /// Continue an unfinished run of a store from its last committed state.
    Resume(ResumeArgs),
    /// List the runs of a store (unfinished ones unless --all).
    Runs(RunsArgs),
}

#[derive(Debug, Args)]
struct ResumeArgs {
    /// The run to continue.
    run_id: String,
    /// The SQLite store the run was started with. Default: $AGENTRY_STORE, else
    /// agentry/runs.db in the system temp dir (where `agentry run` stores runs by default).
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
    /// Settle a call the crash interrupted (the run parks `awaiting_decision` on
    /// it otherwise): `happened` (it took effect; do not run it), `retry` (run it
    /// again) or `skip` (do not run it; tell the model). Repeatable.
    #[arg(long, value_name = "CALL_ID=DECISION", value_parser = parse_decision)]
    decide: Vec<(String, agentry::Settlement)>,
    /// The policy, as for `run`. Default: the one the run was started with.
    #[arg(long, value_name = "KIND:VALUE", value_parser = parse_policy)]
    policy: Option<PolicyArg>,
    /// The model server, as for `run`. Default: the one the run was started with.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Print exactly one JSON object on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    /// When a step counts as done: `strict` (on disk first) or `grouped`.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Strict)]
    durability: DurabilityArg,
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DurabilityArg {
    /// Every step's update is on disk before the run goes on (an fsync per step).
    Strict,
    /// Steps that only did re-runnable work are committed in groups; a crash may
    /// repeat them (never a call that must not run twice).
    Grouped,
}

impl From<DurabilityArg> for agentry::Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Strict => agentry::Durability::Strict,
            DurabilityArg::Grouped => agentry::Durability::Grouped,
        }
    }
}

#[derive(Debug, Args)]
struct RunsArgs {
    /// The SQLite store. Default: $AGENTRY_STORE, else agentry/runs.db in the system temp dir.
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
    /// List finished runs too.
    #[arg(long)]
    all: bool,
    /// One JSON array on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The task directory: holds task.toml, and usually script.json and workspace/.
    task_dir: PathBuf,
    /// The policy: `script:FILE` (a scripted policy; FILE relative to the current
    /// directory), `openai:MODEL` (an OpenAI-compatible server; key from
    /// OPENAI_API_KEY) or `anthropic:MODEL` (key from ANTHROPIC_API_KEY).
    /// Default: task.toml's `[policy] script`, else TASK_DIR/script.json.
    #[arg(long, value_name = "KIND:VALUE", value_parser = parse_policy)]
    policy: Option<PolicyArg>,
    /// The model server for `openai:` / `anthropic:` policies, plain http:// only
    /// (e.g. http://127.0.0.1:8080/v1 for llama.cpp's server).
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Write the JSONL trace (one record per step, then a stop record) to FILE.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Print exactly one JSON object on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    /// Override the task's step budget.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=agentry::task::MAX_COUNT))]
    max_steps: Option<u64>,
    /// Override the task's wall-clock deadline ("500ms", "30s", "2m").
    #[arg(long, value_name = "DURATION", value_parser = parse_deadline)]
    deadline: Option<Duration>,
    /// The working directory for this run; must not exist or be empty. Default: a
    /// new directory under the system temp dir (agentry/runs/TASK-UUID).
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Commit the run to this SQLite store (created if missing) so that
    /// `agentry resume` can continue it after a crash. Default: $AGENTRY_STORE,
    /// else agentry/runs.db in the system temp dir.
    #[arg(long, value_name = "FILE", conflicts_with = "no_store")]
    store: Option<PathBuf>,
    /// Keep the run in memory only: it cannot be resumed.
    #[arg(long)]
    no_store: bool,
    /// When a step counts as done: `strict` (on disk first; the default) or
    /// `grouped` (steps that only did re-runnable work are committed in groups:
    /// faster, and a crash may repeat them, never a call that must not run twice).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Strict)]
    durability: DurabilityArg,
    /// The run id (default: a fresh UUIDv7). With --store, a run id already in the
    /// store is refused.
    #[arg(long, value_name = "ID", value_parser = parse_run_id)]
    run_id: Option<String>,
    /// Approve calls of these tools up front (name, scope or `prefix.*`), so they
    /// do not park `awaiting_approval` (irreversible tools do by default).
    /// Repeatable.
    #[arg(long, value_name = "TOOL")]
    approve: Vec<String>,
}

/// The parsed `--policy` flag.
#[derive(Debug, Clone, PartialEq)]
enum PolicyArg {
    /// A script file, relative to the current directory.
    Script(PathBuf),
    /// A model behind a provider's API.
    Model {
        /// Which wire protocol.
        provider: agentry_models::Provider,
        /// The model name sent to the server.
        model: String,
    },
}

pub(crate) fn parse_policy(value: &str) -> Result<PolicyArg, String> {
    match value.split_once(':') {
        Some(("script", file)) if !file.is_empty() => Ok(PolicyArg::Script(file.into())),
        Some(("script", _)) => Err("script: needs a file, e.g. script:plan.json".into()),
        _ => match agentry_models::Provider::parse_spec(value) {
            Some(Ok((provider, model))) => Ok(PolicyArg::Model { provider, model }),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("expected script:FILE, openai:MODEL or anthropic:MODEL".into()),
        },
    }
}

/// The store used when no `--store` is given: `$AGENTRY_STORE`, else
/// `agentry/runs.db` in the system temp dir. That one lives in a directory any
/// local user could have planted: it must be our own `0700` directory and the
/// file, if there, our own regular file (never a link), else an error.
pub(crate) fn default_store() -> Result<PathBuf, agentry::RuntimeError> {
    match std::env::var_os("AGENTRY_STORE").filter(|v| !v.is_empty()) {
        Some(path) => Ok(PathBuf::from(path)),
        None => {
            let path = agentry::runtime::tempdir::private_temp_dir()?.join("runs.db");
            agentry::runtime::tempdir::check_private_file(&path)?;
            Ok(path)
        }
    }
}

/// `--store FILE`, else the default store.
pub(crate) fn store_or_default(store: Option<&PathBuf>) -> Result<PathBuf, agentry::RuntimeError> {
    match store {
        Some(path) => Ok(path.clone()),
        None => default_store(),
    }
}

fn parse_run_id(value: &str) -> Result<String, agentry::RuntimeError> {
    agentry::runtime::config::check_run_id(value).map(|()| value.to_string())
}

fn parse_decision(value: &str) -> Result<(String, agentry::Settlement), String> {
    let (id, decision) = value
        .split_once('=')
        .ok_or("expected CALL_ID=happened|retry|skip")?;
    if id.is_empty() {
        return Err("the call id before '=' is empty".into());
    }
    Ok((id.to_string(), decision.parse()?))
}

fn parse_deadline(value: &str) -> Result<Duration, String> {
    match humantime::parse_duration(value) {
        Ok(d) if d > agentry::task::MAX_DURATION => Err("at most 365 days (365d)".into()),
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be longer than zero".into()),
        Err(e) => Err(format!(
            "expected a duration such as 500ms, 30s or 2m ({e})"
        )),
    }
}

fn init_tracing() {
    // Logs go to stderr so that `--json` output on stdout stays one JSON object.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn main() -> ExitCode {
    // clap prints usage errors itself and exits 2.
    let cli = Cli::parse();
    init_tracing();
    // Process tools kill whole process groups; grandchildren orphaned by a kill are
    // re-parented to us (not init) so they are reaped, never left as zombies.
    if let Err(e) = agentry::tools::proc::reap_orphans_here() {
        tracing::warn!(error = %e, "cannot become a child subreaper; orphaned tool processes may linger as zombies");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentry: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    match cli.command {
        Command::Run(args) => {
            let json = args.json;
            finish(runtime.block_on(run::run(args)), json)
        }
        Command::Resume(args) => {
            let json = args.json;
            finish(runtime.block_on(durable::resume(args)), json)
        }
        Command::Runs(args) => match durable::list(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e, EXIT_BAD_INPUT, args.json),
        },
    }
}

/// Prints the result of `run` or `resume` and maps it to the exit code.
fn finish(result: Result<durable::Finished, run::RunError>, json: bool) -> ExitCode {
    match result {
        Ok(durable::Finished::Outcome(outcome)) => {
            if let Err(e) = report::print(&outcome, json) {
                eprintln!("agentry: cannot write the report: {e}");
            }
            if let (Some(path), Some(e)) = (&outcome.trace, &outcome.trace_error) {
                eprintln!(
                    "agentry: the trace {} could not be written completely: {e}",
                    path.display()
                );
                ExitCode::from(EXIT_TRACE_LOST)
            } else if outcome.stop_reason == agentry::StopReason::Done {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_NOT_DONE)
            }
        }
        Ok(durable::Finished::Parked(parked)) => {
            if let Err(e) = report::print_parked(&parked, json) {
                eprintln!("agentry: cannot write the report: {e}");
            }
            ExitCode::from(EXIT_PARKED)
        }
        Err(run::RunError::BadInput(e)) => fail(&e, EXIT_BAD_INPUT, json),
        Err(run::RunError::Model(e)) => fail(&e, EXIT_BAD_INPUT, json),
        Err(run::RunError::Lost(e)) => fail(&e, EXIT_NOT_DONE, json),
    }
}

/// Reports an error on stderr (and, with `--json`, as the one JSON object on
/// stdout, so a script reading stdout always gets one) and exits with `code`.
fn fail(e: &dyn std::fmt::Display, code: u8, json: bool) -> ExitCode {
    eprintln!("agentry: {e}");
    if json && let Err(e) = report::print_error(&e.to_string(), code) {
        eprintln!("agentry: cannot write the report: {e}");
    }
    ExitCode::from(code)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn policy_flag_accepts_scripts_and_models() {
        assert_eq!(
            parse_policy("script:a/b.json"),
            Ok(PolicyArg::Script("a/b.json".into()))
        );
        assert!(parse_policy("script:").is_err());
        assert_eq!(
            parse_policy("openai:gpt-4o"),
            Ok(PolicyArg::Model {
                provider: agentry_models::Provider::OpenAi,
                model: "gpt-4o".into()
            })
        );
        assert_eq!(
            parse_policy("anthropic:claude-x"),
            Ok(PolicyArg::Model {
                provider: agentry_models::Provider::Anthropic,
                model: "claude-x".into()
            })
        );
        let err = parse_policy("openai:").unwrap_err();
        assert!(err.contains("no model name"), "{err}");
        let err = parse_policy("gemini:x").unwrap_err();
        assert!(err.contains("openai:MODEL"), "{err}");
        assert!(parse_policy("plan.json").is_err());
    }

    #[test]
    fn decide_flag_names_call_and_decision() {
        assert_eq!(
            parse_decision("c1=happened"),
            Ok(("c1".into(), agentry::Settlement::Happened))
        );
        assert_eq!(
            parse_decision("a=b=retry"),
            Err("unknown decision \"b=retry\": expected happened, retry or skip".into())
        );
        assert!(parse_decision("c1").is_err());
        assert!(parse_decision("=skip").is_err());
    }

    #[test]
    fn deadline_flag_parses_humantime() {
        assert_eq!(parse_deadline("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_deadline("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_deadline("0s").is_err());
        assert!(parse_deadline("9999999999999999999s").is_err());
        assert!(parse_deadline("soon").is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
