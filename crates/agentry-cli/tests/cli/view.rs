//! `agentry view`: the page is opened in a real headless Chromium (driven over
//! the DevTools protocol, `view/cdp.rs`), which reads its DOM, clicks a step and
//! collects every error the page logged. The traces come from real runs.
//!
//! The browser tests are ignored in a plain `cargo test` (they need Debian's
//! `chromium`); `.ci/run` installs it and runs them with `--ignored`, where a
//! missing browser fails them.

pub(super) mod cdp;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry::protocol::trace::TraceLine;
use agentry::{Effect, ErrorCode, Idempotency, StopReason, ToolError};
use agentry_test_support::{CountingTool, FlakyTool, ScriptBuilder, TestTask, runtime_with};
use serde_json::{Value, json};

use self::cdp::Browser;
use crate::*;

/// One browser at a time: each is a few processes, and the machine is small.
static ONE_BROWSER: Mutex<()> = Mutex::new(());

/// How long a page may take to load and render here: far above what it takes.
const LOAD: Duration = Duration::from_secs(120);

fn view(args: &[&str]) -> std::process::Output {
    let mut all = vec!["view"];
    all.extend_from_slice(args);
    agentry(&all)
}

/// Writes the page for `trace` to `html`; panics unless the command succeeds.
fn render(trace: &Path, html: &Path) {
    let out = view(&[path_str(trace), "-o", path_str(html)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), path_str(html));
}

/// Opens `html` in a fresh browser and waits until the page says it rendered.
fn load(html: &Path) -> (std::sync::MutexGuard<'static, ()>, Browser, Duration) {
    let guard = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let mut browser = Browser::launch();
    let started = Instant::now();
    browser.open(html);
    browser.wait_for("document.body && document.body.dataset.ready === '1'", LOAD);
    let took = started.elapsed();
    (guard, browser, took)
}

fn assert_no_errors(browser: &Browser) {
    let errors = browser.errors();
    assert!(errors.is_empty(), "the page logged errors: {errors:#?}");
}

/// Runs a task directory with `--trace`; returns the trace's path.
fn traced_run(task: &Path, dir: &Path, expect: i32) -> PathBuf {
    let trace = dir.join("run.jsonl");
    let (code, out) = agentry_json(&[
        "run",
        path_str(task),
        "--no-store",
        "--workdir",
        path_str(&dir.join("work")),
        "--trace",
        path_str(&trace),
    ]);
    assert_eq!(code, expect, "{out}");
    trace
}

fn lines(trace: &Path) -> Vec<TraceLine> {
    std::fs::read_to_string(trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The list's rows as rendered, top to bottom: `step:N`, `in:SEQ`, `stop`.
fn rendered_rows(browser: &mut Browser) -> Vec<String> {
    let rows = browser.eval(
        "[...document.querySelectorAll('#list .row')]
           .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
           .map(r => r.dataset.step ? 'step:' + r.dataset.step : r.dataset.input ? 'in:' + r.dataset.input : r.querySelector('.n').textContent)",
    );
    serde_json::from_value(rows).unwrap()
}

/// Clicks step `step`'s row, waits until the detail panel shows that step
/// (not one shown before the click), and returns the panel's text.
fn click_step(browser: &mut Browser, step: &str) -> String {
    browser.click(&format!("#list .row[data-step='{step}']"));
    browser.wait_for(
        &format!("document.getElementById('detail').dataset.step === '{step}'"),
        LOAD,
    );
    browser
        .eval("document.getElementById('detail').textContent")
        .as_str()
        .unwrap()
        .to_string()
}

/// A tree run (the CLI writes the root's trace; its children are drawn from
/// the root's agent.spawn and agent.wait results): a lane per agent, children
/// after their parent with their budgets, the stop reason, and a click on a
/// step shows its decision.
#[test]
#[ignore = "needs chromium (Debian package), installed by .ci/run"]
fn a_tree_run_draws_a_lane_per_agent_and_a_click_shows_the_decision() {
    let task = task_dir(
        "goal = \"delegate twice\"\n[budget]\nmax_steps = 10\ndeadline = \"30s\"\n[tools]\ngrant = [\"agent\"]\n",
        r#"{"turns": [
            {"tool_calls": [
                {"id": "s1", "name": "agent.spawn", "arguments": {"name": "alpha", "goal": "one", "budget": {"max_steps": 3}, "script": {"turns": [{"final": "a done"}]}}},
                {"id": "s2", "name": "agent.spawn", "arguments": {"name": "beta", "goal": "two", "budget": {"max_steps": 2}, "script": {"turns": [{"final": "b done"}]}}}
            ]},
            {"tool_calls": [
                {"id": "wa", "name": "agent.wait", "arguments": {"child_id": "alpha"}},
                {"id": "wb", "name": "agent.wait", "arguments": {"child_id": "beta"}}
            ]},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "both"}}]}
        ]}"#,
    );
    let tmp = tempfile::tempdir().unwrap();
    let trace = traced_run(task.path(), tmp.path(), 0);
    let html = tmp.path().join("tree.html");
    render(&trace, &html);

    let (_guard, mut browser, _) = load(&html);
    assert_eq!(browser.eval("document.body.dataset.lanes"), "3");
    let lanes = browser.eval(
        "[...document.querySelectorAll('.lane')].map(l => l.querySelector('.name').textContent)",
    );
    let lanes: Vec<String> = serde_json::from_value(lanes).unwrap();
    assert_eq!(lanes.len(), 3, "{lanes:?}");
    assert!(
        lanes[0].starts_with(&format!(
            "{}done",
            task.path().file_name().unwrap().to_string_lossy()
        )),
        "{lanes:?}"
    );
    assert!(
        lanes[1].contains("└ alpha") && lanes[1].contains("steps 1/3"),
        "{lanes:?}"
    );
    assert!(
        lanes[2].contains("└ beta") && lanes[2].contains("steps 1/2"),
        "{lanes:?}"
    );
    assert_eq!(
        browser.eval("document.getElementById('stop-reason').textContent"),
        "done"
    );
    assert_eq!(
        browser.eval("document.querySelector('#list').dataset.steps"),
        "3"
    );

    browser.click("#list .row[data-step='2']");
    browser.wait_for(
        "document.getElementById('detail').dataset.step === '2'",
        LOAD,
    );
    let decision = browser.eval("document.querySelector('#detail .decision').textContent");
    let decision = decision.as_str().unwrap();
    assert!(
        decision.contains("agent.wait") && decision.contains("\"child_id\": \"alpha\""),
        "{decision}"
    );

    // A child's lane: clicking it shows what its parent's calls reported.
    browser.click(".lane[data-lane='1'] .name");
    browser.wait_for(
        "document.querySelector('#detail h2').textContent === 'Child alpha'",
        LOAD,
    );
    let shown = browser.eval("document.getElementById('detail').textContent");
    assert!(
        shown
            .as_str()
            .unwrap()
            .contains("\"stop_reason\": \"done\""),
        "{shown}"
    );
    assert_no_errors(&browser);
}

/// A run with a retried call, a failed one, an approval and a user message:
/// the inputs are rows exactly where the trace applied them (and marks on the
/// lane), the calls carry their outcome class, latency and tries.
#[test]
#[ignore = "needs chromium (Debian package), installed by .ci/run"]
fn approvals_and_inputs_are_marked_where_they_were_applied() {
    let task = TestTask::new("pay the invoice", &[])
        .unwrap()
        .grant(&["fetch", "pay", "fs.read"])
        .trace();
    let trace = task.trace_path();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(approved_run(&task));
    let html = task.root().join("run.html");
    render(&trace, &html);

    // The order the trace applied them in: the page must show the same.
    let expected: Vec<String> = lines(&trace)
        .iter()
        .map(|l| match l {
            TraceLine::Step(s) => format!("step:{}", s.step),
            TraceLine::Input(i) => format!("in:{}", i.seq),
            TraceLine::Stop(_) => "stop".to_string(),
        })
        .collect();
    assert!(
        expected.iter().filter(|r| r.starts_with("in:")).count() >= 2,
        "{expected:?}"
    );

    let (_guard, mut browser, _) = load(&html);
    assert_eq!(rendered_rows(&mut browser), expected);
    let inputs = browser
        .eval("[...document.querySelectorAll('#list .row.input .what')].map(r => r.textContent)");
    let inputs = inputs.to_string();
    assert!(inputs.contains("approvalapproved p1"), "{inputs}");
    assert!(
        inputs.contains("messagemessage: use the blue account"),
        "{inputs}"
    );
    assert_eq!(
        browser.eval("document.querySelector(\".lane[data-lane='0'] canvas\").dataset.inputs"),
        "2"
    );
    let chips = browser.eval(
        "[...document.querySelectorAll('#list .chip')].map(c => c.className + ' ' + c.textContent)",
    );
    let chips = chips.to_string();
    assert!(
        chips.contains("chip ok fetch") && chips.contains("×2"),
        "a retried call shows its tries: {chips}"
    );
    assert!(
        chips.contains("chip bad_call fs.read") || chips.contains("chip refused fs.read"),
        "{chips}"
    );

    // The first row is selected on load: a later step first, then back.
    let steps: Vec<&str> = expected
        .iter()
        .filter_map(|r| r.strip_prefix("step:"))
        .collect();
    let detail = click_step(&mut browser, steps[1]);
    assert!(
        detail.contains("fs.read") && detail.contains("missing.txt"),
        "{detail}"
    );
    let detail = click_step(&mut browser, steps[0]);
    assert!(
        detail.contains("pay") && detail.contains("fetch"),
        "{detail}"
    );
    assert!(detail.contains("State changes"), "{detail}");
    assert_no_errors(&browser);
}

/// Step 1 calls `fetch` (fails once with EUNAVAIL, then succeeds on the retry)
/// and `pay` (irreversible: it waits for a human, who says something and
/// approves it); step 2 reads a file that is not there; step 3 finishes.
async fn approved_run(task: &TestTask) {
    let fetch = FlakyTool::new(
        "fetch",
        1,
        ToolError::new(ErrorCode::Eunavail, "upstream is down"),
    )
    .idempotency(Idempotency::Idempotent);
    let pay = CountingTool::new("pay").effect(Effect::IrreversibleExternal);
    let runtime = runtime_with(vec![Arc::new(fetch), Arc::new(pay)]).unwrap();
    let policy = ScriptBuilder::new()
        .call("f1", "fetch", json!({}))
        .and_call("p1", "pay", json!({"value": 42}))
        .call("r1", "fs.read", json!({"path": "missing.txt"}))
        .finish("paid")
        .policy();
    let handle = runtime.start(task.config(), policy).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while handle.pending_approvals().await.is_empty() {
        assert!(Instant::now() < deadline, "pay never waited for approval");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.send_message("use the blue account").unwrap();
    handle.approve("p1").await.unwrap();
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
}

/// A 10,000-step trace (real step records from a real run of examples/sum,
/// renumbered and retimed): it loads with no error, the page reports 10,000
/// steps, only the visible rows exist, and the last step can be scrolled to and
/// opened.
#[test]
#[ignore = "needs chromium (Debian package), installed by .ci/run"]
fn a_ten_thousand_step_trace_loads_without_errors_and_renders_only_visible_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let real = traced_run(&root().join("examples/sum"), tmp.path(), 0);
    let trace = tmp.path().join("big.jsonl");
    write_long_trace(&lines(&real), 10_000, &trace);
    let html = tmp.path().join("big.html");
    render(&trace, &html);
    let size = std::fs::metadata(&html).unwrap().len();

    let (_guard, mut browser, took) = load(&html);
    assert_eq!(browser.eval("document.body.dataset.steps"), "10000");
    assert_eq!(
        browser.eval("document.querySelector('#list').dataset.steps"),
        "10000"
    );
    let rows = browser
        .eval("document.querySelectorAll('#list .row').length")
        .as_u64()
        .unwrap();
    assert!(
        rows > 0 && rows < 200,
        "only the visible rows exist, not {rows}"
    );
    let render_ms: f64 = browser
        .eval("document.body.dataset.renderMs")
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // Expected well under a second; the bound only catches a page that freezes.
    assert!(render_ms < 30_000.0, "rendering took {render_ms} ms");
    assert!(
        browser
            .console_logs()
            .iter()
            .any(|l| l.contains("10000 steps")),
        "{:?}",
        browser.console_logs()
    );
    eprintln!("10,000 steps: page {size} bytes, rendered in {render_ms} ms, loaded in {took:?}");

    browser.eval("(() => { const l = document.getElementById('list'); l.scrollTop = l.scrollHeight; return true; })()");
    browser.wait_for(
        "!!document.querySelector(\"#list .row[data-step='10000']\")",
        LOAD,
    );
    browser.click("#list .row[data-step='10000']");
    browser.wait_for(
        "document.getElementById('detail').dataset.step === '10000'",
        LOAD,
    );
    assert_no_errors(&browser);
}

/// `n` steps: the real run's `fs.write` step, renumbered, retimed (3 ms each)
/// and with the budget counted down; then the real stop line, counted up.
fn write_long_trace(real: &[TraceLine], n: u64, path: &Path) {
    let step = real
        .iter()
        .find_map(|l| {
            if let TraceLine::Step(s) = l
                && s.results.iter().any(|r| r.tool == "fs.write")
            {
                Some(s.clone())
            } else {
                None
            }
        })
        .unwrap();
    let mut end = real
        .iter()
        .find_map(|l| {
            if let TraceLine::Stop(e) = l {
                Some(e.clone())
            } else {
                None
            }
        })
        .unwrap();
    let start = step.at - step.budget_before.elapsed_ms;
    let mut out = String::new();
    for i in 1..=n {
        let mut s = step.clone();
        s.step = i;
        s.state_version = i;
        s.state.version = i;
        s.budget_before.elapsed_ms = (i - 1) * 3;
        s.budget_after.elapsed_ms = i * 3;
        for b in [&mut s.budget_before, &mut s.budget_after] {
            b.limits.max_steps = Some(n);
            b.limits.max_tool_calls = Some(n);
            b.limits.deadline_ms = None;
        }
        s.budget_after.spent.steps = i;
        s.budget_after.spent.tool_calls = i;
        s.budget_after.remaining.steps_left = Some(n - i);
        s.budget_after.remaining.tool_calls_left = Some(n - i);
        s.budget_after.remaining.wall_ms_left = None;
        s.at = start + i * 3;
        out.push_str(&serde_json::to_string(&TraceLine::Step(s)).unwrap());
        out.push('\n');
    }
    end.steps = n;
    end.tool_calls = n;
    end.at = start + n * 3;
    end.budget = real_last_budget(&end, n);
    out.push_str(&serde_json::to_string(&TraceLine::Stop(end)).unwrap());
    out.push('\n');
    std::fs::write(path, out).unwrap();
}

fn real_last_budget(
    end: &agentry::protocol::trace::TraceEnd,
    n: u64,
) -> agentry::protocol::budget::BudgetSnapshot {
    let mut b = end.budget;
    b.limits.max_steps = Some(n);
    b.limits.max_tool_calls = Some(n);
    b.limits.deadline_ms = None;
    b.spent.steps = n;
    b.spent.tool_calls = n;
    b.remaining.steps_left = Some(0);
    b.remaining.tool_calls_left = Some(0);
    b.remaining.wall_ms_left = None;
    b.elapsed_ms = n * 3;
    b
}

const BREAKOUT: &str = "</script><script>document.body.setAttribute('data-pwned','1')</script><!--";

fn breakout_trace(dir: &Path) -> PathBuf {
    let script = json!({"turns": [
        {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": BREAKOUT}}]}
    ]});
    let task = task_dir("goal = \"say </script>\"\n", &script.to_string());
    traced_run(task.path(), dir, 0)
}

/// A trace holding `</script>` (here the model's answer) cannot end the data's
/// script element: the page has exactly its own two script ends.
#[test]
fn the_embedded_trace_cannot_close_its_script_element() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = breakout_trace(tmp.path());
    assert!(
        std::fs::read_to_string(&trace)
            .unwrap()
            .contains("</script>")
    );
    let html = tmp.path().join("page.html");
    render(&trace, &html);
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(
        page.matches("</script").count(),
        2,
        "only the page's own script ends"
    );
    assert!(
        !page.contains("data-pwned','1')</"),
        "the answer is not in the page as markup"
    );
}

/// ... and in a browser the answer is shown as text, nothing of it runs.
#[test]
#[ignore = "needs chromium (Debian package), installed by .ci/run"]
fn a_trace_holding_script_tags_shows_them_as_text_in_the_browser() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = breakout_trace(tmp.path());
    let html = tmp.path().join("page.html");
    render(&trace, &html);
    let (_guard, mut browser, _) = load(&html);
    assert_eq!(
        browser.eval("document.body.dataset.pwned === undefined"),
        json!(true)
    );
    assert_eq!(
        browser.eval("document.getElementById('stop-reason').textContent"),
        "done"
    );
    let answer = browser.eval("document.querySelector('#head .answer').textContent");
    assert_eq!(answer, Value::String(format!("answer: {BREAKOUT}")));
    assert_no_errors(&browser);
}

/// A bad line is named by file and line; an empty trace and a missing one are
/// errors; a failed `view` leaves the output as it was and no temp file.
#[test]
fn bad_input_is_named_and_nothing_is_half_written() {
    let tmp = tempfile::tempdir().unwrap();
    let real = traced_run(&root().join("examples/sum"), tmp.path(), 0);
    let text = std::fs::read_to_string(&real).unwrap();
    let mut broken: Vec<&str> = text.lines().collect();
    broken.insert(2, "{\"kind\": \"step\", \"run_id\": ");
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, broken.join("\n")).unwrap();
    let html = tmp.path().join("out.html");
    std::fs::write(&html, "old").unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();

    let out = view(&[path_str(&bad), "-o", path_str(&html)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!("{}:3: not a trace line", bad.display())),
        "{}",
        stderr(&out)
    );

    let empty = tmp.path().join("empty.jsonl");
    std::fs::write(&empty, "\n\n").unwrap();
    let out = view(&[path_str(&empty), "-o", path_str(&html)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is empty"), "{}", stderr(&out));

    let out = view(&[
        path_str(&tmp.path().join("none.jsonl")),
        "-o",
        path_str(&html),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read the trace"),
        "{}",
        stderr(&out)
    );

    assert_eq!(std::fs::read_to_string(&html).unwrap(), "old");
    let mut after = listing();
    after.retain(|n| n != "empty.jsonl");
    assert_eq!(after, before, "no temp file left");
}

/// Without `-o` the page goes beside the trace, `.jsonl` replaced by `.html`.
#[test]
fn the_page_goes_beside_the_trace_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = traced_run(&root().join("examples/sum"), tmp.path(), 0);
    let out = view(&[path_str(&trace)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let html = tmp.path().join("run.html");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), path_str(&html));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    // The one script the page runs is named by hash: no other inline script
    // would run, nor any load be made.
    assert!(page.contains("default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-"));
    // Self-contained: nothing to fetch.
    for needle in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "@import",
        "url(http",
    ] {
        assert!(!page.contains(needle), "{needle}");
    }
}
