//! Where PostgreSQL's programs are, and running them.
//!
//! The server's programs (`initdb`, `postgres`) are looked for in
//! `AGENTRY_PG_BIN` if set, then in Debian's `/usr/lib/postgresql/<major>/bin`
//! (the newest major), then on `PATH` (a link such as `/usr/local/bin/initdb`
//! is followed to its real folder). The client programs (`psql`,
//! `pg_isready`) come from the same folder when it has them, else from
//! `PATH`. Nothing found is a panic that says how to install them: a test that
//! needs the server fails without it, never passes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The environment variable naming a folder with `initdb` and `postgres`.
pub const BIN_ENV: &str = "AGENTRY_PG_BIN";

/// What to do when no server is found.
const INSTALL: &str = "install Debian's `postgresql` package (`apt-get install postgresql`) \
     or set AGENTRY_PG_BIN to a folder holding initdb and postgres; \
     `.ci/run` installs the package and runs the tests that need it";

/// The folder of PostgreSQL's server programs.
#[derive(Debug, Clone)]
pub(crate) struct Programs {
    bin: PathBuf,
}

impl Programs {
    /// Finds the server's programs, or panics naming the package to install.
    pub(crate) fn find() -> Programs {
        if let Some(dir) = std::env::var_os(BIN_ENV) {
            let bin = PathBuf::from(dir);
            if !has_server(&bin) {
                panic!(
                    "{BIN_ENV}={} holds no initdb and postgres: {INSTALL}",
                    bin.display()
                );
            }
            return Programs { bin };
        }
        match debian_bin().or_else(path_bin) {
            Some(bin) => Programs { bin },
            None => panic!(
                "no PostgreSQL server found (initdb and postgres, looked in \
                 /usr/lib/postgresql/*/bin and PATH): {INSTALL}"
            ),
        }
    }

    /// One of PostgreSQL's programs: beside the server's, else on `PATH`.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        let beside = self.bin.join(name);
        if beside.is_file() {
            return beside;
        }
        on_path(name).unwrap_or(beside)
    }

    /// A command for one of PostgreSQL's programs, with the client's
    /// environment cleared of anything that would point it elsewhere.
    pub(crate) fn command(&self, name: &str) -> Command {
        let mut command = Command::new(self.path(name));
        for var in [
            "PGHOST",
            "PGHOSTADDR",
            "PGPORT",
            "PGUSER",
            "PGDATABASE",
            "PGPASSWORD",
            "PGSERVICE",
            "PGSERVICEFILE",
            "PGOPTIONS",
            "PGDATA",
        ] {
            command.env_remove(var);
        }
        // No password from a file of the user's: the tests' URLs carry
        // theirs (a missing file is skipped quietly, /dev/null is not).
        command.env("PGPASSFILE", "/nonexistent/.pgpass");
        command.env("PGCONNECT_TIMEOUT", "10");
        command.stdin(Stdio::null());
        command
    }
}

/// Runs `command` to its end; panics with its output unless it succeeded.
pub(crate) fn run(command: &mut Command, what: &str) -> Output {
    let output = match command.output() {
        Ok(output) => output,
        Err(error) => panic!("{what}: cannot run {:?}: {error}", command.get_program()),
    };
    if !output.status.success() {
        panic!(
            "{what}: {:?} failed ({}): {}{}",
            command.get_program(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// The newest `/usr/lib/postgresql/<major>/bin` with a server in it.
fn debian_bin() -> Option<PathBuf> {
    let entries = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin)
}

/// The real folder of the first `initdb` on `PATH`, if it has `postgres`.
fn path_bin() -> Option<PathBuf> {
    let initdb = std::fs::canonicalize(on_path("initdb")?).ok()?;
    let bin = initdb.parent()?.to_path_buf();
    has_server(&bin).then_some(bin)
}

fn on_path(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name.as_ref()))
        .find(|candidate| candidate.is_file())
}
