//! Real crashes: `agentry run --store` as a child process, SIGKILLed at many
//! different moments while its tool appends lines to a file, then `agentry
//! resume` until the run is done. Every time: each line is in the file exactly
//! once — never a duplicate, never a lost committed step — and a run that
//! cannot know whether an irreversible call happened parks `awaiting_decision`
//! (exit 3) instead of running it again.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/crash.rs"]
mod support;
use support::{json_of, killed_after};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

const LINES: usize = 5;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_agentry")
}

/// A task whose tool appends `line` to ledger.txt, with a pause before and after
/// the write so kills land on both sides of it. `keyed`: the tool dedupes by the
/// host's operation id (`required_key`); otherwise it is irreversible.
fn task(dir: &Path, keyed: bool) {
    let (argv, effect, idempotency) = if keyed {
        (
            r#"["sh", "-c", "sleep 0.01; grep -qF \"$AGENTRY_OPERATION_ID \" ledger.txt 2>/dev/null || printf '%s %s\n' \"$AGENTRY_OPERATION_ID\" \"$1\" >> ledger.txt; sleep 0.01", "sh", "{line}"]"#,
            "reversible",
            "required_key",
        )
    } else {
        (
            r#"["sh", "-c", "sleep 0.01; printf '%s\n' \"$1\" >> ledger.txt; sleep 0.01", "sh", "{line}"]"#,
            "irreversible_external",
            "none",
        )
    };
    let toml = format!(
        r#"goal = "append {LINES} lines to ledger.txt, each exactly once"

[budget]
max_steps = 20
deadline = "60s"

[tools]
grant = ["ledger.append"]

[[tools.command]]
name = "ledger.append"
description = "Append a line to ledger.txt"
argv = {argv}
input_schema = {{ type = "object", properties = {{ line = {{ type = "string" }} }}, required = ["line"] }}
effect = "{effect}"
idempotency = "{idempotency}"
"#
    );
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    let mut turns: Vec<Value> = (1..=LINES)
        .map(|k| {
            serde_json::json!({"tool_calls": [{"id": format!("a{k}"), "name": "ledger.append",
                "arguments": {"line": format!("line {k}")}}]})
        })
        .collect();
    turns.push(
        serde_json::json!({"tool_calls": [{"id": "fin", "name": "task.finish",
        "arguments": {"answer": "appended"}}]}),
    );
    std::fs::write(
        dir.join("script.json"),
        serde_json::json!({ "turns": turns }).to_string(),
    )
    .unwrap();
}

/// Lines of ledger.txt, without the operation ids of the keyed variant.
fn lines(workdir: &Path, keyed: bool) -> Vec<String> {
    let text = std::fs::read_to_string(workdir.join("ledger.txt")).unwrap_or_default();
    text.lines()
        .map(|l| {
            if keyed {
                l.split_once(' ').map_or(l, |(_, rest)| rest).to_string()
            } else {
                l.to_string()
            }
        })
        .collect()
}

fn assert_no_duplicates(lines: &[String], context: &str) {
    for (i, l) in lines.iter().enumerate() {
        assert!(
            !lines[..i].contains(l),
            "{context}: {l:?} is in the file twice: {lines:?}"
        );
    }
}

/// Waits until no process of the killed run is left: its orphaned tools (their
/// working directory is `workdir`) and a tool being spawned at the moment of
/// the kill (still a copy of `agentry`, its command line naming `store`). A
/// human settling a call must likewise wait for the old process's effects.
fn wait_for_stragglers(workdir: &Path, store: &Path) {
    let target = std::fs::canonicalize(workdir).unwrap_or_else(|_| workdir.to_path_buf());
    let marker = store.as_os_str().as_encoded_bytes().to_vec();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let busy = std::fs::read_dir("/proc")
            .map(|entries| {
                entries.flatten().any(|e| {
                    std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd == target)
                        || std::fs::read(e.path().join("cmdline"))
                            .is_ok_and(|c| c.windows(marker.len()).any(|w| w == marker))
                })
            })
            .unwrap_or(false);
        if !busy {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of the killed run lingered"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn run_cmd(task_dir: &Path, store: &Path, workdir: &Path, run_id: &str, mode: &str) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("run")
        .arg(task_dir)
        .arg("--store")
        .arg(store)
        .arg("--workdir")
        .arg(workdir)
        .args(["--run-id", run_id, "--approve", "ledger.append", "--json"])
        .args(["--durability", mode])
        .env_remove("RUST_LOG");
    cmd
}

fn resume(store: &Path, run_id: &str, decisions: &[String], mode: &str) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["resume", run_id, "--durability", mode, "--json", "--store"])
        .arg(store)
        .env_remove("RUST_LOG");
    for d in decisions {
        cmd.args(["--decide", d]);
    }
    cmd
}

/// One crash-and-recover cycle. Returns whether the run parked at least once.
fn cycle(root: &Path, i: usize, keyed: bool, kill_at: Duration, mode: &str) -> bool {
    let task_dir = root.join(format!("task{i}"));
    std::fs::create_dir_all(&task_dir).unwrap();
    task(&task_dir, keyed);
    let cycle = Cycle {
        root,
        i,
        keyed,
        kill_at,
        mode,
        task_dir,
        store: root.join(format!("store{i}.db")),
        run_id: format!("run-{i}"),
        context: format!("iteration {i} (kill at {kill_at:?}, keyed {keyed}, {mode})"),
    };
    let workdir: PathBuf = root.join(format!("work{i}"));
    cycle.spawn_and_kill(&workdir);
    cycle.resume_until_done(workdir)
}

/// What one [`cycle`] works on.
struct Cycle<'a> {
    root: &'a Path,
    i: usize,
    keyed: bool,
    kill_at: Duration,
    mode: &'a str,
    task_dir: PathBuf,
    store: PathBuf,
    run_id: String,
    /// Names the iteration in every assertion.
    context: String,
}

impl Cycle<'_> {
    /// Runs the task in `workdir` and SIGKILLs it after `kill_at`: no line may
    /// have been appended twice.
    fn spawn_and_kill(&self, workdir: &Path) {
        let cmd = run_cmd(
            &self.task_dir,
            &self.store,
            workdir,
            &self.run_id,
            self.mode,
        );
        killed_after(cmd, self.kill_at);
        wait_for_stragglers(workdir, &self.store);
        assert_no_duplicates(&lines(workdir, self.keyed), &self.context);
    }

    /// Resumes until the run is done, deciding each parked call by looking at
    /// the file; returns whether it parked.
    fn resume_until_done(&self, mut workdir: PathBuf) -> bool {
        let (i, keyed, mode, context) = (self.i, self.keyed, self.mode, &self.context);
        let (store, run_id) = (&self.store, &self.run_id);
        let mut parked = false;
        let mut decisions: Vec<String> = Vec::new();
        for round in 0..20 {
            // Every fifth iteration also crashes the first resume.
            if round == 0 && i.is_multiple_of(5) {
                killed_after(resume(store, run_id, &decisions, mode), self.kill_at / 2);
                wait_for_stragglers(&workdir, store);
                assert_no_duplicates(&lines(&workdir, keyed), context);
            }
            let out = resume(store, run_id, &decisions, mode).output().unwrap();
            let code = out.status.code().unwrap();
            match code {
                0 => {
                    let report = json_of(&out);
                    assert_eq!(report["stop_reason"], "done", "{context}: {report}");
                    workdir = PathBuf::from(report["workdir"].as_str().unwrap());
                    let got = lines(&workdir, keyed);
                    let want: Vec<String> = (1..=LINES).map(|k| format!("line {k}")).collect();
                    assert_eq!(
                        got, want,
                        "{context}: every line exactly once, in order (resume round {round}, decisions {decisions:?}): {report}"
                    );
                    return parked;
                }
                3 => {
                    parked = true;
                    self.decide(&out, &workdir, &mut decisions);
                }
                2 if String::from_utf8_lossy(&out.stderr).contains("holds no run")
                    || String::from_utf8_lossy(&out.stderr).contains("no such file") =>
                {
                    // Killed before the run was stored: nothing ran; start again.
                    assert!(lines(&workdir, keyed).is_empty(), "{context}");
                    return self.start_again();
                }
                2 if String::from_utf8_lossy(&out.stderr).contains("already stopped (done)") => {
                    // The kill came after the run had finished.
                    let got = lines(&workdir, keyed);
                    let want: Vec<String> = (1..=LINES).map(|k| format!("line {k}")).collect();
                    assert_eq!(got, want, "{context}");
                    return parked;
                }
                _ => panic!(
                    "{context}: resume exited {code}: {}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
        panic!("{context}: the run never finished");
    }

    /// Parked: the human (this test) looks at the file and says whether each
    /// interrupted append happened.
    fn decide(&self, out: &Output, workdir: &Path, decisions: &mut Vec<String>) {
        let (keyed, context) = (self.keyed, &self.context);
        assert!(!keyed, "{context}: a keyed call is re-run, never parked");
        let report = json_of(out);
        assert_eq!(report["status"], "awaiting_decision", "{context}");
        let got = lines(workdir, keyed);
        assert_no_duplicates(&got, context);
        for p in report["pending_decisions"].as_array().unwrap() {
            let id = p["call"]["id"].as_str().unwrap();
            let k: usize = id.trim_start_matches('a').parse().unwrap();
            let happened = got.contains(&format!("line {k}"));
            decisions.push(format!(
                "{id}={}",
                if happened { "happened" } else { "retry" }
            ));
        }
    }

    /// The kill came before the run was stored: run it again, uninterrupted,
    /// in a fresh working directory.
    fn start_again(&self) -> bool {
        let (keyed, context) = (self.keyed, &self.context);
        let workdir = self.root.join(format!("work{}-again", self.i));
        let out = run_cmd(
            &self.task_dir,
            &self.store,
            &workdir,
            &self.run_id,
            self.mode,
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{context}: {}", json_of(&out));
        assert_eq!(
            lines(&workdir, keyed),
            (1..=LINES).map(|k| format!("line {k}")).collect::<Vec<_>>()
        );
        false
    }
}

/// How long one uninterrupted run takes here, so kills spread over all of it.
fn full_run_time(root: &Path, keyed: bool) -> Duration {
    let dir = root.join(format!("probe-{keyed}"));
    std::fs::create_dir_all(&dir).unwrap();
    task(&dir, keyed);
    let started = Instant::now();
    let out = run_cmd(
        &dir,
        &root.join(format!("probe-{keyed}.db")),
        &root.join(format!("probe-work-{keyed}")),
        "probe",
        "strict",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", json_of(&out));
    started.elapsed()
}

fn kill_points(n: usize, span: Duration) -> Vec<Duration> {
    // Evenly spread over the run (plus a little past its end), each shifted by
    // a random fraction of its slot: every kill lands at a different moment.
    let slot = span.mul_f64(1.1) / n as u32;
    (0..n)
        .map(|i| slot * i as u32 + slot.mul_f64(fastrand::f64()))
        .collect()
}

#[test]
fn irreversible_appends_survive_sigkill_at_50_points() {
    let root = tempfile::tempdir().unwrap();
    let span = full_run_time(root.path(), false);
    let mut parks = 0;
    for (i, at) in kill_points(50, span).into_iter().enumerate() {
        if cycle(root.path(), i, false, at, "strict") {
            parks += 1;
        }
    }
    // Kills inside a call's window leave it unknown; some must have landed there.
    assert!(parks > 0, "no kill interrupted a call (span {span:?})");
}

#[test]
fn keyed_appends_rerun_and_dedupe_after_sigkill() {
    let root = tempfile::tempdir().unwrap();
    let span = full_run_time(root.path(), true);
    for (i, at) in kill_points(20, span).into_iter().enumerate() {
        cycle(root.path(), 100 + i, true, at, "strict");
    }
}

/// The same with grouped commits: steps that only did re-runnable work may be
/// lost and redone, but an irreversible append is still never repeated.
#[test]
fn grouped_commits_never_repeat_an_irreversible_append() {
    let root = tempfile::tempdir().unwrap();
    let span = full_run_time(root.path(), false);
    for (i, at) in kill_points(20, span).into_iter().enumerate() {
        cycle(root.path(), 200 + i, false, at, "grouped");
    }
}
