//! `agentry`: the command-line interface of the agentry runtime.
//!
//! ```text
//! agentry run TASK_DIR [--policy script:FILE|openai:MODEL|anthropic:MODEL]
//!                      [--base-url URL] [--trace FILE] [--json]
//!                      [--max-steps N] [--deadline 30s] [--workdir DIR]
//! ```
//!
//! Exit codes: 0 when the run stops `done`, 1 for any other stop reason, 2 for bad
//! input (unreadable or invalid task or script, bad flags, an unusable working
//! directory, a missing API key or an unreachable model server). This file only parses arguments, sets up logging and maps results to
//! exit codes; the run itself is in `run.rs`, the output in `report.rs`.

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
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_steps: Option<u64>,
    /// Override the task's wall-clock deadline ("500ms", "30s", "2m").
    #[arg(long, value_name = "DURATION", value_parser = parse_deadline)]
    deadline: Option<Duration>,
    /// The working directory for this run; must not exist or be empty. Default: a
    /// new directory under the system temp dir (agentry/runs/TASK-UUID).
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
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

fn parse_deadline(value: &str) -> Result<Duration, String> {
    match humantime::parse_duration(value) {
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
            match runtime.block_on(run::run(args)) {
                Ok(outcome) => {
                    if let Err(e) = report::print(&outcome, json) {
                        eprintln!("agentry: cannot write the report: {e}");
                    }
                    if outcome.stop_reason == agentry::StopReason::Done {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(EXIT_NOT_DONE)
                    }
                }
                Err(run::RunError::BadInput(e)) => {
                    eprintln!("agentry: {e}");
                    ExitCode::from(EXIT_BAD_INPUT)
                }
                Err(run::RunError::Model(e)) => {
                    eprintln!("agentry: {e}");
                    ExitCode::from(EXIT_BAD_INPUT)
                }
                Err(run::RunError::Lost(e)) => {
                    eprintln!("agentry: {e}");
                    ExitCode::from(EXIT_NOT_DONE)
                }
            }
        }
    }
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
    fn deadline_flag_parses_humantime() {
        assert_eq!(parse_deadline("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_deadline("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_deadline("0s").is_err());
        assert!(parse_deadline("soon").is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
