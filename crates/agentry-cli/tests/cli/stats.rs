//! `agentry stats` over a store filled by real runs of the real binary, one
//! per stop reason the CLI reaches without a network, and over their traces.
//!
//! Reached: done, verification_missing, max_steps, max_tool_calls,
//! max_tokens (a model on a local server reporting usage), max_ticks,
//! deadline, no_progress, unrecoverable_error, permission_denied, user_abort
//! (SIGINT). Not reachable from the CLI: max_cost — the CLI sets no token
//! prices (`ModelConfig::prices` is an embedder's), so no run spends money.

use std::collections::BTreeMap;

use crate::cli::model::{agentry_env, sse_server};
use crate::*;

/// A task directory `name` under `root` (the task id is the directory name),
/// with a workspace holding numbers.txt.
fn task(root: &Path, name: &str, toml: &str, script: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("workspace")).unwrap();
    std::fs::write(dir.join("workspace/numbers.txt"), "5\n").unwrap();
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::write(dir.join("script.json"), script).unwrap();
    dir
}

/// A command tool `name` that sleeps `secs` (a number no other test uses, so
/// its process can be told apart).
fn sleeper(name: &str, secs: &str, extra: &str) -> String {
    format!(
        "goal = \"g\"\n[tools]\ngrant = [\"{name}\"]\n[[tools.command]]\nname = \"{name}\"\n\
         description = \"sleeps\"\nargv = [\"sleep\", \"{secs}\"]\neffect = \"read_only\"\n{extra}"
    )
}

/// The runs: a store, a trace per run, and the stop reasons they ended with.
struct Fleet {
    tmp: tempfile::TempDir,
    store: PathBuf,
    traces: Vec<PathBuf>,
}

impl Fleet {
    /// `agentry run TASK ARGS...` into the store, with a trace of its own;
    /// returns its stop reason.
    fn run(&mut self, task: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
        let n = self.traces.len();
        let trace = self.tmp.path().join(format!("trace-{n}.jsonl"));
        let work = self.tmp.path().join(format!("work-{n}"));
        let mut all = vec!["run", path_str(task), "--store", path_str(&self.store)];
        all.extend([
            "--trace",
            path_str(&trace),
            "--workdir",
            path_str(&work),
            "--json",
        ]);
        all.extend_from_slice(args);
        let out = agentry_env(&all, env);
        let report: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        self.traces.push(trace);
        report["stop_reason"].as_str().unwrap().to_string()
    }

    /// A run of `task` stopped by SIGINT while its sleeper (`sleep secs`) runs.
    fn run_aborted(&mut self, task: &Path, secs: &str) -> String {
        let n = self.traces.len();
        let trace = self.tmp.path().join(format!("trace-{n}.jsonl"));
        let work = self.tmp.path().join(format!("work-{n}"));
        let child = Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args([
                "run",
                path_str(task),
                "--store",
                path_str(&self.store),
                "--json",
            ])
            .args(["--trace", path_str(&trace), "--workdir", path_str(&work)])
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_sleepers(secs, true);
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
        let out = child.wait_with_output().unwrap();
        let report: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        self.traces.push(trace);
        report["stop_reason"].as_str().unwrap().to_string()
    }
}

/// Fills a store with one run per reachable stop reason (two `done`).
fn fleet() -> Fleet {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("runs.db");
    let tasks = tmp.path().join("tasks");
    let mut fleet = Fleet {
        tmp,
        store,
        traces: Vec::new(),
    };
    let read = r#"{"name":"fs.read","arguments":{"path":"numbers.txt"}}"#;
    let sum = root().join("examples/sum");
    let mut reasons = vec![
        fleet.run(&sum, &[], &[]),
        fleet.run(&sum, &["--max-steps", "1"], &[]),
        fleet.run(&root().join("examples/stuck"), &[], &[]),
    ];
    let budget = task(
        &tasks,
        "budget",
        "goal = \"g\"\n[budget]\nmax_tool_calls = 1\n[tools]\ngrant = [\"fs.read\"]\n",
        &format!(r#"{{"turns":[{{"tool_calls":[{read}]}},{{"tool_calls":[{read}]}}]}}"#),
    );
    reasons.push(fleet.run(&budget, &[], &[]));
    let verify = task(
        &tasks,
        "verify",
        "goal = \"g\"\n[[accept]]\nfile = \"sum.txt\"\nequals = \"23\"\n",
        r#"{"turns":[{"final":"done, trust me"}]}"#,
    );
    reasons.push(fleet.run(&verify, &[], &[]));
    let exhausted = task(
        &tasks,
        "exhausted",
        "goal = \"g\"\n",
        &format!(r#"{{"turns":[{{"tool_calls":[{read}]}}]}}"#),
    );
    reasons.push(fleet.run(&exhausted, &[], &[]));
    let denied = task(
        &tasks,
        "denied",
        "goal = \"g\"\n[tools]\ngrant = [\"fs.read\"]\n[progress]\nwindow = 0\n",
        r#"{"turns":[{"tool_calls":[{"name":"fs.write","arguments":{"path":"x","content":"y"}}]}],"then":"repeat_last"}"#,
    );
    reasons.push(fleet.run(&denied, &[], &[]));
    let ticks = task(
        &tasks,
        "ticks",
        "goal = \"g\"\n[budget]\nmax_ticks = 2\n[driver]\nevery = \"50ms\"\n",
        r#"{"turns":[{"final":"ok"}],"then":"repeat_last"}"#,
    );
    reasons.push(fleet.run(&ticks, &[], &[]));
    reasons.extend(fleet.more(&tasks));
    assert_eq!(
        reasons,
        [
            "done",
            "max_steps",
            "no_progress",
            "max_tool_calls",
            "verification_missing",
            "unrecoverable_error",
            "permission_denied",
            "max_ticks",
            "deadline",
            "user_abort",
            "done",
            "max_tokens"
        ]
    );
    fleet
}

impl Fleet {
    /// The runs that need a process, a retry or a model server.
    fn more(&mut self, tasks: &Path) -> Vec<String> {
        let call =
            r#"{"turns":[{"tool_calls":[{"name":"wait","arguments":{}}]}],"then":"repeat_last"}"#;
        let wait = task(tasks, "wait", &sleeper("wait", "7517", ""), call);
        let mut reasons = vec![self.run(&wait, &["--deadline", "1s"], &[])];
        let abort = task(tasks, "abort", &sleeper("wait", "7518", ""), call);
        reasons.push(self.run_aborted(&abort, "7518"));
        let slow = sleeper("slow", "7519", "timeout = \"200ms\"\nmax_retries = 1\n");
        let script =
            r#"{"turns":[{"tool_calls":[{"name":"slow","arguments":{}}]},{"final":"ok"}]}"#;
        let retry = task(tasks, "retry", &slow, script);
        reasons.push(self.run(&retry, &[], &[]));
        // One turn reports 3,000 prompt tokens (1,000 of them cached) and 20
        // completion tokens, past max_tokens = 2,000: the next step is refused.
        let (url, _seen) = sse_server(vec![big_turn()]);
        let tokens = task(
            tasks,
            "tokens",
            "goal = \"g\"\n[budget]\nmax_tokens = 2000\n[tools]\ngrant = [\"fs.read\"]\n",
            "{}",
        );
        let args = ["--policy", "openai:tiny", "--base-url", &url];
        reasons.push(self.run(&tokens, &args, &[("OPENAI_API_KEY", "k")]));
        reasons
    }
}

/// An OpenAI-style streamed turn calling fs_read, with a large usage.
fn big_turn() -> String {
    let call = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
        "id": "r1", "type": "function", "function": {"name": "fs_read",
        "arguments": r#"{"path":"numbers.txt"}"#}}]}, "finish_reason": "tool_calls"}]});
    let usage = serde_json::json!({"choices": [], "usage": {"prompt_tokens": 3000,
        "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 1000}}});
    format!("data: {call}\n\ndata: {usage}\n\ndata: [DONE]\n\n")
}

fn stats_json(args: &[&str]) -> Value {
    let (code, report) = agentry_json(&[&["stats"][..], args].concat());
    assert_eq!(code, 0, "{report}");
    report
}

/// The group `key` of a report.
fn group<'a>(report: &'a Value, key: &str) -> &'a Value {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == key)
        .unwrap_or_else(|| panic!("no group {key}: {report}"))
}

/// Per (group, stop reason): runs, steps, tool calls by tool and code, retries
/// and tokens — what a store and the traces of the same runs must agree on.
fn projection(report: &Value) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for g in report["groups"].as_array().unwrap() {
        for (reason, f) in g["by_stop_reason"].as_object().unwrap() {
            let key = (g["key"].as_str().unwrap().to_string(), reason.clone());
            let by_tool = &f["tool_calls"]["by_tool"];
            let keep =
                serde_json::json!([f["runs"], f["steps"], by_tool, f["retries"], f["tokens"]]);
            out.insert(key, keep);
        }
    }
    out
}

fn check_store_figures(report: &Value) {
    assert_eq!(report["runs"], 12, "{report}");
    assert_eq!(report["unfinished"], 0);
    let mut per_reason: BTreeMap<String, u64> = BTreeMap::new();
    for g in report["groups"].as_array().unwrap() {
        for (reason, f) in g["by_stop_reason"].as_object().unwrap() {
            *per_reason.entry(reason.clone()).or_default() += f["runs"].as_u64().unwrap();
        }
    }
    assert_eq!(per_reason.len(), 11, "{per_reason:?}");
    assert_eq!(per_reason["done"], 2);
    assert!(
        per_reason.iter().all(|(r, n)| *n == 1 || r == "done"),
        "{per_reason:?}"
    );

    let sum = group(report, "sum");
    assert_eq!(
        (
            sum["all"]["runs"].as_u64(),
            sum["all"]["success_rate"].as_f64()
        ),
        (Some(2), Some(0.5))
    );
    assert_eq!(
        sum["all"]["steps"],
        serde_json::json!({"mean": 2.0, "p50": 1, "p95": 3, "max": 3})
    );
    assert_eq!(sum["by_stop_reason"]["done"]["steps"]["p50"], 3);
    assert_eq!(sum["by_stop_reason"]["max_steps"]["steps"]["p50"], 1);
    assert_eq!(sum["by_stop_reason"]["max_steps"]["success_rate"], 0.0);
    assert_eq!(sum["all"]["tool_calls"]["by_tool"]["fs.read"]["calls"], 2);

    let denied = &group(report, "denied")["by_stop_reason"]["permission_denied"];
    assert_eq!(
        denied["tool_calls"]["by_tool"]["fs.write"]["by_code"]["EPERM"],
        3
    );
    assert_eq!(denied["tool_calls"]["error_rate"], 1.0);
    let budget = &group(report, "budget")["by_stop_reason"]["max_tool_calls"]["tool_calls"];
    assert_eq!(budget["by_tool"]["fs.read"]["by_code"]["EBUDGET"], 1);
    assert_eq!(
        (budget["calls"].as_u64(), budget["errors"].as_u64()),
        (Some(2), Some(1))
    );
    let wait = &group(report, "wait")["by_stop_reason"]["deadline"]["tool_calls"]["by_tool"];
    assert_eq!(wait["wait"]["by_code"]["ETIMEDOUT"], 1);
    let abort = &group(report, "abort")["by_stop_reason"]["user_abort"]["tool_calls"]["by_tool"];
    assert_eq!(abort["wait"]["by_code"]["ECANCELED"], 1);
    let retry = &group(report, "retry")["by_stop_reason"]["done"];
    assert_eq!(retry["retries"]["total"], 1);
    assert_eq!(
        retry["tool_calls"]["by_tool"]["slow"]["by_code"]["ETIMEDOUT"],
        1
    );
    let tokens = &group(report, "tokens")["by_stop_reason"]["max_tokens"]["tokens"];
    let counts = [&tokens["input"], &tokens["output"], &tokens["cached"]];
    assert_eq!(
        counts.map(Value::as_u64),
        [Some(3000), Some(20), Some(1000)]
    );
    assert_eq!(
        group(report, "stuck")["by_stop_reason"]["no_progress"]["steps"]["max"],
        4
    );
}

#[cfg(unix)]
#[test]
fn stats_count_every_reachable_stop_reason_from_a_store_and_from_traces() {
    let fleet = fleet();
    let store = stats_json(&["--store", path_str(&fleet.store)]);
    check_store_figures(&store);

    let mut args = vec!["--trace"];
    args.extend(fleet.traces.iter().map(|p| path_str(p)));
    let traced = stats_json(&args);
    assert_eq!(traced["runs"], 12, "{traced}");
    assert_eq!(projection(&traced), projection(&store));

    // By model and by tool.
    let by_model = stats_json(&["--store", path_str(&fleet.store), "--by", "model"]);
    assert_eq!(by_model["by"], "model");
    assert_eq!(group(&by_model, "script")["all"]["runs"], 11);
    assert_eq!(
        group(&by_model, "openai:tiny")["by_stop_reason"]["max_tokens"]["runs"],
        1
    );
    let by_tool = stats_json(&["--store", path_str(&fleet.store), "--by", "tool"]);
    let write = group(&by_tool, "fs.write");
    assert_eq!(write["all"]["runs"], 2, "sum (done) and denied");
    assert_eq!(
        write["all"]["tool_calls"]["by_tool"]
            .as_object()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        group(&by_tool, "(none)")["all"]["runs"],
        2,
        "verify and ticks"
    );

    // All of them stopped within the last hour.
    let recent = stats_json(&["--store", path_str(&fleet.store), "--since", "1h"]);
    assert_eq!(
        (recent["runs"].as_u64(), recent["excluded"].as_u64()),
        (Some(12), Some(0))
    );

    check_table(&fleet);
}

/// The table: per group a row per stop reason plus `all`, columns aligned.
fn check_table(fleet: &Fleet) {
    let out = agentry(&["stats", "--store", path_str(&fleet.store)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("12 finished runs by task; 0 unfinished not counted\n"),
        "{text}"
    );
    let block = text.split("\ntask sum\n").nth(1).unwrap();
    let lines: Vec<&str> = block.lines().take(4).collect();
    assert!(
        lines[0].starts_with("  STOP REASON  RUNS  SUCCESS"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("  all  ") && lines[1].contains("50.0%"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("  done ") && lines[2].contains("100.0%"),
        "{text}"
    );
    assert!(lines[3].starts_with("  max_steps "), "{text}");
    // Aligned: the RUNS column ends at the same place in every row.
    let end = lines[0].find("RUNS").unwrap() + "RUNS".len();
    for line in &lines[1..] {
        assert!(
            line[..end].ends_with(|c: char| c.is_ascii_digit()),
            "{line:?}\n{text}"
        );
        assert_eq!(&line[end..end + 2], "  ", "{line:?}");
    }
    assert!(text.contains("\ntask denied\n"), "{text}");
    let eperm = text
        .lines()
        .find(|l| l.contains("fs.write") && l.contains("permission_denied"));
    assert!(
        eperm.is_some_and(|l| l.contains("EPERM=3") && l.contains("100.0%")),
        "{text}"
    );
}

#[test]
fn stats_errors_name_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.db");
    let (code, out) = agentry_json(&["stats", "--store", path_str(&missing)]);
    assert_eq!(code, 2);
    let error = out["error"].as_str().unwrap();
    assert!(
        error.contains(path_str(&missing)) && error.contains("no such file"),
        "{error}"
    );

    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"kind\":\"stop\",\"run_id\":\"r\"}\n").unwrap();
    let (code, out) = agentry_json(&["stats", "--trace", path_str(&bad)]);
    assert_eq!(code, 2);
    let error = out["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("{}:1: not an agentry trace line", path_str(&bad))),
        "{error}"
    );

    let gone = tmp.path().join("gone.jsonl");
    let out = agentry(&["stats", "--trace", path_str(&gone)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!("cannot read the trace {}", path_str(&gone))),
        "{}",
        stderr(&out)
    );

    let out = agentry(&["stats", "--since", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("invalid value 'soon' for '--since"),
        "{}",
        stderr(&out)
    );

    let out = agentry(&["stats", "--store", "a.db", "--trace", "t.jsonl"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--store and --trace exclude each other"
    );
}

/// Without --store, the store `agentry run` uses by default: $AGENTRY_STORE.
#[test]
fn stats_read_the_default_store_as_run_writes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("default.db");
    let env = [("AGENTRY_STORE", path_str(&store))];
    let work = tmp.path().join("w");
    let out = agentry_env(&["run", "examples/sum", "--workdir", path_str(&work)], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = agentry_env(&["stats", "--json"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(group(&report, "sum")["by_stop_reason"]["done"]["runs"], 1);
}

/// A parent's figures are its own: its child's steps and calls (charged to
/// the parent's budget too) count under the child's run, once.
#[test]
fn stats_count_a_childs_spend_under_the_child_only() {
    let tmp = tempfile::tempdir().unwrap();
    let toml = "goal = \"delegate\"\n[budget]\nmax_steps = 6\n[tools]\ngrant = [\"agent\"]\n";
    let child = r#"{"turns": [{"tool_calls": [{"name": "fs.read", "arguments": {"path": "numbers.txt"}}]}, {"final": "sub done"}]}"#;
    let script = format!(
        r#"{{"turns": [
        {{"tool_calls": [{{"id": "s", "name": "agent.spawn", "arguments": {{"name": "c", "goal": "sub", "budget": {{"max_steps": 3}}, "script": {child}}}}}]}},
        {{"tool_calls": [{{"id": "w", "name": "agent.wait", "arguments": {{"child_id": "c"}}}}]}},
        {{"tool_calls": [{{"id": "f", "name": "task.finish", "arguments": {{"answer": "delegated"}}}}]}}
    ]}}"#
    );
    let dir = task(tmp.path(), "parent", toml, &script);
    let store = tmp.path().join("runs.db");
    let trace = tmp.path().join("trace.jsonl");
    let (code, out) = agentry_json(&[
        "run",
        path_str(&dir),
        "--store",
        path_str(&store),
        "--trace",
        path_str(&trace),
        "--workdir",
        path_str(&tmp.path().join("w")),
    ]);
    assert_eq!(
        (code, &out["stop_reason"]),
        (0, &Value::from("done")),
        "{out}"
    );
    let report = stats_json(&["--store", path_str(&store)]);
    assert_eq!(report["runs"], 2, "{report}");
    let parent = &group(&report, "parent")["all"];
    assert_eq!(parent["steps"]["max"], 3, "{report}");
    assert_eq!(parent["tool_calls"]["calls"], 3);
    let child = &group(&report, "c")["all"];
    assert_eq!(child["steps"]["max"], 2, "{report}");
    assert_eq!(child["tool_calls"]["by_tool"]["fs.read"]["calls"], 1);
    // The parent's trace says the same of the parent.
    let traced = stats_json(&["--trace", path_str(&trace)]);
    assert_eq!(
        group(&traced, "parent")["all"]["steps"]["max"],
        3,
        "{traced}"
    );
}
