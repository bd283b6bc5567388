//! `agentry`: the command-line interface of the agentry runtime.
//!
//! ```text
//! agentry run TASK_DIR [--policy script:FILE|openai:MODEL|anthropic:MODEL]
//!                      [--base-url URL] [--trace FILE] [--json]
//!                      [--max-steps N] [--deadline 30s] [--workdir DIR]
//!                      [--store FILE | --no-store] [--run-id ID] [--approve TOOL]...
//!                      [--durability strict|grouped] [--otlp [URL]]
//! agentry resume RUN_ID [--store FILE] [--decide CALL_ID=happened|retry|skip]...
//!                      [--policy ...] [--base-url URL] [--json] [--durability ...]
//! agentry runs [--store FILE] [--all] [--json]
//! agentry tools TASK_DIR [--json]
//! agentry serve [--config serve.toml] [--addr ADDR] [--store FILE] [--no-auth]
//! agentry mcp [--http ADDR] [--store FILE | --no-store] [--durability strict|grouped]
//! agentry stats [--store FILE | --trace FILE...] [--by task|model|tool] [--since 24h] [--json]
//! agentry replay [TRACE.jsonl] [--store FILE --run-id ID] [--task DIR] [--until STEP]
//!                      [--fork-at STEP --policy ...] [--out FILE] [--json]
//!                      [--yes | --dry-run] [--force]
//! agentry view TRACE.jsonl... [-o run.html]
//! agentry sandbox-check [--json]
//! ```
//!
//! Runs are durable by default: committed to `$AGENTRY_STORE`, else
//! `runs.db` in this user's state directory (`$XDG_STATE_HOME/agentry`, else
//! `~/.local/state/agentry`), so `agentry resume RUN_ID` works with no flags.
//!
//! Exit codes: 0 when the run stops `done`, 1 for any other stop reason, 2 for bad
//! input (unreadable or invalid task or script, bad flags, an unusable working
//! directory, a missing API key or an unreachable model server, an unusable
//! store, an unknown or finished run, a run another live process owns), 3 when
//! a durable run parks `awaiting_decision` (it stays in the store; `agentry
//! resume --decide` goes on), 4 when the run finished but its `--trace` file
//! could not be written completely. With `--json`, an error is also printed as
//! one JSON object on stdout: `{"error": "...", "exit_code": N}`. This file
//! only sets up logging and maps results to exit codes.
//!
//! # Layout
//! Modules, in import order:
//! - `args`: the flags (clap), and what a flag's path means.
//! - `error`: `RunError`, why `run` or `resume` produced no outcome.
//! - `signals`: ctrl-c: the interrupt prompt at a terminal, else a graceful stop.
//! - `telemetry`: logs and span export (`--otlp`).
//! - `store`: the SQLite store and its default path, `agentry runs`.
//! - `policy`, `child_models`: the script or model of a run, what a run stores
//!   to rebuild it, and the models its children may ask for.
//! - `drive`: a run until it stops or parks; `report`: what stdout shows.
//! - `run`, `resume`: the two commands that run a task.
//! - `tools`: `agentry tools`; `stats`: `agentry stats` (after `store`).
//! - `serve`: `agentry serve`, the HTTP service with serve.toml's agents.
//! - `mcp`: agentry as an MCP server; `replay`: `agentry replay`; `view`:
//!   `agentry view`'s page; `sandbox_check`: `agentry sandbox-check`.

mod args;
mod child_models;
mod drive;
mod error;
mod mcp;
mod policy;
mod replay;
mod report;
mod resume;
mod run;
mod sandbox_check;
mod serve;
mod signals;
mod stats;
mod store;
mod telemetry;
mod tools;
mod view;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::drive::Finished;
use crate::error::RunError;

/// Exit code for a run that stopped with any reason other than `done`.
const EXIT_NOT_DONE: u8 = 1;
/// Exit code for bad input. clap uses it for usage errors too.
const EXIT_BAD_INPUT: u8 = 2;
/// Exit code for a durable run parked until a human settles an interrupted call.
const EXIT_PARKED: u8 = 3;
/// Exit code for a run whose `--trace` file could not be written completely
/// (the run itself finished; its report is printed).
const EXIT_TRACE_LOST: u8 = 4;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits 2.
    let cli = Cli::parse();
    let log = telemetry::log_of(&cli.command);
    let metrics = telemetry::metrics_of(&cli.command);
    let telemetry = match telemetry::init(telemetry::otlp_of(&cli.command), log, metrics.as_ref()) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("agentry: --otlp: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
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
    // A full disk (or `ulimit -f`) fails the store's commit, which stops the
    // run with an error naming the store; SIGXFSZ would kill us mid-write.
    if let Err(e) = runtime.block_on(async { agentry::tools::proc::survive_file_size_limit() }) {
        tracing::warn!(error = %e, "cannot catch SIGXFSZ; a write past the file-size limit kills the process");
    }
    let code = command(cli.command, &runtime, metrics);
    // The run's actors end with the runtime, closing their spans; then the
    // export is flushed.
    drop(runtime);
    telemetry::shut_down(telemetry);
    code
}

fn command(
    command: Command,
    runtime: &tokio::runtime::Runtime,
    metrics: Option<agentry::metrics::Metrics>,
) -> ExitCode {
    match command {
        Command::Run(args) => {
            let json = args.json;
            finish(runtime.block_on(run::run(args)), json)
        }
        Command::Resume(args) => {
            let json = args.json;
            finish(runtime.block_on(resume::resume(args)), json)
        }
        Command::Runs(args) => match store::list(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e, EXIT_BAD_INPUT, args.json),
        },
        Command::Tools(args) => match runtime.block_on(tools::list(&args.task_dir)) {
            Ok(rows) => {
                if let Err(e) = tools::print(&rows, args.json) {
                    eprintln!("agentry: cannot write the list: {e}");
                }
                ExitCode::SUCCESS
            }
            Err(RunError::BadInput(e)) => fail(&e, EXIT_BAD_INPUT, args.json),
            Err(RunError::Model(e)) => fail(&e, EXIT_BAD_INPUT, args.json),
            Err(RunError::Lost(e)) => fail(&e, EXIT_BAD_INPUT, args.json),
        },
        Command::Stats(args) => match stats::stats(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e, EXIT_BAD_INPUT, args.json),
        },
        // Exit 0: no drift (or a dry run); 1: drift; 2: the replay could not
        // be judged or did not run (no --yes, a self-contradicting trace).
        Command::Replay(args) => match runtime.block_on(replay::replay(&args)) {
            Ok(false) => ExitCode::SUCCESS,
            Ok(true) => ExitCode::from(EXIT_NOT_DONE),
            Err(e) => fail(&e, EXIT_BAD_INPUT, args.json),
        },
        Command::Serve(args) => match runtime.block_on(serve::serve(args, metrics)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e, EXIT_BAD_INPUT, false),
        },
        // Stdout is the protocol channel (stdio): errors go to stderr only.
        Command::Mcp(args) => match runtime.block_on(mcp::serve(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e, EXIT_BAD_INPUT, false),
        },
        // Exit 0: the default sandbox can be enforced here; 1: it cannot.
        Command::SandboxCheck(args) => {
            let check = sandbox_check::check();
            if let Err(e) = sandbox_check::print(&check, args.json) {
                eprintln!("agentry: cannot write the check: {e}");
            }
            if check.enforceable {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_NOT_DONE)
            }
        }
        Command::View(args) => match view::write(&args) {
            Ok(path) => {
                println!("{}", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e, EXIT_BAD_INPUT, false),
        },
    }
}

/// Prints the result of `run` or `resume` and maps it to the exit code.
fn finish(result: Result<Finished, RunError>, json: bool) -> ExitCode {
    match result {
        Ok(Finished::Outcome(outcome, tree)) => {
            if let Err(e) = report::print(&outcome, tree.as_deref(), json) {
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
        Ok(Finished::Parked(parked)) => {
            if let Err(e) = report::print_parked(&parked, json) {
                eprintln!("agentry: cannot write the report: {e}");
            }
            ExitCode::from(EXIT_PARKED)
        }
        Err(RunError::BadInput(e)) => fail(&e, EXIT_BAD_INPUT, json),
        Err(RunError::Model(e)) => fail(&e, EXIT_BAD_INPUT, json),
        Err(RunError::Lost(e)) => fail(&e, EXIT_NOT_DONE, json),
    }
}

/// Reports an error on stderr (and, with `--json`, as the one JSON object on
/// stdout, so a script reading stdout always gets one) and exits with `code`.
fn fail(e: &dyn std::fmt::Display, code: u8, json: bool) -> ExitCode {
    // An error may quote a model, a tool, a server or a file: escaped.
    eprintln!(
        "agentry: {}",
        agentry::protocol::terminal::escape_text(&e.to_string())
    );
    if json && let Err(e) = report::print_error(&e.to_string(), code) {
        eprintln!("agentry: cannot write the report: {e}");
    }
    ExitCode::from(code)
}
