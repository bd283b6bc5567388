//! Security tests: see `mod.rs`. This module: the workspace — file tools under a
//! model racing them, agentry's own artifact writes, acceptance checks against
//! hostile files, acceptance commands' environment, and processes that try to
//! outlive their call.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentry::protocol::accept::AcceptCheck;
use agentry::tools::proc::{CommandTool, reap_orphans_here};
use agentry::{Decision, Effect, ErrorCode, Runtime, StopReason, ToolCall, ToolContract};
use agentry_test_support::{
    FnPolicy, ScriptBuilder, TestError, TestTask, run_with_events, runtime_with, tool_results,
};
use serde_json::json;

const SECRET: &str = "secret-outside-the-workdir-4f1c";

/// Steps of the race tests, each with [`CALLS_PER_STEP`] parallel calls.
const RACE_STEPS: u64 = 300;
const CALLS_PER_STEP: usize = 6;

/// A thread that keeps flipping one path between two states until stopped, for
/// at most [`MAX_SWAPS`] flips or [`MAX_SWAP_TIME`] (a safety bound: the race
/// itself is bounded by [`RACE_STEPS`]).
struct Swapper {
    stop: Arc<AtomicBool>,
    flips: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const MAX_SWAPS: u64 = 1_000_000;
const MAX_SWAP_TIME: Duration = Duration::from_secs(60);

impl Swapper {
    fn start(flip: impl Fn(u64) + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flips = Arc::new(AtomicU64::new(0));
        let (stopped, count) = (Arc::clone(&stop), Arc::clone(&flips));
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut done = 0;
            while !stopped.load(Ordering::Relaxed)
                && done < MAX_SWAPS
                && started.elapsed() < MAX_SWAP_TIME
            {
                flip(done);
                done += 1;
                count.store(done, Ordering::Relaxed);
            }
        });
        Swapper {
            stop,
            flips,
            thread: Some(thread),
        }
    }

    /// Stops the thread; returns how many flips it made.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.flips.load(Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A policy that makes `calls(step)` for [`RACE_STEPS`] steps, then finishes.
/// Each step waits (up to 200 ms) for the swapper to flip at least once since
/// the last, so the calls race a moving target even on a loaded machine.
fn racing_policy(
    swapper: &Swapper,
    calls: impl Fn(u64) -> Vec<ToolCall> + Send + 'static,
) -> FnPolicy {
    let flips = Arc::clone(&swapper.flips);
    FnPolicy::from_async(move |ctx| {
        let decision = if ctx.step <= RACE_STEPS {
            Decision::ToolCalls {
                calls: calls(ctx.step),
            }
        } else {
            Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    "finish",
                    "task.finish",
                    json!({"answer": "raced"}),
                )],
            }
        };
        let flips = Arc::clone(&flips);
        Box::pin(async move {
            let seen = flips.load(Ordering::Relaxed);
            let deadline = Instant::now() + Duration::from_millis(200);
            while flips.load(Ordering::Relaxed) == seen && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            decision
        })
    })
}

fn race_task(grants: &[&str]) -> Result<TestTask, TestError> {
    Ok(TestTask::new("race the file tools", &[])?
        .grant(grants)
        .max_steps(RACE_STEPS + 2)
        .window(0)
        .trace())
}

/// Swaps `target.txt` between a file inside and a link to a secret outside while
/// the model reads it 1,800 times: no read may return the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_a_file_link_swap_never_return_outside_content() -> Result<(), TestError> {
    let task = race_task(&["fs.read"])?;
    let secret = task.outside().join("secret.txt");
    std::fs::write(&secret, SECRET)?;
    task.write_file("target.txt", "inside")?;
    let work = task.workdir().to_path_buf();
    let swapper = Swapper::start(move |i| {
        // Atomic renames: the name is always either a file or a link.
        let tmp = work.join(format!("tmp-{}", i % 2));
        if i % 2 == 0 {
            let _ = symlink(&secret, &tmp);
        } else {
            let _ = std::fs::write(&tmp, "inside");
        }
        let _ = std::fs::rename(&tmp, work.join("target.txt"));
    });
    let policy = racing_policy(&swapper, |step| {
        (0..CALLS_PER_STEP)
            .map(|i| {
                ToolCall::new(
                    format!("r{step}-{i}"),
                    "fs.read",
                    json!({"path": "target.txt"}),
                )
            })
            .collect()
    });

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;
    let flips = swapper.finish();

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let trace = std::fs::read_to_string(task.trace_path())?;
    let escapes = trace.matches(SECRET).count();
    assert_eq!(escapes, 0, "{escapes} reads returned the outside file");
    // Both states were met: the reads raced the swap rather than one side of it.
    let inside = trace.matches(r#""content":"inside""#).count();
    let refused = trace.matches(r#""code":"EPERM""#).count();
    assert!(
        inside > 0 && refused > 0,
        "{inside} reads inside, {refused} refused: the race never ran ({flips} flips)"
    );
    Ok(())
}

/// Swaps `sub` between a directory and a link to a directory outside while the
/// model writes `sub/f-N.txt` 1,800 times: nothing may be created outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_dir_link_swap_never_land_outside() -> Result<(), TestError> {
    let task = race_task(&["fs.write"])?;
    let outside = task.outside();
    let work = task.workdir().to_path_buf();
    std::fs::create_dir(work.join("sub"))?;
    let swapper = Swapper::start(move |i| {
        let (sub, parked) = (work.join("sub"), work.join("sub-parked"));
        if i % 2 == 0 {
            // Writes that landed in the real directory go with it.
            let _ = std::fs::remove_dir_all(&parked);
            let _ = std::fs::rename(&sub, &parked);
            let _ = symlink(&outside, &sub);
        } else {
            let _ = std::fs::remove_file(&sub);
            let _ = std::fs::rename(&parked, &sub);
        }
    });
    let policy = racing_policy(&swapper, |step| {
        (0..CALLS_PER_STEP)
            .map(|i| {
                ToolCall::new(
                    format!("w{step}-{i}"),
                    "fs.write",
                    json!({"path": format!("sub/f-{step}-{i}.txt"), "content": "x"}),
                )
            })
            .collect()
    });

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;
    let flips = swapper.finish();

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let escaped: Vec<_> = std::fs::read_dir(task.outside())?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(escaped.is_empty(), "created outside: {escaped:?}");
    let trace = std::fs::read_to_string(task.trace_path())?;
    assert!(
        trace.contains(r#""ok":true"#),
        "no write succeeded: the race never ran ({flips} flips)"
    );
    Ok(())
}

/// Swaps `d` between a directory and a link to a directory outside while the
/// model lists it: no listing may show the outside entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_racing_a_dir_link_swap_never_show_outside_entries() -> Result<(), TestError> {
    let task = race_task(&["fs.read"])?;
    let outside = task.outside();
    std::fs::write(outside.join(SECRET), "x")?;
    let work = task.workdir().to_path_buf();
    std::fs::create_dir(work.join("d"))?;
    std::fs::write(work.join("d/inside-entry"), "x")?;
    let swapper = Swapper::start(move |i| {
        let d = work.join("d");
        let parked = work.join("d-parked");
        if i % 2 == 0 {
            let _ = std::fs::rename(&d, &parked);
            let _ = symlink(&outside, &d);
        } else {
            let _ = std::fs::remove_file(&d);
            let _ = std::fs::rename(&parked, &d);
        }
    });
    let policy = racing_policy(&swapper, |step| {
        (0..CALLS_PER_STEP)
            .map(|i| ToolCall::new(format!("l{step}-{i}"), "fs.list", json!({"path": "d"})))
            .collect()
    });

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;
    let flips = swapper.finish();

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let trace = std::fs::read_to_string(task.trace_path())?;
    let escapes = trace.matches(SECRET).count();
    assert_eq!(
        escapes, 0,
        "{escapes} listings showed the outside directory"
    );
    assert!(
        trace.contains("inside-entry"),
        "no listing succeeded: the race never ran ({flips} flips)"
    );
    Ok(())
}

/// A tar archive at `dest` holding one symbolic link `link` → `target`, made
/// with the real `tar`.
fn tar_with_link(dest: &Path, link: &str, target: &Path) -> Result<(), TestError> {
    let staging = tempfile::tempdir()?;
    let at = staging.path().join(link);
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent)?;
    }
    symlink(target, &at)?;
    let status = std::process::Command::new("tar")
        .arg("-cf")
        .arg(dest)
        .arg("-C")
        .arg(staging.path())
        .arg(link)
        .status()?;
    if !status.success() {
        return Err(format!("tar failed: {status}").into());
    }
    Ok(())
}

/// A runtime with two command tools and no `proc.run`: `unpack` extracts
/// `payload.tar`, `flood` prints 100,000 bytes of text (past the inline cap, so
/// it is saved as an artifact).
fn unpack_and_flood() -> Result<Runtime, TestError> {
    let unpack = CommandTool::new(
        ToolContract::new(
            "unpack",
            "Extract payload.tar here.",
            json!({"type": "object"}),
        )
        .effect(Effect::Reversible),
        ["tar", "-xf", "payload.tar"],
    )?;
    let flood = CommandTool::new(
        ToolContract::new("flood", "Print a lot.", json!({"type": "object"}))
            .effect(Effect::ReadOnly),
        ["sh", "-c", "yes agentry | head -c 100000"],
    )?;
    Ok(runtime_with(vec![Arc::new(unpack), Arc::new(flood)])?)
}

fn unpack_then_flood_policy() -> agentry::ScriptedPolicy {
    ScriptBuilder::new()
        .call("unpack", "unpack", json!({}))
        .call("big", "flood", json!({}))
        .call(
            "read",
            "fs.read",
            json!({"path": ".agentry/out/big.1.stdout"}),
        )
        .finish("done")
        .policy()
}

/// Issue 16, item 2: an unpacking tool plants `.agentry/out/big.1.stdout` as a
/// link to a file outside; agentry then saves call `big`'s large output. The
/// link is replaced, not followed: the outside file is intact, and the artifact
/// is a real file the model can read back by its reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_link_planted_by_a_tool_is_replaced_not_followed() -> Result<(), TestError> {
    let task =
        TestTask::new("unpack, then print a lot", &[])?.grant(&["unpack", "flood", "fs.read"]);
    let victim = task.outside().join("victim.txt");
    std::fs::write(&victim, "precious")?;
    tar_with_link(
        &task.workdir().join("payload.tar"),
        ".agentry/out/big.1.stdout",
        &victim,
    )?;

    let (outcome, events) = run_with_events(
        &unpack_and_flood()?,
        task.config(),
        unpack_then_flood_policy(),
    )
    .await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let after = std::fs::read(&victim)?;
    assert!(
        after == b"precious",
        "the file outside was overwritten ({} bytes)",
        after.len()
    );
    let results = tool_results(&events);
    let big = &results[1].1;
    assert_eq!(big.refs.len(), 1, "{big:?}");
    assert_eq!(big.refs[0].path, ".agentry/out/big.1.stdout");
    let artifact = task.workdir().join(&big.refs[0].path);
    assert!(std::fs::symlink_metadata(&artifact)?.file_type().is_file());
    assert_eq!(std::fs::metadata(&artifact)?.len(), 100_000);
    let read = &results[2].1;
    assert_eq!(
        read.data.as_ref().map(|d| d["bytes"].clone()),
        Some(json!(100_000)),
        "{read:?}"
    );
    Ok(())
}

/// The same, with the whole `.agentry` directory planted as a link to a
/// directory outside: the artifact is refused (a problem in the result, the
/// head still inline), and nothing is written outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_directory_planted_as_a_link_is_refused() -> Result<(), TestError> {
    let task =
        TestTask::new("unpack, then print a lot", &[])?.grant(&["unpack", "flood", "fs.read"]);
    let outside = task.outside();
    tar_with_link(&task.workdir().join("payload.tar"), ".agentry", &outside)?;

    let (_, events) = run_with_events(
        &unpack_and_flood()?,
        task.config(),
        unpack_then_flood_policy(),
    )
    .await?;

    let written: Vec<_> = walk(&outside);
    assert!(written.is_empty(), "written outside: {written:?}");
    let results = tool_results(&events);
    let big = &results[1].1;
    let data = big.data.clone().unwrap_or_default();
    assert_eq!(data["stdout_truncated"], true, "{big:?}");
    assert!(big.refs.is_empty(), "{big:?}");
    let problems = data["problems"].to_string();
    assert!(problems.contains("could not be stored"), "{problems}");
    Ok(())
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// `fs.write` refuses agentry's artifact directory, by its name or through a
/// link to it; `fs.read` still reads an artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tools_cannot_write_into_the_artifact_directory() -> Result<(), TestError> {
    let task = TestTask::new("tamper with artifacts", &[])?.grant(&["fs.*"]);
    std::fs::create_dir_all(task.workdir().join(".agentry/out"))?;
    std::fs::write(task.workdir().join(".agentry/out/c.1.stdout"), "agentry's")?;
    symlink(".agentry", task.workdir().join("alias"))?;
    let policy = ScriptBuilder::new()
        .call(
            "w1",
            "fs.write",
            json!({"path": ".agentry/out/c.1.stdout", "content": "forged"}),
        )
        .call(
            "w2",
            "fs.write",
            json!({"path": "alias/out/c.1.stdout", "content": "forged"}),
        )
        .call(
            "w3",
            "fs.write",
            json!({"path": ".agentry/new/x", "content": "x"}),
        )
        .call("r1", "fs.read", json!({"path": ".agentry/out/c.1.stdout"}))
        .finish("done")
        .policy();

    let (_, events) = run_with_events(&Runtime::with_builtins()?, task.config(), policy).await?;

    let codes: Vec<Option<ErrorCode>> = tool_results(&events)
        .iter()
        .map(|(_, r)| r.error_code())
        .collect();
    let eperm = Some(ErrorCode::Eperm);
    assert_eq!(codes[..4], [eperm, eperm, eperm, None]);
    assert_eq!(task.read_file(".agentry/out/c.1.stdout")?, "agentry's");
    assert!(!task.workdir().join(".agentry/new").exists());
    Ok(())
}

/// A task whose model runs `setup` with `proc.run`, then finishes, and whose
/// only check is `check`.
async fn finish_after(setup: &str, check: AcceptCheck) -> Result<agentry::RunOutcome, TestError> {
    let task = TestTask::new("set up, then finish", &[])?
        .grant(&["proc.run"])
        .accept(check);
    let policy = ScriptBuilder::new()
        .call("setup", "proc.run", json!({"argv": ["sh", "-c", setup]}))
        .finish("done")
        .policy();
    // Bounded: a check that blocks the host (the bug) fails here, it does not hang.
    let runtime = Runtime::with_builtins()?;
    let run = runtime.run(task.config(), policy);
    let outcome = tokio::time::timeout(Duration::from_secs(60), run).await;
    if outcome.is_err() {
        // Unblock a reader stuck on the FIFO, so the test process can exit.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(task.workdir().join("out.txt"));
    }
    Ok(outcome.map_err(|_| "the run did not finish within 60 s")??)
}

fn file_check(file: &str) -> AcceptCheck {
    AcceptCheck::File {
        file: file.to_string(),
        equals: Some("x".to_string()),
        contains: None,
    }
}

/// Issue 16, item 3: a FIFO at the checked path fails the check at once instead
/// of blocking the host forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_at_an_acceptance_path_fails_the_check() -> Result<(), TestError> {
    let outcome = finish_after("mkfifo out.txt", file_check("out.txt")).await?;
    assert_eq!(
        outcome.stop_reason,
        StopReason::VerificationMissing,
        "{}",
        outcome.detail
    );
    assert_eq!(
        outcome.checks[0].detail,
        "out.txt: not a regular file (a FIFO)"
    );
    Ok(())
}

/// A 1.5 GB sparse file fails the check by its size, unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_sparse_file_at_an_acceptance_path_fails_unread() -> Result<(), TestError> {
    let outcome = finish_after("truncate -s 1500M out.txt", file_check("out.txt")).await?;
    assert_eq!(
        outcome.stop_reason,
        StopReason::VerificationMissing,
        "{}",
        outcome.detail
    );
    assert_eq!(
        outcome.checks[0].detail,
        "out.txt: too large: 1572864000 bytes, at most 16777216 are read"
    );
    Ok(())
}

/// A link at the checked path is not followed, whether to `/dev/zero` or to a
/// file inside with the right content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_at_an_acceptance_path_fails_the_check() -> Result<(), TestError> {
    let outcome = finish_after("ln -s /dev/zero out.txt", file_check("out.txt")).await?;
    assert!(!outcome.checks[0].passed);
    assert_eq!(outcome.checks[0].detail, "out.txt: is a symbolic link");
    let outcome = finish_after("echo x > real; ln -s real out.txt", file_check("out.txt")).await?;
    assert_eq!(outcome.checks[0].detail, "out.txt: is a symbolic link");
    Ok(())
}

/// `secs` with a fraction unique to this invocation ("7122.418305"): the
/// process scans find this test's sleeps only, never those of another run of
/// the suite on the same machine.
fn unique_secs(secs: u32) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let mix = u64::from(std::process::id()) * 7_919
        + u64::from(nanos)
        + NEXT.fetch_add(1, Ordering::Relaxed) * 104_729;
    format!("{secs}.{:06}", mix % 1_000_000)
}

/// Alive (not zombie) processes whose command line is exactly `argv`.
fn alive_with_cmdline(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim().chars().next());
        if cmdline == want && state != Some('Z') {
            found.push(pid);
        }
    }
    found
}

/// Polls until none of `argvs` runs; after 5 s kills the survivors (so a failed
/// test leaves nothing behind) and fails naming them.
async fn assert_none_alive(argvs: &[&[&str]]) -> Result<(), TestError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let alive: Vec<(usize, i32)> = argvs
            .iter()
            .enumerate()
            .flat_map(|(i, argv)| {
                alive_with_cmdline(argv)
                    .into_iter()
                    .map(move |pid| (i, pid))
            })
            .collect();
        if alive.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            for (_, pid) in &alive {
                let _ = std::process::Command::new("kill")
                    .arg("-9")
                    .arg(pid.to_string())
                    .status();
            }
            let named: Vec<_> = alive.iter().map(|(i, pid)| (argvs[*i], pid)).collect();
            return Err(format!("survived the run: {named:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Issue 16, item 6: a tool's process that leaves the group (`setsid`) dies
/// with the call, even after its leader exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_process_that_left_the_group_dies_with_the_call() -> Result<(), TestError> {
    reap_orphans_here()?;
    let (a, b, c) = (unique_secs(7122), unique_secs(7123), unique_secs(7124));
    let task = TestTask::new("escape the group", &[])?.grant(&["proc.run"]);
    let policy = ScriptBuilder::new()
        .call(
            "p1",
            "proc.run",
            json!({"argv": ["sh", "-c", format!("setsid sleep {a} &")]}),
        )
        .call(
            "p2",
            "proc.run",
            json!({"argv": ["sh", "-c", format!("setsid sh -c 'sleep {c} & exec sleep {b}' & sleep 0.2")]}),
        )
        .finish("done")
        .policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_none_alive(&[&["sleep", &a], &["sleep", &b], &["sleep", &c]]).await
}

/// Issue 16, item 6: an acceptance command's background process dies with the
/// check (in the group or out of it), and the check is judged by its exit
/// status, not timed out waiting for the background process's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acceptance_commands_processes_die_with_the_check() -> Result<(), TestError> {
    reap_orphans_here()?;
    let (a, b) = (unique_secs(7177), unique_secs(7178));
    let task = TestTask::new("check", &[])?
        .accept(AcceptCheck::Command {
            argv: vec!["sh".into(), "-c".into(), format!("sleep {a} & exit 0")],
            timeout_ms: 60_000,
        })
        .accept(AcceptCheck::Command {
            argv: vec![
                "sh".into(),
                "-c".into(),
                format!("setsid sleep {b} & exit 0"),
            ],
            timeout_ms: 60_000,
        });
    let started = Instant::now();

    let outcome = Runtime::with_builtins()?
        .run(task.config(), ScriptBuilder::new().finish("done").policy())
        .await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::Done,
        "{:?}",
        outcome.checks
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_none_alive(&[&["sleep", &a], &["sleep", &b]]).await
}

/// An acceptance command's output is capped like a tool's: 50 MB on stderr goes
/// to an artifact on disk, the check's detail keeps a short head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acceptance_commands_output_is_capped() -> Result<(), TestError> {
    let task = TestTask::new("check", &[])?.accept(AcceptCheck::Command {
        argv: vec![
            "sh".into(),
            "-c".into(),
            "head -c 50000000 /dev/zero | tr '\\0' e >&2; exit 1".into(),
        ],
        timeout_ms: 60_000,
    });

    let outcome = Runtime::with_builtins()?
        .run(task.config(), ScriptBuilder::new().finish("done").policy())
        .await?;

    assert_eq!(outcome.stop_reason, StopReason::VerificationMissing);
    let detail = &outcome.checks[0].detail;
    assert!(
        detail.starts_with("command failed (exit status: 1): eee"),
        "{detail}"
    );
    assert!(detail.len() < 300, "{}", detail.len());
    let artifact = task.workdir().join(".agentry/out/accept-1.1.stderr");
    assert_eq!(std::fs::metadata(artifact)?.len(), 50_000_000);
    Ok(())
}
