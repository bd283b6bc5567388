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

use std::process::Stdio;

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

/// How one [`cycle`] ended.
#[derive(Clone, Copy, Default)]
struct Ended {
    /// A resume found the run unfinished (the kill crashed it mid-run, not
    /// before it was stored nor after it was done).
    unfinished: bool,
    /// The run parked for a human at least once.
    parked: bool,
}

/// Tallies of [`Ended`] over the cycles of a test.
#[derive(Default, Debug)]
struct Tally {
    cycles: usize,
    unfinished: usize,
    parked: usize,
}

impl Tally {
    fn add(&mut self, ended: Ended) {
        self.cycles += 1;
        self.unfinished += usize::from(ended.unfinished);
        self.parked += usize::from(ended.parked);
    }

    /// At least half the kills must have crashed a run mid-way: otherwise
    /// most landed before or after it and the test proved little.
    fn assert_mostly_mid_run(&self, probe: Probe) {
        eprintln!("kill points over {probe:?}: {self:?}");
        assert!(
            self.unfinished * 2 >= self.cycles,
            "only {} of {} resumes found the run unfinished ({probe:?}): {self:?}",
            self.unfinished,
            self.cycles
        );
    }
}

/// One crash-and-recover cycle.
fn cycle(root: &Path, i: usize, keyed: bool, kill_at: KillAt, mode: &str) -> Ended {
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
    kill_at: KillAt,
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
        killed_at(cmd, self.kill_at, workdir, self.keyed);
        wait_for_stragglers(workdir, &self.store);
        assert_no_duplicates(&lines(workdir, self.keyed), &self.context);
    }

    /// Resumes until the run is done, deciding each parked call by looking at
    /// the file.
    fn resume_until_done(&self, mut workdir: PathBuf) -> Ended {
        let (i, keyed, mode, context) = (self.i, self.keyed, self.mode, &self.context);
        let (store, run_id) = (&self.store, &self.run_id);
        let mut ended = Ended::default();
        let mut decisions: Vec<String> = Vec::new();
        for round in 0..20 {
            // Every fifth iteration also crashes the first resume.
            if round == 0 && i.is_multiple_of(5) {
                killed_after(
                    resume(store, run_id, &decisions, mode),
                    self.kill_at.delay() / 2,
                );
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
                    ended.unfinished = true;
                    return ended;
                }
                3 => {
                    (ended.unfinished, ended.parked) = (true, true);
                    self.decide(&out, &workdir, &mut decisions);
                }
                2 if String::from_utf8_lossy(&out.stderr).contains("holds no run")
                    || String::from_utf8_lossy(&out.stderr).contains("no such file") =>
                {
                    // Killed before the run was stored: nothing ran; start again.
                    assert!(lines(&workdir, keyed).is_empty(), "{context}");
                    self.start_again();
                    return ended;
                }
                2 if String::from_utf8_lossy(&out.stderr).contains("already stopped (done)") => {
                    // The kill came after the run had finished.
                    let got = lines(&workdir, keyed);
                    let want: Vec<String> = (1..=LINES).map(|k| format!("line {k}")).collect();
                    assert_eq!(got, want, "{context}");
                    return ended;
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
    fn start_again(&self) {
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
    }
}

/// The times of one uninterrupted run here, so kills spread over all of it.
#[derive(Clone, Copy, Debug)]
struct Probe {
    /// When the ledger had its first line (the run was stored before).
    first_line: Duration,
    /// When it had all of them.
    last_line: Duration,
    /// When the process exited.
    span: Duration,
}

fn probe_run(root: &Path, keyed: bool) -> Probe {
    let dir = root.join(format!("probe-{keyed}"));
    std::fs::create_dir_all(&dir).unwrap();
    task(&dir, keyed);
    let workdir = root.join(format!("probe-work-{keyed}"));
    let started = Instant::now();
    let mut child = run_cmd(
        &dir,
        &root.join(format!("probe-{keyed}.db")),
        &workdir,
        "probe",
        "strict",
    )
    .stdout(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let (mut first_line, mut last_line) = (None, None);
    while child.try_wait().unwrap().is_none() {
        let n = lines(&workdir, keyed).len();
        if n >= 1 {
            first_line.get_or_insert(started.elapsed());
        }
        if n >= LINES {
            last_line.get_or_insert(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let span = started.elapsed();
    assert!(child.wait().unwrap().success(), "the probe run failed");
    Probe {
        first_line: first_line.unwrap(),
        last_line: last_line.unwrap(),
        span,
    }
}

/// When a cycle's run is killed: a time after it was spawned (its start-up),
/// or a time after the ledger's `k`-th line appeared. Aimed by the run's own
/// progress, a kill lands where it was meant to whatever the machine's load
/// does to the run between the probe and the cycle.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    Spawned(Duration),
    AfterLine(usize, Duration),
}

impl KillAt {
    fn delay(self) -> Duration {
        match self {
            KillAt::Spawned(d) | KillAt::AfterLine(_, d) => d,
        }
    }
}

/// Each call sleeps this long around its write (see [`task`]): after the
/// `k`-th line, at least `CALL_SLEEPS × (LINES − k)` of the run is left.
const CALL_SLEEPS: Duration = Duration::from_millis(20);

/// Spawns `cmd` and SIGKILLs it at `at`; whether it was still running.
fn killed_at(mut cmd: Command, at: KillAt, workdir: &Path, keyed: bool) -> bool {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let KillAt::AfterLine(k, _) = at {
        let deadline = Instant::now() + Duration::from_secs(30);
        while lines(workdir, keyed).len() < k
            && matches!(child.try_wait(), Ok(None))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(at.delay());
    let running = matches!(child.try_wait(), Ok(None));
    let _ = child.kill();
    let _ = child.wait();
    running
}

/// `n` kill points: four in five over the run's calls, the rest over its
/// start-up (some before there is a run to resume) and its end (some after
/// it is done). A kill over the calls comes after line `k` (1 to `LINES` − 1
/// in turn), within the probe's gap between lines but before the calls left
/// could have finished, so it always lands mid-run. Each is shifted by a
/// random fraction of its slot: every kill lands at a different moment.
fn kill_points(n: usize, probe: Probe) -> Vec<KillAt> {
    let edges = n / 5;
    let start = edges / 2;
    let gap = probe.last_line.saturating_sub(probe.first_line) / (LINES as u32 - 1);
    let mut points: Vec<KillAt> = spread(Duration::ZERO, probe.first_line, start)
        .into_iter()
        .map(KillAt::Spawned)
        .collect();
    points.extend((0..n - edges).map(|i| {
        let k = 1 + i % (LINES - 1);
        let window = gap.min(CALL_SLEEPS * (LINES - k) as u32);
        KillAt::AfterLine(k, window.mul_f64(fastrand::f64()))
    }));
    let tail = probe.span.saturating_sub(probe.last_line).mul_f64(1.2);
    points.extend(
        spread(Duration::ZERO, tail, edges - start)
            .into_iter()
            .map(|d| KillAt::AfterLine(LINES, d)),
    );
    points
}

/// `k` moments evenly spread over `from..to`, each at a random place in its slot.
fn spread(from: Duration, to: Duration, k: usize) -> Vec<Duration> {
    let slot = to.saturating_sub(from) / k.max(1) as u32;
    (0..k)
        .map(|i| from + slot * i as u32 + slot.mul_f64(fastrand::f64()))
        .collect()
}

#[test]
fn irreversible_appends_survive_sigkill_at_50_points() {
    let root = tempfile::tempdir().unwrap();
    let probe = probe_run(root.path(), false);
    let mut tally = Tally::default();
    for (i, at) in kill_points(50, probe).into_iter().enumerate() {
        tally.add(cycle(root.path(), i, false, at, "strict"));
    }
    tally.assert_mostly_mid_run(probe);
    // Kills inside a call's window leave it unknown; some must have landed there.
    assert!(tally.parked > 0, "no kill interrupted a call: {tally:?}");
}

#[test]
fn keyed_appends_rerun_and_dedupe_after_sigkill() {
    let root = tempfile::tempdir().unwrap();
    let probe = probe_run(root.path(), true);
    let mut tally = Tally::default();
    for (i, at) in kill_points(20, probe).into_iter().enumerate() {
        tally.add(cycle(root.path(), 100 + i, true, at, "strict"));
    }
    tally.assert_mostly_mid_run(probe);
}

/// The same with grouped commits: steps that only did re-runnable work may be
/// lost and redone, but an irreversible append is still never repeated.
#[test]
fn grouped_commits_never_repeat_an_irreversible_append() {
    let root = tempfile::tempdir().unwrap();
    let probe = probe_run(root.path(), false);
    let mut tally = Tally::default();
    for (i, at) in kill_points(20, probe).into_iter().enumerate() {
        tally.add(cycle(root.path(), 200 + i, false, at, "grouped"));
    }
    tally.assert_mostly_mid_run(probe);
}
