//! A full disk mid-run (issue 21, item 6), made with the file-size limit
//! (`ulimit -f`, RLIMIT_FSIZE) of a real `agentry run` on a real SQLite file:
//! the commit that does not fit fails with `EFBIG` (SIGXFSZ is caught, not
//! fatal), the run stops with an error naming the store, the last commit
//! stays readable, and `agentry resume` without the limit finishes the run.

use std::os::unix::process::ExitStatusExt;

use crate::*;

/// Steps of the task: each writes a 4 KiB file, so the store's write-ahead log
/// grows by several pages a step and passes the limit well before the end.
const WRITES: usize = 60;

fn task() -> tempfile::TempDir {
    let content = "x".repeat(4096);
    let mut turns: Vec<Value> = (0..WRITES)
        .map(|i| {
            serde_json::json!({"tool_calls": [{"id": format!("w{i}"), "name": "fs.write",
                "arguments": {"path": format!("f{i}.txt"), "content": content}}]})
        })
        .collect();
    turns.push(
        serde_json::json!({"tool_calls": [{"id": "finish", "name": "task.finish",
        "arguments": {"answer": "written"}}]}),
    );
    let script = serde_json::json!({"turns": turns, "then": "stop"});
    task_dir(
        &format!(
            "goal = \"write the files\"\n[budget]\nmax_steps = {steps}\nmax_tool_calls = {steps}\ndeadline = \"120s\"\n[tools]\ngrant = [\"fs.write\"]\n[progress]\nwindow = 0\n[[accept]]\nfile = \"f{last}.txt\"\ncontains = \"x\"\n",
            steps = WRITES + 5,
            last = WRITES - 1,
        ),
        &script.to_string(),
    )
}

/// `agentry ARGS` under a file-size limit of `blocks` (the shell's units).
fn limited(blocks: u32, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -f {blocks} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_agentry"))
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("AGENTRY_STORE")
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}; stderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

#[test]
fn a_full_disk_stops_the_run_naming_the_store_and_resume_finishes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let task = task();
    let db = tmp.path().join("runs.db");
    let work = tmp.path().join("w");
    let run_args = [
        "run",
        path_str(task.path()),
        "--store",
        path_str(&db),
        "--run-id",
        "full",
        "--workdir",
        path_str(&work),
        "--json",
    ];
    // Room to create the store and the run, not for the whole run.
    let out = limited(512, &run_args);
    assert_eq!(
        out.status.signal(),
        None,
        "killed by a signal (SIGXFSZ?): {}",
        stderr(&out)
    );
    let stopped = json_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stopped}; {}", stderr(&out));
    assert_eq!(stopped["stop_reason"], "unrecoverable_error", "{stopped}");
    let detail = stopped["detail"].as_str().unwrap();
    assert!(
        detail.contains("could not be stored")
            && detail.contains(path_str(&db))
            && detail.contains("file-size limit"),
        "{detail}"
    );
    let steps_before = stopped["steps"].as_u64().unwrap();
    assert!(
        (1..WRITES as u64).contains(&steps_before),
        "the limit hit mid-run: {stopped}"
    );

    // The last committed state is readable: the run is listed, unfinished.
    let listed = agentry(&["runs", "--store", path_str(&db), "--all", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let runs = json_of(&listed);
    assert_eq!(runs[0]["run_id"], "full", "{runs}");
    assert_eq!(runs[0]["status"], "running", "{runs}");
    assert!(runs[0]["stop_reason"].is_null(), "{runs}");

    // Space is back: resume finishes it.
    let out = agentry(&["resume", "full", "--store", path_str(&db), "--json"]);
    let done = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{done}; {}", stderr(&out));
    assert_eq!(done["stop_reason"], "done", "{done}");
    assert_eq!(done["steps"], WRITES as u64 + 1, "{done}");
    for i in 0..WRITES {
        assert!(work.join(format!("f{i}.txt")).is_file(), "f{i}.txt");
    }
}
