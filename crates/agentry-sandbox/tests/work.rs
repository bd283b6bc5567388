//! Ordinary work still works under the default sandbox: shell builds, git,
//! Python writing its outputs, a C compiler, `$TMPDIR`; exit statuses and
//! signals come back as the command's own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use agentry_sandbox::{Mode, Network, SandboxError, SandboxSpec, probe};

use support::Fixture;

fn default() -> SandboxSpec {
    SandboxSpec::default()
}

#[test]
fn this_kernel_enforces_the_default_sandbox() {
    let support = probe();
    assert!(support.enforces_default(), "{support}");
}

#[test]
fn shell_builds_make_move_link_and_remove_files() {
    let fixture = Fixture::new();
    let script = "set -e
        mkdir -p build/obj src/lib
        echo 'int x;' > src/lib/a.c
        cp src/lib/a.c build/obj/a.o
        mv build/obj/a.o build/a.o
        ln -s a.o build/link.o
        ln build/a.o build/hard.o
        chmod +x build/a.o
        rm -r build/obj
        echo done > build/stamp
        cat build/stamp";
    let outcome = fixture.run(&default(), script);
    assert!(outcome.ok(), "{outcome:#?}");
    assert_eq!(outcome.stdout, "done\n");
    assert!(fixture.workdir.join("build/hard.o").exists());
}

#[test]
fn git_init_and_status_in_a_fresh_workdir() {
    let fixture = Fixture::without_git();
    let outcome = fixture.run(
        &default(),
        "git init -q && git status --short && echo x > f && git add f && git -c user.name=t -c user.email=t@t commit -qm m && git log --oneline | wc -l",
    );
    assert!(outcome.ok(), "{outcome:#?}");
    // A `.git` made during the call is the call's own: protected from the next call on.
    assert_eq!(outcome.stdout, "?? own.txt\n1\n");
}

#[test]
fn git_status_reads_a_read_only_git_and_commits_are_refused() {
    let fixture = Fixture::without_git();
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&fixture.workdir)
        .status()
        .unwrap();
    assert!(init.success());
    let status = fixture.run(&default(), "git status --short");
    assert!(status.ok(), "{status:#?}");
    let add = fixture.run(&default(), "git add own.txt");
    assert!(!add.ok(), "{add:#?}");
    assert!(add.stderr.contains("Read-only file system"), "{add:#?}");
}

#[test]
fn python_writes_its_outputs() {
    let fixture = Fixture::new();
    let outcome = fixture.run(
        &default(),
        "\"$PY\" -c \"import json, tempfile; json.dump({'ok': True}, open('out.json', 'w')); tempfile.NamedTemporaryFile().write(b'x')\"",
    );
    assert!(outcome.ok(), "{outcome:#?}");
    assert_eq!(
        fs::read_to_string(fixture.workdir.join("out.json")).unwrap(),
        "{\"ok\": true}"
    );
}

#[test]
fn a_c_compiler_builds_and_runs_a_program() {
    let fixture = Fixture::new();
    fs::write(
        fixture.workdir.join("hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
    )
    .unwrap();
    let outcome = fixture.run(&default(), "cc -o hello hello.c && ./hello");
    assert!(outcome.ok(), "{outcome:#?}");
    assert_eq!(outcome.stdout, "hello\n");
}

#[test]
fn tmpdir_is_private_writable_and_removed_with_the_call() {
    let fixture = Fixture::new();
    let sandbox = fixture.sandbox(&default());
    let call = sandbox.call().unwrap();
    let tmpdir = call.tmpdir().to_path_buf();
    let outcome = fixture.run_call(
        &call,
        "echo \"$TMPDIR\" && echo hi > \"$TMPDIR/x\" && cat \"$TMPDIR/x\" && mktemp",
    );
    assert!(outcome.ok(), "{outcome:#?}");
    let lines: Vec<&str> = outcome.stdout.lines().collect();
    assert_eq!(lines[0], tmpdir.to_str().unwrap());
    assert_eq!(lines[1], "hi");
    assert!(
        lines[2].starts_with(tmpdir.to_str().unwrap()),
        "{outcome:#?}"
    );
    assert!(tmpdir.join("x").exists());
    drop(call);
    assert!(!tmpdir.exists());
}

#[test]
fn another_calls_tmpdir_is_not_writable() {
    let fixture = Fixture::new();
    let sandbox = fixture.sandbox(&default());
    let first = sandbox.call().unwrap();
    let second = sandbox.call().unwrap();
    let script = format!("echo x > {}/stolen", first.tmpdir().display());
    let outcome = fixture.run_call(&second, &script);
    assert!(!outcome.ok(), "{outcome:#?}");
    assert!(!first.tmpdir().join("stolen").exists());
}

#[test]
fn exit_status_and_signal_are_the_commands_own() {
    let fixture = Fixture::new();
    let exited = fixture.run(&default(), "exit 3");
    assert_eq!(exited.status.code(), Some(3), "{exited:#?}");
    let killed = fixture.run(&default(), "kill -TERM $$; sleep 5");
    assert_eq!(killed.status.signal(), Some(libc::SIGTERM), "{killed:#?}");
    let missing = fixture.run(&default(), "exec /nonexistent/program");
    assert_eq!(missing.status.code(), Some(127), "{missing:#?}");
}

#[test]
fn a_program_that_does_not_exist_is_a_spawn_error() {
    let fixture = Fixture::new();
    let sandbox = fixture.sandbox(&default());
    let call = sandbox.call().unwrap();
    let mut command = Command::new("/nonexistent/program");
    call.apply(&mut command);
    let error = command.spawn().unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
}

/// The confined command execs itself: with exactly the variables the
/// command sets (none of the host's) and its program found on that `PATH`.
#[test]
fn the_command_gets_only_the_set_variables_and_is_found_on_their_path() {
    let fixture = Fixture::new();
    let bin = fixture.workdir.join("bin");
    fs::create_dir(&bin).unwrap();
    fs::write(bin.join("mytool"), "#!/bin/sh\necho \"found $1\"; env\n").unwrap();
    fs::set_permissions(bin.join("mytool"), fs::Permissions::from_mode(0o755)).unwrap();
    let host_only = std::env::vars()
        .map(|(key, _)| key)
        .find(|key| key != "PATH")
        .expect("the test process has a variable besides PATH");
    let sandbox = fixture.sandbox(&default());
    let call = sandbox.call().unwrap();
    let mut command = Command::new("mytool");
    command
        .arg("it")
        .current_dir(&fixture.workdir)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SET_HERE", "1");
    call.apply(&mut command);
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.starts_with("found it\n"), "{stdout}");
    assert!(stdout.contains("\nSET_HERE=1\n"), "{stdout}");
    assert!(stdout.contains("\nTMPDIR="), "{stdout}");
    assert!(
        !stdout.contains(&format!("\n{host_only}=")),
        "{host_only} leaked: {stdout}"
    );
}

/// POSIX shared memory works (Python's `multiprocessing` locks are
/// semaphores in `/dev/shm`), in a `/dev/shm` of the call's own: what it
/// writes there never reaches the host's.
#[test]
fn python_multiprocessing_locks_work_in_a_private_dev_shm() {
    let fixture = Fixture::new();
    let name = format!("agentry-shm-{}", std::process::id());
    let outcome = fixture.run(
        &default(),
        &format!(
            "\"$PY\" -c \"import multiprocessing as m; l = m.Lock(); l.acquire(); l.release()\" && echo x > /dev/shm/{name} && cat /dev/shm/{name}"
        ),
    );
    assert!(outcome.ok(), "{outcome:#?}");
    assert_eq!(outcome.stdout, "x\n");
    assert!(!std::path::Path::new("/dev/shm").join(&name).exists());
}

#[test]
fn read_only_mode_writes_only_tmpdir() {
    let fixture = Fixture::new();
    let spec = SandboxSpec {
        mode: Mode::ReadOnly,
        ..default()
    };
    let outcome = fixture.run(
        &spec,
        "cat own.txt && echo x > \"$TMPDIR/x\" && echo y > new.txt",
    );
    assert!(!outcome.ok(), "{outcome:#?}");
    assert_eq!(outcome.stdout, "own notes\n");
    assert!(!fixture.workdir.join("new.txt").exists());
}

#[test]
fn mode_off_applies_nothing_but_tmpdir() {
    let fixture = Fixture::new();
    let spec = SandboxSpec {
        mode: Mode::Off,
        ..default()
    };
    let outcome = fixture.run(
        &spec,
        "echo $$ > /dev/null && test -d \"$TMPDIR\" && cat \"$HOME/.ssh/id_ed25519\"",
    );
    assert!(outcome.ok(), "{outcome:#?}");
    assert_eq!(outcome.stdout, support::KEY);
}

#[test]
fn a_grant_that_does_not_resolve_is_an_error_at_prepare() {
    let fixture = Fixture::new();
    let spec: SandboxSpec = toml::from_str("network = [\"no-such-host.invalid:443\"]").unwrap();
    let error = agentry_sandbox::Sandbox::prepare(&spec, &fixture.places()).unwrap_err();
    assert!(matches!(error, SandboxError::Resolve { .. }), "{error}");
    assert!(matches!(spec.network, Network::Allow(_)));
}
