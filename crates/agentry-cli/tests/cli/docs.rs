//! The docs cannot drift from the code: the fenced blocks of README.md and of
//! the book (docs/src/**.md) are checked against the real thing, as rustdoc
//! runs the examples of Rust docs.
//!
//! - ```` ```toml ````: a task.toml, loaded by `TaskSpec::load` and its tool
//!   registry built. A block without a top-level `goal` is a fragment, wrapped
//!   the same way every time: `goal = "..."` put in front. Files it names with
//!   `script = "..."` are written as a minimal script.
//! - ```` ```toml,serve ````: a serve.toml, parsed and checked by
//!   `agentry_serve::ServeFile::parse` (its task directories need not exist).
//! - ```` ```json ````: parses; a script (it has `turns`) loads with `Script::parse`.
//! - ```` ```sh ```` (`bash`, `console`): every `agentry` command (also as
//!   `cargo run -p agentry-cli -- ...`) is parsed by the CLI's own clap
//!   definition; unless the block is `no_run`, each runs for real in a
//!   sandbox holding the example tasks and must exit as its comment says
//!   (`# exit 1: ...`, else 0). `cargo` commands are not run (CI does), but the
//!   packages, examples and paths they name must exist. Any other program
//!   needs `no_run`.
//! - ```` ```rust,excerpt=FILE ````: the block is a piece of FILE, line for line.
//! - A `no_run` or `ignore` block says why on its first line (`# no_run: ...`).
//!
//! ```` ```text ```` blocks (output, synopses) are not checked. A failure names
//! the file, the line and the block.

use clap::Parser;

use crate::*;

mod blocks;
mod cargo;
mod sandbox;
mod shell;

// The CLI's own flags, compiled into this test to parse the docs' commands
// exactly as the binary does (its unit tests come along).
#[allow(dead_code, reason = "the binary uses the rest")]
#[path = "../../src/args.rs"]
mod args;

use blocks::{Block, all_blocks};
use cargo::Workspace;
use sandbox::Sandbox;
use shell::ShellCommand;

const SHELLS: [&str; 3] = ["sh", "bash", "console"];
const FRAGMENT_GOAL: &str = "goal = \"a fragment of the docs, wrapped into a task\"\n";
const MINIMAL_SCRIPT: &str = r#"{"turns": [{"final": "ok"}]}"#;

/// Fails listing every failure, one per line.
fn assert_none(what: &str, failures: &[String]) {
    assert!(failures.is_empty(), "{what}:\n{}", failures.join("\n"));
}

#[test]
fn every_task_toml_in_the_docs_loads() {
    let blocks = all_blocks(&root());
    let tomls: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.lang == "toml" && !b.has("ignore") && !b.has("serve"))
        .collect();
    assert!(tomls.len() >= 10, "only {} toml blocks found", tomls.len());
    let failures: Vec<String> = tomls
        .iter()
        .filter_map(|b| load_task(b).err().map(|e| format!("{}: {e}", b.at())))
        .collect();
    assert_none("task.toml blocks that do not load", &failures);
}

#[test]
fn every_serve_toml_in_the_docs_parses() {
    let blocks = all_blocks(&root());
    let serves: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.lang == "toml" && b.has("serve"))
        .collect();
    assert!(!serves.is_empty(), "no serve.toml blocks found");
    let failures: Vec<String> = serves
        .iter()
        .filter_map(|b| {
            agentry_serve::ServeFile::parse(&b.body, Path::new("/srv"))
                .err()
                .map(|bad| format!("{}: {bad}", b.at()))
        })
        .collect();
    assert_none("serve.toml blocks that do not parse", &failures);
}

fn load_task(block: &Block) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let has_goal = block
        .body
        .lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .any(|l| l.split('=').next().is_some_and(|key| key.trim() == "goal"));
    let text = if has_goal {
        block.body.clone()
    } else {
        format!("{FRAGMENT_GOAL}{}", block.body)
    };
    std::fs::write(dir.path().join("task.toml"), &text).unwrap();
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    for script in named_scripts(&text) {
        let path = dir.path().join(script);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, MINIMAL_SCRIPT).unwrap();
    }
    let spec = agentry::task::TaskSpec::load(dir.path()).map_err(|e| e.to_string())?;
    spec.registry().map(|_| ()).map_err(|e| e.to_string())
}

/// The files of `script = "FILE"` lines.
fn named_scripts(toml: &str) -> Vec<&str> {
    toml.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            let value = value.trim().strip_prefix('"')?;
            (key.trim() == "script").then(|| value.split('"').next().unwrap_or_default())
        })
        .collect()
}

#[test]
fn every_json_block_parses_and_every_script_loads() {
    let blocks = all_blocks(&root());
    let jsons: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.lang == "json" && !b.has("ignore"))
        .collect();
    assert!(jsons.len() >= 3, "only {} json blocks found", jsons.len());
    let failures: Vec<String> = jsons
        .iter()
        .filter_map(|b| {
            let checked = serde_json::from_str::<Value>(&b.body)
                .map_err(|e| format!("not JSON: {e}"))
                .and_then(|v| match v.get("turns") {
                    Some(_) => agentry::Script::parse(&b.body)
                        .map(drop)
                        .map_err(|e| e.to_string()),
                    None => Ok(()),
                });
            checked.err().map(|e| format!("{}: {e}", b.at()))
        })
        .collect();
    assert_none("json blocks that do not load", &failures);
}

#[test]
fn every_command_in_the_docs_parses_and_runs_as_documented() {
    let root = root();
    let workspace = Workspace::read(&root);
    let blocks = all_blocks(&root);
    let shells: Vec<&Block> = blocks
        .iter()
        .filter(|b| SHELLS.contains(&b.lang.as_str()) && !b.has("ignore"))
        .collect();
    let run = shells.iter().filter(|b| !b.has("no_run")).count();
    assert!(run >= 15, "only {run} runnable command blocks found");
    let failures: Vec<String> = shells
        .iter()
        .filter_map(|b| {
            let checked = check_shell_block(&root, &workspace, b);
            checked.err().map(|e| format!("{}: {e}", b.at()))
        })
        .collect();
    assert_none("command blocks that do not run as documented", &failures);
}

/// Parses every command of the block and, unless it is `no_run`, runs its
/// `agentry` commands in order in one sandbox. Stops at the first failure
/// (later commands may need what it should have made).
fn check_shell_block(root: &Path, workspace: &Workspace, block: &Block) -> Result<(), String> {
    let script = match block.lang.as_str() {
        "console" => console_commands(&block.body),
        _ => block.body.clone(),
    };
    let commands = shell::commands(&script)?;
    let mut sandbox = (!block.has("no_run")).then(|| Sandbox::new(root));
    for command in &commands {
        let at = format!("line {} `{}`", block.line + command.line, command.shown());
        let args = agentry_args(root, workspace, command, sandbox.is_some())
            .map_err(|e| format!("{at}: {e}"))?;
        let Some(args) = args else { continue };
        parse(&args).map_err(|e| format!("{at}: the CLI does not parse it: {e}"))?;
        if let Some(sandbox) = sandbox.as_mut() {
            let ran = sandbox.agentry(&command.env, &args);
            let expected = command.expected_exit();
            if ran.code != Some(expected) {
                return Err(format!(
                    "{at}: exit {:?}, the docs say {expected}; stderr: {}",
                    ran.code,
                    ran.stderr.trim()
                ));
            }
        }
    }
    Ok(())
}

/// The `$ ` lines of a console block (the others are output), numbering kept.
fn console_commands(body: &str) -> String {
    let lines = body
        .lines()
        .map(|l| l.strip_prefix("$ ").unwrap_or_default());
    lines.collect::<Vec<_>>().join("\n")
}

/// The arguments of an `agentry` command (`None`: nothing to parse or run).
fn agentry_args(
    root: &Path,
    workspace: &Workspace,
    command: &ShellCommand,
    runnable: bool,
) -> Result<Option<Vec<String>>, String> {
    match command.words.first().map(String::as_str) {
        Some("agentry") => Ok(Some(command.words[1..].to_vec())),
        Some("cargo") => workspace.check(root, &command.words),
        Some(_) | None if !runnable => Ok(None),
        Some(program) => Err(format!(
            "{program} is not run by this test: mark the block no_run, with the reason"
        )),
        None => Err("a variable alone is not run by this test: mark the block no_run".into()),
    }
}

fn parse(args: &[String]) -> Result<(), String> {
    let argv = std::iter::once("agentry").chain(args.iter().map(String::as_str));
    args::Cli::try_parse_from(argv)
        .map(drop)
        .map_err(|e| e.render().to_string().trim().to_string())
}

#[test]
fn rust_excerpts_are_pieces_of_their_files() {
    let root = root();
    let blocks = all_blocks(&root);
    let excerpts: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.value("excerpt").is_some())
        .collect();
    assert!(!excerpts.is_empty(), "no rust,excerpt=FILE block found");
    let failures: Vec<String> = excerpts
        .iter()
        .filter(|b| {
            let file = std::fs::read_to_string(root.join(b.value("excerpt").unwrap()));
            let file = file.unwrap_or_default();
            let have: Vec<&str> = file.lines().map(str::trim_end).collect();
            let want: Vec<&str> = b.body.lines().map(str::trim_end).collect();
            !have.windows(want.len()).any(|w| w == want.as_slice())
        })
        .map(|b| format!("{}: not a piece of {}", b.at(), b.value("excerpt").unwrap()))
        .collect();
    assert_none("excerpts that drifted from their files", &failures);
}

#[test]
fn blocks_that_are_not_run_say_why() {
    let blocks = all_blocks(&root());
    let failures: Vec<String> = blocks
        .iter()
        .filter(|b| SHELLS.contains(&b.lang.as_str()) || b.lang == "toml")
        .filter_map(|b| {
            let attr = ["no_run", "ignore"].into_iter().find(|a| b.has(a))?;
            let first = b.body.lines().next().unwrap_or_default();
            let reason = first
                .strip_prefix(&format!("# {attr}: "))
                .unwrap_or_default();
            reason
                .trim()
                .is_empty()
                .then(|| format!("{}: the first line must be `# {attr}: <why>`", b.at()))
        })
        .collect();
    assert_none("blocks that are not run and do not say why", &failures);
}

/// The checker itself: a command that exits otherwise than documented fails,
/// naming the file and line; a `no_run` block is parsed, not run; a flag the
/// CLI does not have fails to parse.
#[test]
fn a_command_that_does_not_run_as_documented_is_named() {
    let root = root();
    let workspace = Workspace::read(&root);
    let text = "# T\n\n```sh\nagentry run examples/sum\nagentry run examples/stuck\n```\n\n\
                ```sh,no_run\n# no_run: a test\nagentry runs --no-such-flag\n```\n\n\
                ```sh,no_run\n# no_run: a test\nagentry run examples/nope\n```\n";
    let blocks = blocks::blocks_of(Path::new("x.md"), text);
    let err = check_shell_block(&root, &workspace, &blocks[0]).unwrap_err();
    assert!(
        err.starts_with("line 5 `agentry run examples/stuck`: exit Some(1), the docs say 0"),
        "{err}"
    );
    let err = check_shell_block(&root, &workspace, &blocks[1]).unwrap_err();
    assert!(
        err.contains("line 10") && err.contains("--no-such-flag"),
        "{err}"
    );
    check_shell_block(&root, &workspace, &blocks[2]).unwrap();
}
