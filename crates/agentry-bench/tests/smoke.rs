//! Runs the built `agentry-bench` binary on small loads and checks that each
//! prints exactly one JSON line with `ok: true`. No timing is asserted: the
//! machine is shared and noisy; the figures live in BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Runs the binary; kills it and fails the test if it takes longer than `limit`.
fn run_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentry-bench"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The one JSON line fits in the pipe, so the child never blocked on it.
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

fn bench(args: &[&str]) -> Value {
    let out = run_within(args, Duration::from_secs(300));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: stdout {stdout:?}, stderr {stderr}"
    );
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["peer"], "agentry");
    assert_eq!(v["ok"], true, "{args:?}: {stdout} {stderr}");
    assert!(out.status.success(), "{args:?}: {}", out.status);
    v
}

#[test]
fn w1_small_with_its_floor() {
    let v = bench(&["w1", "--m", "200"]);
    assert_eq!(v["workload"], "w1");
    assert_eq!(v["params"]["m"], 200);
    let m = &v["metrics"];
    for key in [
        "wall_s",
        "steps_per_s",
        "us_per_step",
        "steps_per_s_first10pct",
        "steps_per_s_last10pct",
        "floor_us_per_step",
        "ratio_vs_floor",
        "actor_floor_us_per_step",
        "ratio_vs_actor_floor",
    ] {
        assert!(m[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
}

#[test]
fn w1_writes_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("w1.jsonl");
    let v = bench(&["w1", "--m", "50", "--trace", trace.to_str().unwrap()]);
    assert_eq!(v["params"]["trace"], true);
    let text = std::fs::read_to_string(&trace).unwrap();
    // One record per step, then the closing record.
    assert_eq!(text.lines().count(), 51);
}

#[test]
fn floor_alone() {
    let v = bench(&["floor", "--m", "200"]);
    assert_eq!(v["workload"], "floor");
}

#[test]
fn actor_floor_alone_and_many() {
    let v = bench(&["actor-floor", "--m", "200"]);
    assert_eq!(v["workload"], "actor-floor");
    assert!(v["metrics"]["us_per_step"].as_f64().unwrap() > 0.0);
    let v = bench(&["actor-floor-w2", "--n", "50", "--m", "5"]);
    assert_eq!(v["workload"], "actor-floor-w2");
    assert!(v["metrics"]["kib_per_agent"].as_f64().is_some());
}

#[test]
fn w2_small() {
    let v = bench(&["w2", "--n", "50", "--m", "5"]);
    let m = &v["metrics"];
    for key in [
        "peak_rss_mib",
        "floor_wall_s",
        "ratio_vs_floor",
        "actor_floor_wall_s",
        "ratio_vs_actor_floor",
    ] {
        assert!(m[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
}

#[test]
fn w3_results_in_request_order() {
    let v = bench(&["w3"]);
    assert_eq!(v["metrics"]["order_matches_request"], true);
    let v = bench(&["w3", "--steps", "2", "--precise-sleep"]);
    assert_eq!(v["params"]["sleep"], "precise");
    assert_eq!(v["metrics"]["order_matches_request"], true);
}

#[test]
fn parallel_results_in_request_order() {
    let v = bench(&["parallel", "--runs", "2"]);
    assert_eq!(v["metrics"]["order_matches_request"], true);
}

#[test]
fn w4_kills_the_child() {
    // A deadline long enough for the tool to start on a loaded machine (the
    // workload's own 200 ms is for measuring, not for a smoke test).
    for args in [
        &["w4", "--deadline-ms", "2000"][..],
        &["w4", "--watch-cancel", "--deadline-ms", "2000"][..],
    ] {
        let v = bench(args);
        assert_eq!(v["metrics"]["timed_out"], true);
        assert_eq!(v["metrics"]["child_killed"], true);
        assert!(v["metrics"]["floor_deadline_to_end_ms"].as_f64().is_some());
    }
}

#[test]
fn w4_kills_the_whole_group() {
    let v = bench(&["w4", "--grandchildren", "--deadline-ms", "2000"]);
    assert_eq!(v["metrics"]["child_killed"], true);
    assert_eq!(v["metrics"]["group_size"], 3);
    assert_eq!(v["metrics"]["zombies_left"], 0);
}

#[test]
fn cancel_a_few_runs() {
    // A longer deadline than the default 100 ms, so the group is surely up
    // (and seen) before it fires on a loaded CI machine.
    let v = bench(&["cancel", "--runs", "3", "--deadline-ms", "300"]);
    assert_eq!(v["metrics"]["groups_leaked"], 0);
    assert_eq!(v["metrics"]["zombies_left"], 0);
}

#[test]
fn durable_three_ways_small() {
    // The stores go to a temporary directory of their own (deleted at the end).
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().to_str().unwrap();
    let v = bench(&["durable", "--m", "20", "--store-dir", store_dir]);
    assert_eq!(v["workload"], "durable");
    assert_eq!(v["params"]["m"], 20);
    assert!(
        v["params"]["store_fs"].as_str().unwrap() != "unknown",
        "{v}"
    );
    let m = &v["metrics"];
    for key in [
        "steps_per_s_memory",
        "steps_per_s_strict",
        "steps_per_s_grouped",
        "ratio_strict",
        "ratio_grouped",
        "commits_strict",
        "commits_grouped",
    ] {
        assert!(m[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    assert!(m["grouped_within_5x"].is_boolean(), "{v}");
    // Nothing is left behind in the store directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn durable_w2_small() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().to_str().unwrap();
    let v = bench(&[
        "durable-w2",
        "--n",
        "5",
        "--m",
        "5",
        "--store-dir",
        store_dir,
    ]);
    assert_eq!(v["workload"], "durable-w2");
    assert_eq!(v["params"]["n"], 5);
    assert!(
        v["metrics"]["steps_per_s_strict"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert!(v["metrics"]["ratio_grouped"].as_f64().unwrap() > 0.0, "{v}");
}

#[test]
fn sandbox_off_and_default_small() {
    let v = bench(&["sandbox", "--runs", "5"]);
    assert_eq!(v["workload"], "sandbox");
    assert_eq!(v["params"]["runs"], 5);
    let m = &v["metrics"];
    for key in [
        "off_us_p50",
        "default_us_p50",
        "off_us_p90",
        "default_us_p90",
        "ratio_p50",
    ] {
        assert!(m[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    assert!(m["added_us_p50"].is_number(), "{v}");
}

#[test]
fn idle_small() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().to_str().unwrap();
    let v = bench(&["idle", "--n", "200", "--m", "20", "--store-dir", store_dir]);
    assert_eq!(v["workload"], "idle");
    assert_eq!(v["params"]["n"], 200);
    let m = &v["metrics"];
    for key in [
        "awake_sleeping_kib_per_agent",
        "wake_answer_p50_ms",
        "wake_answer_p99_ms",
        "awake_answer_p50_ms",
    ] {
        assert!(m[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    // The store's temporary directory is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
