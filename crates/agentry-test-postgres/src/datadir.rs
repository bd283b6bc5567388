//! The data directory: made by `initdb` in a temporary folder, given our own
//! authentication rules, and holding the server's log (read back for a
//! failure's message) and its Unix socket.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::account::Account;
use crate::programs::{Programs, run};

/// The superuser `initdb` creates; the harness's own commands use it, over
/// the Unix socket only.
pub(crate) const SUPERUSER: &str = "postgres";

/// The server's log, in the data directory.
const LOG: &str = "server.log";

/// How many of the log's last lines a failure shows.
const TAIL_LINES: usize = 40;

/// The superuser over the private socket without a password (the socket's
/// folder is the data directory, mode 0700: only its owner and root reach
/// it); every TCP client, on 127.0.0.1 only, with its password.
const HBA: &str = "\
# agentry-test-postgres: the harness's own commands over the private socket;
# every TCP client with its password (SCRAM), on 127.0.0.1 only.
local all all trust
host all all 127.0.0.1/32 scram-sha-256
";

/// A data directory, removed when dropped.
#[derive(Debug)]
pub(crate) struct DataDir {
    dir: TempDir,
}

impl DataDir {
    /// Runs `initdb` into a fresh temporary folder as `account`.
    pub(crate) fn create(programs: &Programs, account: Option<Account>) -> DataDir {
        let dir = match tempfile::Builder::new().prefix("agentry-pg-").tempdir() {
            Ok(dir) => dir,
            Err(error) => panic!("cannot make a temporary data directory: {error}"),
        };
        if let Some(account) = account {
            account.own(dir.path());
        }
        let mut initdb = programs.command("initdb");
        initdb
            .arg("-D")
            .arg(dir.path())
            .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"])
            // The template's files need not survive a machine crash; the
            // server itself runs with fsync on.
            .args(["--no-sync", "--no-instructions"])
            // A folder the postgres user may enter (not the test's).
            .current_dir("/");
        if let Some(account) = account {
            account.apply(&mut initdb);
        }
        run(&mut initdb, "initdb");
        // initdb made the file as the server's user: writing keeps its owner.
        let hba = dir.path().join("pg_hba.conf");
        if let Err(error) = std::fs::write(&hba, HBA) {
            panic!("cannot write {}: {error}", hba.display());
        }
        DataDir { dir }
    }

    /// The data directory (also the Unix socket's folder).
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file.
    pub(crate) fn log(&self) -> PathBuf {
        self.dir.path().join(LOG)
    }

    /// How long the log is now: a start reads only what follows.
    pub(crate) fn log_len(&self) -> u64 {
        std::fs::metadata(self.log()).map_or(0, |meta| meta.len())
    }

    /// The log from `offset` on.
    pub(crate) fn log_since(&self, offset: u64) -> String {
        let mut text = Vec::new();
        let read = std::fs::File::open(self.log()).and_then(|mut file| {
            file.seek(SeekFrom::Start(offset))?;
            file.read_to_end(&mut text)
        });
        match read {
            Ok(_) => String::from_utf8_lossy(&text).into_owned(),
            Err(error) => format!("(cannot read {}: {error})", self.log().display()),
        }
    }

    /// The log's last lines, for a failure's message.
    pub(crate) fn log_tail(&self) -> String {
        let log = self.log_since(0);
        let lines: Vec<&str> = log.lines().collect();
        let first = lines.len().saturating_sub(TAIL_LINES);
        lines[first..].join("\n")
    }
}
