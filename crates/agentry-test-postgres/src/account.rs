//! The operating-system account the server runs as.
//!
//! PostgreSQL refuses to run as root (`initdb` and `postgres` both check), so
//! a test process running as root starts them as the `postgres` system user,
//! which Debian's package creates; any other user runs them as itself.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// A user and group to switch to before exec.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Account {
    uid: u32,
    gid: u32,
}

impl Account {
    /// `None` when this process is not root (the server runs as its user);
    /// the `postgres` user's ids when it is. Panics when root and there is
    /// no such user.
    pub(crate) fn for_server() -> Option<Account> {
        // The owner of /proc/self is this process's effective user.
        let root = std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0);
        if !root {
            return None;
        }
        match lookup("postgres") {
            Some(account) => Some(account),
            None => panic!(
                "running as root, PostgreSQL must run as another user, and there is \
                 no `postgres` user in /etc/passwd: install Debian's `postgresql` \
                 package (it creates the user), or run the tests as a normal user"
            ),
        }
    }

    /// Makes `command` run as this account (std drops the supplementary
    /// groups when root changes its uid).
    pub(crate) fn apply(self, command: &mut Command) {
        command.uid(self.uid).gid(self.gid);
    }

    /// Gives `path` to this account.
    pub(crate) fn own(self, path: &Path) {
        if let Err(error) = std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid)) {
            panic!(
                "cannot give {} to the postgres user: {error}",
                path.display()
            );
        }
    }
}

/// The ids of `name` in /etc/passwd (`name:x:uid:gid:...`).
fn lookup(name: &str) -> Option<Account> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some(Account { uid, gid })
    })
}
