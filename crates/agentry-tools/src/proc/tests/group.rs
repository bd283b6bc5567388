//! The process group: cancel, the grace before SIGKILL, dropping the call,
//! leftovers, and output held open by a process that left the group.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_and_reaps_the_whole_group() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let cancel = c.cancel.clone();
    let pid_file = dir.path().join("pid");
    let call = tokio::spawn(async move {
        let started = Instant::now();
        let result = ProcTool::default()
            .call(
                json!({"argv": ["sh", "-c", "echo $$ > pid; sleep 60 & sleep 60 & wait"]}),
                &c,
            )
            .await;
        (result, started.elapsed())
    });
    let pgid = read_pgid(&pid_file).await;
    assert_eq!(
        wait_group_size(pgid, 3).await.len(),
        3,
        "sh and two sleeps run"
    );
    let cancelled_at = Instant::now();
    cancel.cancel();
    let (result, _) = call.await.unwrap();
    let took = cancelled_at.elapsed();
    let err = result.unwrap_err();
    assert_eq!(err.code, ErrorCode::Ecanceled);
    assert!(err.message.contains("process group"), "{}", err.message);
    eprintln!("cancel path took {took:?}");
    // Far below the 60 s the group would live unkilled; ~5 ms unloaded.
    assert!(took < Duration::from_secs(5), "cancel took {took:?}");
    // Right after the call returned: nothing of the group, alive or zombie.
    assert_eq!(group_members(pgid), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_ignoring_group_is_killed_after_the_grace() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let cancel = c.cancel.clone();
    let call = tokio::spawn(async move {
        ProcTool::default()
            .call(
                json!({"argv": ["sh", "-c",
                    "trap '' TERM; echo $$ > pid; sh -c \"trap '' TERM; sleep 60\" & wait"]}),
                &c,
            )
            .await
    });
    let pgid = read_pgid(&dir.path().join("pid")).await;
    // Both shells ignore TERM once the inner one has started its sleep.
    assert_eq!(
        wait_group_size(pgid, 3).await.len(),
        3,
        "sh, sh and sleep run"
    );
    let cancelled_at = Instant::now();
    cancel.cancel();
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Ecanceled);
    // SIGTERM is ignored, so the group dies only from the SIGKILL sent after the
    // grace. The upper bound only says it did not wait for the 60 s sleep
    // (unloaded, the whole path is ~45 ms).
    let took = cancelled_at.elapsed();
    eprintln!("cancel path with SIGKILL took {took:?}");
    assert!(took >= DEFAULT_TERM_GRACE, "cancel took {took:?}");
    assert!(took < Duration::from_secs(5), "cancel took {took:?}");
    assert_eq!(wait_group_gone(pgid, Duration::from_secs(1)).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_call_kills_the_group() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let tool = ProcTool::default();
    let call = tool.call(
        json!({"argv": ["sh", "-c", "echo $$ > pid; sleep 60 & sleep 60 & wait"]}),
        &c,
    );
    // The future is dropped at the timeout, without its cancel path running.
    let pid_file = dir.path().join("pid");
    let (timed_out, pgid) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(300), call),
        read_pgid(&pid_file)
    );
    assert!(timed_out.is_err());
    assert_eq!(wait_group_gone(pgid, Duration::from_secs(1)).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_die_when_the_leader_exits() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // The background sleep also holds stdout open: without the group kill,
    // reading to EOF would take 60 s.
    let out = run_ok(
        json!({"argv": ["sh", "-c", "echo $$; sleep 60 &"]}),
        &ctx(dir.path()),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.data["exit_code"], 0);
    let pgid: i32 = out.data["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert_eq!(group_members(pgid), vec![]);
}

/// Kills the process whose pid is in a file when dropped: the escaped sleep
/// below, which nothing else can find, so a test leaves nothing behind.
struct KillOnDrop(std::path::PathBuf);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(&self.0)
            && let Ok(pid) = text.trim().parse::<i32>()
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The escaped process holds stdout open for a minute; the call ends about
/// `DRAIN_AFTER_EXIT` (1 s) after its leader (0.2 s), well inside the bound,
/// which only tells a cut pipe from one read to the escaped process's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_held_open_by_an_escaped_process_is_cut_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let _escaped = KillOnDrop(dir.path().join("escaped.pid"));
    let started = Instant::now();
    // `setsid` leaves the group and `env -i` drops the marks the stray sweep
    // goes by: nothing can find it for us, and it keeps stdout open.
    let out = run_ok(
        json!({"argv": ["sh", "-c",
            "echo before; env -i setsid sh -c 'echo $$ > escaped.pid; exec sleep 60' & sleep 0.2"]}),
        &ctx(dir.path()),
    )
    .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(out.data["stdout"], "before\n");
    let problems = out.data["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].as_str().unwrap().contains("still open"),
        "{problems:?}"
    );
    assert!(dir.path().join("escaped.pid").exists(), "it never escaped");
}

/// A sweep that is still making out an unreadable child (here one that cleared
/// its environment, so it stays unreadable) when the same call runs again — as
/// a retry does, with the same run and call ids — must not touch the new spawn:
/// strays are told apart by the spawn's own id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lingering_sweep_spares_the_next_spawn_of_the_same_call() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    // The stray (`env -i` leaves it no environment) keeps the sweep unsure,
    // and it holds no pipe of ours, so the call returns at once.
    let out = run_ok(
        json!({"argv": ["sh", "-c", "env -i setsid sleep 3 </dev/null >/dev/null 2>&1 & sleep 0.1; echo $!"]}),
        &c,
    )
    .await;
    let stray: i32 = out.data["stdout"].as_str().unwrap().trim().parse().unwrap();
    // Same context, same ids; long enough to overlap the first sweep's wait.
    let again = run_ok(json!({"argv": ["sh", "-c", "sleep 0.4; echo alive"]}), &c).await;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(stray),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(again.data["stdout"], "alive\n", "{}", again.data);
    assert_eq!(again.data["exit_code"], 0);
}
