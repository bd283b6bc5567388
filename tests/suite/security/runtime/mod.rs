//! Security tests: see `mod.rs`. Hostile task files and hostile embedders'
//! inputs against the runtime: values that overflowed a clock, ids that read as
//! paths, a trace that grew with the square of the world, and runs resumed by
//! two owners at once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use agentry::{Driver, RunConfig, Runtime, RuntimeError, StopReason, TaskError, TaskSpec};
use agentry_test_support::{ScriptBuilder, TestError, TestTask};
use proptest::prelude::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Issue 16 item 9: extreme durations and counts in a task file.
// ---------------------------------------------------------------------------

/// A TOML value a careless or hostile task file might hold in a duration or
/// count field, as TOML text.
fn odd_value() -> impl Strategy<Value = String> {
    let ints = prop_oneof![
        Just(0i64),
        Just(1),
        Just(-1),
        Just(i64::MAX),
        Just(i64::MIN),
        Just(1 << 53),
        Just((1 << 53) - 1),
        Just(u32::MAX as i64 + 1),
        any::<i64>(),
    ]
    .prop_map(|n| n.to_string());
    let floats = prop_oneof![
        Just("1e20"),
        Just("nan"),
        Just("inf"),
        Just("-inf"),
        Just("0.0"),
        Just("-0.0"),
        Just("1e-9"),
        Just("1.7976931348623157e308"),
        Just("1.8446744073709552e19"),
        Just("1e12"),
        Just("0.5"),
    ]
    .prop_map(str::to_string);
    let durations = prop_oneof![
        Just("9999999999999999999s".to_string()),
        Just("18446744073709551615s".to_string()),
        Just("99999999999999999999999s".to_string()),
        Just("584942417355y".to_string()),
        Just("0s".to_string()),
        Just("1ns".to_string()),
        Just("365d".to_string()),
        Just("366d".to_string()),
        Just(String::new()),
        Just("-1s".to_string()),
        Just("soon".to_string()),
        any::<u64>().prop_map(|n| format!("{n}ms")),
        any::<u64>().prop_map(|n| format!("{n}s")),
        any::<u32>().prop_map(|n| format!("{n}d")),
    ]
    .prop_map(|d| format!("{d:?}"));
    let others =
        prop_oneof![Just("true"), Just("[]"), Just("{}"), Just("[1, 2]")].prop_map(str::to_string);
    prop_oneof![3 => ints, 2 => floats, 4 => durations, 1 => others]
}

/// Every duration and count field of task.toml, in file order.
const FIELDS: usize = 13;

/// task.toml text with `values[i]` (TOML text) in field `i`, absent for `None`.
fn task_text(values: &[Option<String>]) -> String {
    let put = |i: usize, key: &str| {
        values
            .get(i)
            .and_then(Option::as_ref)
            .map(|v| format!("{key} = {v}\n"))
            .unwrap_or_default()
    };
    [
        "goal = \"g\"\n[budget]\n".to_string(),
        put(0, "max_steps"),
        put(1, "max_tool_calls"),
        put(2, "max_tokens"),
        put(3, "max_cost"),
        put(4, "deadline"),
        put(5, "max_retries"),
        put(6, "max_ticks"),
        "[tools]\ngrant = [\"fs.read\"]\n".to_string(),
        put(7, "approval_timeout"),
        "[[tools.command]]\nname = \"x.y\"\ndescription = \"d\"\nargv = [\"true\"]\n".to_string(),
        put(8, "timeout"),
        put(9, "max_retries"),
        "[driver]\nmode = \"events\"\n".to_string(),
        put(10, "every"),
        "[[accept]]\ncommand = \"true\"\n".to_string(),
        put(11, "timeout"),
        "[progress]\n".to_string(),
        put(12, "window"),
    ]
    .concat()
}

/// Every field at once, each absent or odd: mostly refused, a parse check.
fn odd_task() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::option::weighted(0.25, odd_value()), FIELDS)
        .prop_map(|values| task_text(&values))
}

/// One field odd, the others absent: often loads, so the run starts on it.
fn one_odd_field() -> impl Strategy<Value = String> {
    (0..FIELDS, odd_value()).prop_map(|(i, v)| {
        let mut values = vec![None; FIELDS];
        values[i] = Some(v);
        task_text(&values)
    })
}

/// Parses `text` as a task and, when it loads, starts it, aborts it and waits:
/// the run's actors compute every instant from the task's durations at start.
/// Returns the parse error's message, if any.
fn load_and_start(text: &str, dir: &Path) -> Result<Option<String>, TestError> {
    let task = match TaskSpec::parse(text, dir) {
        Ok(task) => task,
        Err(TaskError::Invalid { message, .. }) => return Ok(Some(message)),
        Err(other) => return Err(format!("not a typed task error: {other:?}").into()),
    };
    let workdir = tempfile::tempdir()?;
    let config = task.run_config(workdir.path().to_path_buf());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let runtime = task.runtime()?;
        let handle = runtime
            .start(config, ScriptBuilder::new().finish("ok").policy())
            .await?;
        handle.abort();
        // A panic in any actor shows here as a lost outcome.
        let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
        assert!(
            matches!(
                outcome.stop_reason,
                StopReason::UserAbort | StopReason::Done
            ),
            "{text}: {}",
            outcome.detail
        );
        Ok::<_, TestError>(())
    })?;
    Ok(None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever a task file says in its duration and count fields, parsing and
    /// validation return a task or a typed error naming the field, and a task
    /// that loads starts and stops without a panic.
    #[test]
    fn task_files_with_extreme_values_load_or_fail_typed_and_never_panic(
        text in prop_oneof![odd_task(), one_odd_field()]
    ) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let run = std::panic::catch_unwind(|| load_and_start(&text, dir.path()));
        match run {
            Ok(Ok(Some(message))) => prop_assert!(
                message.contains('.') || message.starts_with("not valid TOML"),
                "the error names no field: {message}"
            ),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => prop_assert!(false, "{text}\n{e}"),
            Err(_) => prop_assert!(false, "panicked on:\n{text}"),
        }
    }
}

/// The values of the report, each bounded with an error naming the bound.
#[test]
fn extreme_durations_and_counts_are_refused_naming_the_field_and_bound() -> Result<(), TestError> {
    let cases = [
        (
            "[driver]\nevery = \"9999999999999999999s\"",
            "driver.every: at most 365 days",
        ),
        (
            "[budget]\ndeadline = \"366d\"",
            "budget.deadline: at most 365 days",
        ),
        (
            "[tools]\napproval_timeout = \"9999999999999999999s\"",
            "tools.approval_timeout: at most 365 days",
        ),
        (
            "[[accept]]\ncommand = \"true\"\ntimeout = \"400d\"",
            "accept[0].timeout: at most 365 days",
        ),
        (
            "[budget]\nmax_steps = 9007199254740992",
            "budget.max_steps: at most 9007199254740991, found 9007199254740992",
        ),
        (
            "[progress]\nwindow = 9223372036854775807",
            "progress.window: at most 9007199254740991",
        ),
        (
            "[budget]\nmax_cost = 1e20",
            "budget.max_cost: at most 1000000000000 (money is counted in millionths), found 1e20",
        ),
        (
            "[budget]\nmax_cost = nan",
            "budget.max_cost: expected a positive number, found NaN",
        ),
        (
            // What a JSON client's u64::MAX becomes through a float: shown as the
            // float it is, never as an integer nobody wrote.
            "[budget]\nmax_steps = 1.8446744073709552e19",
            "budget.max_steps: expected a positive integer, found 1.8446744073709552e19",
        ),
    ];
    for (body, want) in cases {
        let text = format!("goal = \"g\"\n{body}\n");
        match TaskSpec::parse(&text, Path::new("/nowhere/t")) {
            Err(TaskError::Invalid { message, .. }) => {
                assert!(
                    message.contains(want),
                    "{body:?}: got {message:?}, want {want:?}"
                );
                assert!(!message.contains("18446744073709552000"), "{message}");
            }
            other => panic!("{body:?}: expected an invalid task, got {other:?}"),
        }
    }
    // A large money amount within the bound is taken as written.
    let task = TaskSpec::parse(
        "goal = \"g\"\n[budget]\nmax_cost = 1e9\n",
        Path::new("/nowhere/t"),
    )?;
    assert_eq!(task.limits.max_cost_micros, Some(1_000_000_000_000_000));
    Ok(())
}

/// The embedding API takes any `Duration`: a tick period, a deadline and a
/// timer delay at the top of their ranges start, stop and report like any run
/// (adding them to a clock used to panic the conductor).
#[tokio::test]
async fn durations_at_the_top_of_their_range_never_panic_a_run() -> Result<(), TestError> {
    let task = TestTask::new("tick forever", &[])?;
    let mut config: RunConfig = task.config();
    config.driver = Driver::Events;
    config.tick_every = Some(Duration::MAX);
    config.limits.deadline_ms = Some(u64::MAX);
    let runtime = Runtime::with_builtins()?;
    let handle = runtime
        .start(config, ScriptBuilder::new().finish("ok").policy())
        .await?;
    handle.after(Duration::MAX, "never", json!({}));
    handle.abort();
    let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
    assert!(
        matches!(
            outcome.stop_reason,
            StopReason::UserAbort | StopReason::Done
        ),
        "{}",
        outcome.detail
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Issue 16 item 11: run ids and the trace's file-reference map.
// ---------------------------------------------------------------------------

/// A run id that is empty, blank, or reads as a path is refused by the runtime
/// (every embedder, not just the CLI), naming the id and what is wrong.
#[tokio::test]
async fn run_ids_that_are_empty_blank_or_paths_are_refused() -> Result<(), TestError> {
    let task = TestTask::new("g", &[])?;
    let runtime = Runtime::with_builtins()?;
    for id in ["", " ", "a b", "../x", "a/b", "a\\b", "..", "tab\there"] {
        let mut config = task.config();
        config.run_id = Some(id.to_string());
        match runtime
            .start(config, ScriptBuilder::new().finish("ok").policy())
            .await
        {
            Err(RuntimeError::InvalidRunId { run_id, message }) => {
                assert_eq!(run_id, id);
                assert!(!message.is_empty());
            }
            other => panic!("{id:?}: expected InvalidRunId, got {other:?}"),
        }
    }
    let mut config = task.config();
    config.run_id = Some("ok-id_1.2:3".into());
    let outcome = runtime
        .run(config, ScriptBuilder::new().finish("ok").policy())
        .await?;
    assert_eq!(outcome.run_id, "ok-id_1.2:3");
    Ok(())
}

/// A run that writes one new file per step: each step line of the trace
/// carries only the file that step changed (not the whole map again), and the
/// changes folded in order give the stop line's full map, which is the run's
/// final world.
#[tokio::test]
async fn the_trace_writes_only_the_refs_each_step_changed() -> Result<(), TestError> {
    const FILES: usize = 40;
    let task = TestTask::new("write files", &[("seed.txt", "seed")])?
        .grant(&["fs.read", "fs.write"])
        .window(0)
        .max_steps(FILES as u64 + 3)
        .trace();
    let mut script = ScriptBuilder::new().call("r0", "fs.read", json!({"path": "seed.txt"}));
    for k in 0..FILES {
        script = script.call(
            &format!("w{k}"),
            "fs.write",
            json!({"path": format!("f{k}.txt"), "content": format!("{k}")}),
        );
    }
    let outcome = Runtime::with_builtins()?
        .run(task.config(), script.finish("ok").policy())
        .await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);

    let lines = task.read_trace()?;
    let steps: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "step").collect();
    assert_eq!(steps.len(), FILES + 2);
    let mut folded: BTreeMap<String, Value> = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        let world = &step["state"]["world"];
        assert!(
            world.get("refs").is_none(),
            "step {i} repeats the map: {world}"
        );
        let changed = world["refs_changed"].as_object().ok_or("no refs_changed")?;
        let want: Vec<String> = match i {
            0 => vec!["seed.txt".into()],
            i if i <= FILES => vec![format!("f{}.txt", i - 1)],
            _ => vec![],
        };
        assert_eq!(
            changed.keys().cloned().collect::<Vec<_>>(),
            want,
            "step {}",
            i + 1
        );
        folded.extend(changed.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let stop = lines.last().ok_or("empty trace")?;
    assert_eq!(stop["kind"], "stop");
    let full: BTreeMap<String, Value> = serde_json::from_value(stop["world"]["refs"].clone())?;
    assert_eq!(full, folded);
    assert_eq!(full.len(), FILES + 1);
    let final_world: BTreeMap<String, Value> =
        serde_json::from_value(serde_json::to_value(&outcome.state.world.refs)?)?;
    assert_eq!(full, final_world);
    Ok(())
}

// Issue 16 item 7: a run resumed while it still runs.
mod memory;
mod ownership;
