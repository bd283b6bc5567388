//! Runs the built `agentry-bench` binary on small loads and checks that each
//! prints exactly one JSON line with `ok: true`. No timing is asserted: the
//! machine is shared and noisy; the figures live in BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_agentry-bench"))
        .args(args)
        .output()
        .unwrap();
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
fn w2_small() {
    let v = bench(&["w2", "--n", "50", "--m", "5"]);
    assert!(v["metrics"]["peak_rss_mib"].as_f64().unwrap() > 0.0);
}

#[test]
fn w3_results_in_request_order() {
    let v = bench(&["w3"]);
    assert_eq!(v["metrics"]["order_matches_request"], true);
}

#[test]
fn parallel_results_in_request_order() {
    let v = bench(&["parallel", "--runs", "2"]);
    assert_eq!(v["metrics"]["order_matches_request"], true);
}

#[test]
fn w4_kills_the_child() {
    for args in [&["w4"][..], &["w4", "--watch-cancel"][..]] {
        let v = bench(args);
        assert_eq!(v["metrics"]["timed_out"], true);
        assert_eq!(v["metrics"]["child_killed"], true);
    }
}

#[test]
fn w4_kills_the_whole_group() {
    let v = bench(&["w4", "--grandchildren"]);
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
