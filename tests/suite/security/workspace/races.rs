//! File tools under a model racing them: a path swapped between a file or a
//! directory and a link to the outside, thousands of times, mid-run.

use super::*;

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

/// Calls the trace shows refused with `EPERM` (a path through a link to the
/// outside).
fn refusals(trace: &str) -> usize {
    trace.matches(r#""code":"EPERM""#).count()
}

fn race_task(grants: &[&str]) -> Result<TestTask, TestError> {
    Ok(TestTask::new("race the file tools", &[])?
        .grant(grants)
        .max_steps(RACE_STEPS + 2)
        .window(0)
        // Denials are the expected outcome of many racing steps.
        .max_denied(0)
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
    let refused = refusals(&trace);
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
    // Both states were met: writes landed inside and writes were refused at
    // the link, as the read test requires.
    let trace = std::fs::read_to_string(task.trace_path())?;
    let (written, refused) = (trace.matches(r#""ok":true"#).count(), refusals(&trace));
    assert!(
        written > 0 && refused > 0,
        "{written} writes inside, {refused} refused: the race never ran ({flips} flips)"
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
    // Both states were met: listings of the directory and listings refused
    // at the link, as the read test requires.
    let (listed, refused) = (trace.matches("inside-entry").count(), refusals(&trace));
    assert!(
        listed > 0 && refused > 0,
        "{listed} listings inside, {refused} refused: the race never ran ({flips} flips)"
    );
    Ok(())
}
