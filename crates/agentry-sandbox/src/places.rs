//! Where things are: what the host knows and the spec cannot.

use std::path::{Path, PathBuf};

/// What the host knows about where things are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlaces {
    /// The working directory: writable under workspace-write, minus `.git/` and
    /// `.agentry/` (read-only when they exist at the call).
    pub workdir: PathBuf,
    /// Each call gets a private directory under it, set as `TMPDIR` and removed
    /// with the call. Made if missing.
    pub temp_parent: PathBuf,
    /// Host-known unreadable places: the store file and its directory, agentry's
    /// state directory, the runs root (other runs' working directories),
    /// [`default_read_deny`] of the operator's home ([`host_sockets`] are
    /// added by prepare). A
    /// denied directory that holds the workdir, the call's TMPDIR or a `write`
    /// root is hidden except for those.
    pub deny: Vec<PathBuf>,
}

/// The operator's secrets under `home` that no sandboxed process may read:
/// `~/.ssh`, `~/.aws`, `~/.config/gcloud`, `~/.netrc`, `~/.docker/config.json`,
/// and the other usual key and token stores: `~/.gnupg`, `~/.git-credentials`,
/// `~/.config/gh`, `~/.kube`, `~/.azure`.
pub fn default_read_deny(home: &Path) -> Vec<PathBuf> {
    [
        ".ssh",
        ".aws",
        ".config/gcloud",
        ".netrc",
        ".docker/config.json",
        ".gnupg",
        ".git-credentials",
        ".config/gh",
        ".kube",
        ".azure",
    ]
    .iter()
    .map(|rel| home.join(rel))
    .collect()
}

/// Unix sockets of this host that would hand a sandboxed process the
/// operator's powers: connecting to a socket by path needs no right that
/// Landlock (before ABI 9) can refuse, so they are hidden instead. The agent
/// named by `$SSH_AUTH_SOCK`, the session's runtime directory
/// (`$XDG_RUNTIME_DIR`, `/run/user/<uid>`: the session bus, gpg-agent,
/// rootless container sockets), the container engines' sockets, and local
/// databases' socket directories (PostgreSQL, MySQL/MariaDB, Redis; a
/// PostgreSQL socket in `/tmp` too): loopback is not special, and neither is
/// a database's Unix socket.
/// [`Sandbox::prepare`](crate::Sandbox::prepare) adds them to every sandbox.
pub fn host_sockets() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/run/podman/podman.sock",
        "/var/run/crio/crio.sock",
        "/run/postgresql",
        "/var/run/postgresql",
        "/run/mysqld",
        "/var/run/mysqld",
        "/run/redis",
        "/var/run/redis",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    found.extend(postgres_sockets_in(Path::new("/tmp")));
    for variable in ["SSH_AUTH_SOCK", "XDG_RUNTIME_DIR"] {
        if let Some(path) = std::env::var_os(variable).filter(|value| !value.is_empty()) {
            found.push(PathBuf::from(path));
        }
    }
    // SAFETY: geteuid always succeeds.
    let uid = unsafe { libc::geteuid() };
    found.push(PathBuf::from(format!("/run/user/{uid}")));
    found
}

/// PostgreSQL's sockets and lock files in `dir` (`.s.PGSQL.<port>` and
/// `.s.PGSQL.<port>.lock`), where a server started with its default socket
/// directory `/tmp` puts them.
fn postgres_sockets_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(".s.PGSQL."))
        .map(|entry| entry.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_sockets_are_hidden_too() {
        let dir = std::env::temp_dir().join(format!("agentry-pg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join(".s.PGSQL.5432.lock"), "").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("other"), "").unwrap_or_else(|e| panic!("{e}"));
        let found = postgres_sockets_in(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(found, vec![dir.join(".s.PGSQL.5432.lock")]);
        let all = host_sockets();
        for path in ["/run/postgresql", "/var/run/mysqld", "/run/redis"] {
            assert!(all.contains(&PathBuf::from(path)), "{path} missing");
        }
    }
}
