//! Telling a sandbox refusal from an ordinary failure: a process that exited
//! non-zero and said `Permission denied`, `Operation not permitted`,
//! `Read-only file system` (or, for a hidden file, `No such file or
//! directory`) on a path, or was refused a socket or a connection, becomes
//! [`Refusal`] when — and only when — the sandbox is what refused it: the
//! path is outside what the call may write (and this process, unconfined,
//! could write it), or inside a hidden root (and it exists), or the
//! connection is one the call's `network` does not allow. Anything inside
//! what the sandbox allows is left alone: no guessing.

use std::path::{Component, Path, PathBuf};

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;

/// What a call's sandbox allows, as the classifier needs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Confinement {
    /// The run's working directory.
    pub(crate) workdir: PathBuf,
    /// Whether the working directory is writable (workspace-write) or not
    /// (read-only: only the call's temporary directory is).
    pub(crate) workspace_writable: bool,
    /// Roots the call may write beneath (the working directory, its TMPDIR,
    /// `[sandbox] write`).
    pub(crate) writable: Vec<PathBuf>,
    /// Subtrees of writable roots that stay read-only (`.git/`, `.agentry/`).
    pub(crate) read_only: Vec<PathBuf>,
    /// Roots the call cannot see (`read_deny`, the defaults and the host's).
    pub(crate) hidden: Vec<PathBuf>,
    /// Outbound TCP.
    pub(crate) network: NetworkAccess,
}

/// Outbound TCP a call may open.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NetworkAccess {
    /// None (`network = false`).
    Off,
    /// Any (`network = true`).
    All,
    /// To these ports only (`network = ["host:port", ...]`; the hosts are
    /// checked by the call's init, a refused one is `EACCES` as a port is).
    Ports(Vec<u16>),
}

/// What the sandbox refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A write outside the writable roots.
    WriteOutside(PathBuf),
    /// A write to `.git/` or `.agentry/` of the working directory.
    WriteReadOnly(PathBuf),
    /// A write in the working directory under `mode = "read-only"`.
    WriteInReadOnlyMode(PathBuf),
    /// A read of a hidden path.
    Read(PathBuf),
    /// A socket or connection; the address when the output named it.
    Connect(Option<String>),
}

/// Lines of output before a refusal that may say what was being connected
/// to (a Python traceback names the call a line or two above the error).
const CONTEXT_LINES: usize = 3;

impl Refusal {
    /// The `[sandbox]` key that would allow it.
    pub(crate) fn key(&self) -> &'static str {
        match self {
            Refusal::WriteOutside(_) => "write",
            Refusal::WriteReadOnly(_) | Refusal::WriteInReadOnlyMode(_) | Refusal::Read(_) => {
                "mode"
            }
            Refusal::Connect(_) => "network",
        }
    }

    /// The envelope the model gets: the refusal, then the process's own data
    /// (exit code, stdout, stderr) as JSON, so nothing it printed is lost.
    pub(crate) fn to_error(&self, data: &serde_json::Value) -> ToolError {
        let (what, action) = self.words();
        let message = format!(
            "the sandbox refused {what} (task.toml `[sandbox] {}`); the process's result: {}",
            self.key(),
            serde_json::to_string(data).unwrap_or_default()
        );
        ToolError::new(ErrorCode::Esandbox, message)
            .retryable(false)
            .with_action(action)
    }

    fn words(&self) -> (String, String) {
        match self {
            Refusal::WriteOutside(p) => (
                format!(
                    "writing {}: outside the working directory and $TMPDIR",
                    p.display()
                ),
                format!(
                    "write inside the working directory or $TMPDIR; if the task needs {}, \
                     the operator adds it to `[sandbox] write` in task.toml (or to this \
                     tool's `sandbox = {{ write = [...] }}`)",
                    p.display()
                ),
            ),
            Refusal::WriteReadOnly(p) => (
                format!(
                    "writing {}: .git/ and .agentry/ of the working directory stay read-only",
                    p.display()
                ),
                "leave .git/ and .agentry/ alone (read them freely); only `[sandbox] mode = \
                 \"off\"` in task.toml allows writing them"
                    .to_string(),
            ),
            Refusal::WriteInReadOnlyMode(p) => (
                format!(
                    "writing {}: this sandbox is read-only (only $TMPDIR is writable)",
                    p.display()
                ),
                "write under $TMPDIR; writing the working directory needs `[sandbox] mode = \
                 \"workspace-write\"` in task.toml"
                    .to_string(),
            ),
            Refusal::Read(p) => (
                format!(
                    "reading {}: it is hidden (secrets, agentry's store and state, other runs)",
                    p.display()
                ),
                "do not read it; only `[sandbox] mode = \"off\"` in task.toml shows hidden places"
                    .to_string(),
            ),
            Refusal::Connect(address) => {
                let to = address.as_deref().unwrap_or("an address it did not print");
                (
                    format!("a network connection to {to}: this sandbox's network is closed"),
                    match address {
                        Some(a) => format!(
                            "work offline; if the task needs {a}, the operator grants it with \
                             `[sandbox] network = [\"{a}\"]` in task.toml (or this tool's \
                             `sandbox = {{ network = [...] }}`)"
                        ),
                        None => "work offline; if the task needs a service, the operator \
                                 grants it with `[sandbox] network = [\"host:port\"]` in task.toml"
                            .to_string(),
                    },
                )
            }
        }
    }
}

/// Whether a failed process (exit code not 0) was refused by the sandbox,
/// judged from its stderr. `cwd` resolves relative paths.
pub(crate) fn classify(
    exit_code: Option<i32>,
    stderr: &str,
    cwd: &Path,
    confinement: &Confinement,
) -> Option<Refusal> {
    if exit_code == Some(0) {
        return None;
    }
    let lines: Vec<&str> = stderr.lines().collect();
    lines.iter().enumerate().find_map(|(i, line)| {
        let marker = Marker::of(line)?;
        let context = &lines[i.saturating_sub(CONTEXT_LINES)..=i];
        if is_network(context) {
            let address = context
                .iter()
                .rev()
                .chain(lines.iter())
                .find_map(|l| address_in(l));
            return network_refusal(marker, context, address, confinement);
        }
        path_candidates(line)
            .into_iter()
            .find_map(|p| path_refusal(marker, &absolute(cwd, &p), confinement))
    })
}

/// The error words a refusal shows as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// `EACCES` / `EPERM`: Landlock, seccomp.
    Denied,
    /// `EROFS`: a read-only bind mount (`.git/`).
    ReadOnly,
    /// `ENOENT`: a hidden directory is an empty one.
    Missing,
    /// `EAFNOSUPPORT`.
    Family,
}

impl Marker {
    fn of(line: &str) -> Option<Marker> {
        let has = |s: &str| line.contains(s);
        if has("Read-only file system") {
            Some(Marker::ReadOnly)
        } else if has("Permission denied") || has("Operation not permitted") {
            Some(Marker::Denied)
        } else if has("Address family not supported") {
            Some(Marker::Family)
        } else if has("No such file or directory") {
            Some(Marker::Missing)
        } else {
            None
        }
    }
}

fn is_network(context: &[&str]) -> bool {
    const WORDS: [&str; 6] = [
        "connect",
        "socket",
        "/dev/tcp/",
        "/dev/udp/",
        "Address family",
        "Network",
    ];
    context.iter().any(|l| WORDS.iter().any(|w| l.contains(w)))
}

fn network_refusal(
    marker: Marker,
    context: &[&str],
    address: Option<Address>,
    confinement: &Confinement,
) -> Option<Refusal> {
    if marker == Marker::Missing || marker == Marker::ReadOnly {
        return None;
    }
    match (&confinement.network, &address) {
        (NetworkAccess::Off, _) => Some(Refusal::Connect(address.map(|a| a.text))),
        // Whatever is granted, UDP and raw sockets are refused.
        (NetworkAccess::All, _) => (marker == Marker::Family
            || context.iter().any(|l| l.contains("/dev/udp/")))
        .then(|| Refusal::Connect(address.map(|a| a.text))),
        (NetworkAccess::Ports(ports), Some(a)) => {
            (!ports.contains(&a.port)).then(|| Refusal::Connect(Some(a.text.clone())))
        }
        // Some ports are open and the output does not say which was asked.
        (NetworkAccess::Ports(_), None) => None,
    }
}

/// A `host:port` found in a line of output.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Address {
    text: String,
    port: u16,
}

/// `/dev/tcp/HOST/PORT` (bash), `HOST port PORT` (curl), `('HOST', PORT)`
/// (Python), `HOST:PORT`.
fn address_in(line: &str) -> Option<Address> {
    let make = |host: &str, port: &str| {
        let host = host.trim_matches(|c: char| "'\"()[], ".contains(c));
        let port: u16 = port
            .trim_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .ok()?;
        (!host.is_empty() && host.chars().all(host_char)).then(|| Address {
            text: format!("{host}:{port}"),
            port,
        })
    };
    if let Some(rest) = line.split("/dev/tcp/").nth(1) {
        let mut parts = rest.split('/');
        if let (Some(h), Some(p)) = (parts.next(), parts.next()) {
            let p: String = p.chars().take_while(char::is_ascii_digit).collect();
            return make(h, &p);
        }
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    for pair in words.windows(3) {
        if pair[1] == "port"
            && let Some(a) = make(pair[0], pair[2])
        {
            return Some(a);
        }
    }
    for w in words.windows(2) {
        if let (Some(at), true) = (w[0].rfind("('"), w[0].ends_with("',"))
            && let Some(a) = make(&w[0][at..], w[1])
        {
            return Some(a);
        }
    }
    words.iter().find_map(|w| {
        let w = w.trim_matches(|c: char| "'\"()[],;".contains(c));
        let (host, port) = w.rsplit_once(':')?;
        (!port.is_empty() && port.chars().all(|c| c.is_ascii_digit()))
            .then(|| make(host, port))
            .flatten()
    })
}

fn host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || ".-:[]".contains(c)
}

/// Paths a line of output names: absolute ones, `~/...`, and relative ones
/// quoted or ending in `:` (`git: could not lock config file .git/config:`).
fn path_candidates(line: &str) -> Vec<String> {
    const TRIM: &str = "'\"`‘’“”,;()";
    line.split_whitespace()
        .map(|w| w.trim_matches(|c: char| TRIM.contains(c)))
        .map(|w| w.trim_end_matches(':'))
        .map(|w| w.trim_matches(|c: char| TRIM.contains(c)))
        .filter(|w| {
            ["/", "./", "../", ".git", ".agentry"]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(str::to_string)
        .collect()
}

/// `path` made absolute against `cwd`, `.` and `..` folded (not resolved on
/// disk: the name the process used is the one judged).
fn absolute(cwd: &Path, path: &str) -> PathBuf {
    let joined = cwd.join(path);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => out.push(c),
        }
    }
    out
}

fn path_refusal(marker: Marker, path: &Path, c: &Confinement) -> Option<Refusal> {
    let under = |roots: &[PathBuf]| roots.iter().any(|r| path.starts_with(r));
    // A hidden root may hold this run's working directory (the runs root)
    // or its TMPDIR: those stay visible.
    if under(&c.hidden) && !path.starts_with(&c.workdir) && !under(&c.writable) {
        // A hidden file the host has: the process could not see it.
        return (path.exists() && marker != Marker::Family).then(|| Refusal::Read(path.into()));
    }
    if marker == Marker::Missing || marker == Marker::Family {
        return None;
    }
    if under(&c.read_only) {
        return Some(Refusal::WriteReadOnly(path.into()));
    }
    if under(&c.writable) {
        // Allowed by the sandbox: whatever refused it, it was not the sandbox.
        return None;
    }
    if !host_can_write(path) {
        // Refused to this user anyway (`/etc/shadow`, a read-only mount).
        return None;
    }
    if !c.workspace_writable && path.starts_with(&c.workdir) {
        return Some(Refusal::WriteInReadOnlyMode(path.into()));
    }
    Some(Refusal::WriteOutside(path.into()))
}

/// Whether this (unconfined) process could write `path`: the file if it
/// exists, else the nearest existing directory above it.
fn host_can_write(path: &Path) -> bool {
    let mut at = Some(path);
    while let Some(p) = at {
        if std::fs::symlink_metadata(p).is_ok() {
            return rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_ok();
        }
        at = p.parent();
    }
    false
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    struct Setup {
        _tmp: tempfile::TempDir,
        home: PathBuf,
        workdir: PathBuf,
        confinement: Confinement,
    }

    fn setup(network: NetworkAccess) -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let workdir = tmp.path().join("work");
        let tmpdir = tmp.path().join("calltmp");
        for d in [
            &home,
            &workdir,
            &tmpdir,
            &home.join(".ssh"),
            &workdir.join(".git"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join(".ssh/id_ed25519"), "key").unwrap();
        let confinement = Confinement {
            workdir: workdir.clone(),
            workspace_writable: true,
            writable: vec![workdir.clone(), tmpdir],
            read_only: vec![workdir.join(".git"), workdir.join(".agentry")],
            hidden: vec![home.join(".ssh")],
            network,
        };
        Setup {
            _tmp: tmp,
            home,
            workdir,
            confinement,
        }
    }

    fn judge(s: &Setup, stderr: &str) -> Option<Refusal> {
        classify(Some(1), stderr, &s.workdir, &s.confinement)
    }

    #[test]
    fn writes_outside_the_writable_roots_are_refusals_naming_the_path_and_key() {
        let s = setup(NetworkAccess::Off);
        let bashrc = s.home.join(".bashrc");
        for stderr in [
            format!(
                "sh: 1: cannot create {}: Permission denied",
                bashrc.display()
            ),
            format!(
                "touch: cannot touch '{}': Permission denied",
                bashrc.display()
            ),
            format!(
                "Traceback (most recent call last):\nPermissionError: [Errno 13] Permission denied: '{}'",
                bashrc.display()
            ),
            // Through `..` from the working directory.
            "sh: 1: cannot create ../home/.bashrc: Permission denied".to_string(),
        ] {
            let refusal = judge(&s, &stderr);
            assert_eq!(
                refusal,
                Some(Refusal::WriteOutside(bashrc.clone())),
                "{stderr}"
            );
            assert_eq!(refusal.unwrap().key(), "write");
        }
    }

    #[test]
    fn a_failure_inside_what_the_sandbox_allows_is_not_a_refusal() {
        let s = setup(NetworkAccess::Off);
        let inside = s.workdir.join("out.txt");
        let stderr = format!(
            "sh: 1: cannot create {}: Permission denied",
            inside.display()
        );
        assert_eq!(judge(&s, &stderr), None);
        // Exit 0: whatever it printed, nothing was refused.
        let outside = format!(
            "cannot create {}: Permission denied",
            s.home.join("x").display()
        );
        assert_eq!(
            classify(Some(0), &outside, &s.workdir, &s.confinement),
            None
        );
        // No path, no network words: nothing to name.
        assert_eq!(
            judge(&s, "make: *** [all] Error 1: Permission denied"),
            None
        );
        // With the sandbox off there is no confinement to ask: the caller
        // never classifies (see `run.rs`); a missing file outside hidden
        // roots is an ordinary error.
        let missing = format!(
            "cat: {}: No such file or directory",
            s.home.join("nope").display()
        );
        assert_eq!(judge(&s, &missing), None);
    }

    #[test]
    fn git_writes_under_dot_git_are_refusals_of_the_read_only_subtree() {
        let s = setup(NetworkAccess::Off);
        let refusal = judge(
            &s,
            "error: could not lock config file .git/config: Read-only file system",
        );
        assert_eq!(
            refusal,
            Some(Refusal::WriteReadOnly(s.workdir.join(".git/config")))
        );
        assert_eq!(refusal.unwrap().key(), "mode");
    }

    #[test]
    fn reading_a_hidden_file_the_host_has_is_a_refusal_and_a_missing_one_is_not() {
        let s = setup(NetworkAccess::Off);
        let key = s.home.join(".ssh/id_ed25519");
        let stderr = format!("cat: {}: No such file or directory", key.display());
        assert_eq!(judge(&s, &stderr), Some(Refusal::Read(key)));
        let absent = s.home.join(".ssh/id_rsa");
        let stderr = format!("cat: {}: No such file or directory", absent.display());
        assert_eq!(judge(&s, &stderr), None);
    }

    #[test]
    fn connections_are_refusals_when_the_network_does_not_allow_them() {
        let bash = "bash: connect: Permission denied\nbash: line 1: /dev/tcp/127.0.0.1/8080: Permission denied";
        let python = "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n    s.connect(('127.0.0.1', 8080))\nPermissionError: [Errno 13] Permission denied";
        let curl =
            "curl: (7) Failed to connect to 127.0.0.1 port 8080 after 0 ms: Permission denied";
        let off = setup(NetworkAccess::Off);
        for stderr in [bash, python, curl] {
            let refusal = judge(&off, stderr);
            assert_eq!(
                refusal,
                Some(Refusal::Connect(Some("127.0.0.1:8080".into()))),
                "{stderr}"
            );
            assert_eq!(refusal.unwrap().key(), "network");
        }
        // A socket refused before any address: still the network.
        let udp = "PermissionError: [Errno 1] Operation not permitted\n";
        assert_eq!(
            judge(&off, &format!("    socket.socket(AF_INET)\n{udp}")),
            Some(Refusal::Connect(None))
        );
        // The granted port is allowed: not the sandbox. Another port is.
        let granted = setup(NetworkAccess::Ports(vec![8080]));
        assert_eq!(judge(&granted, bash), None);
        let other = setup(NetworkAccess::Ports(vec![9000]));
        assert_eq!(
            judge(&other, curl),
            Some(Refusal::Connect(Some("127.0.0.1:8080".into())))
        );
        // Unknown address with some ports open: no guess.
        assert_eq!(judge(&other, "connect: Permission denied"), None);
        // An ordinary refused connection is the peer's answer, not ours.
        assert_eq!(
            judge(
                &off,
                "curl: (7) Failed to connect to 127.0.0.1 port 8080: Connection refused"
            ),
            None
        );
    }

    #[test]
    fn read_only_mode_names_the_mode_key_for_the_working_directory() {
        let mut s = setup(NetworkAccess::Off);
        s.confinement.workspace_writable = false;
        s.confinement
            .writable
            .retain(|p| !p.starts_with(&s.workdir));
        let out = s.workdir.join("out.txt");
        let stderr = format!(
            "sh: 1: cannot create {}: Read-only file system",
            out.display()
        );
        let refusal = judge(&s, &stderr);
        assert_eq!(refusal, Some(Refusal::WriteInReadOnlyMode(out)));
        assert_eq!(refusal.unwrap().key(), "mode");
    }

    #[test]
    fn the_error_keeps_the_process_data_and_names_the_key() {
        let data = serde_json::json!({"exit_code": 2, "stdout": "partial", "stderr": "boom"});
        let e = Refusal::WriteOutside(PathBuf::from("/h/.bashrc")).to_error(&data);
        assert_eq!(e.code, ErrorCode::Esandbox);
        assert!(e.message.contains("/h/.bashrc"), "{}", e.message);
        assert!(
            e.message.contains("\"stdout\":\"partial\""),
            "{}",
            e.message
        );
        assert!(e.message.contains("\"exit_code\":2"), "{}", e.message);
        assert!(
            e.suggested_action.unwrap().contains("[sandbox] write"),
            "names the key"
        );
    }
}
