//! A private PostgreSQL server for agentry's tests.
//!
//! Tests of the Postgres store and of a cluster of `agentry serve` nodes need
//! a real server: [`PgServer`] starts one from the system's PostgreSQL
//! binaries (Debian's `postgresql` package) in a temporary data directory,
//! listening on 127.0.0.1 only, on a free port. Clients authenticate for real:
//! the role `agentry` has a password, checked with SCRAM-SHA-256 over TCP. The
//! server dies with the test process, however that process ends (see
//! `watchdog.rs`), and its data directory goes with it.
//!
//! - [`PgServer::shared`]: one server for the whole test process, started on
//!   first use; each test takes a fresh database from it with
//!   [`PgServer::database`].
//! - [`PgServer::start`]: a server of the test's own, to stop and start again
//!   ([`PgServer::stop`], [`PgServer::start_again`]) or to share between
//!   several processes the test starts; stopped when dropped.
//!
//! Tests that need it are ignored by default, with the reason, and `.ci/run`
//! (which installs the package when missing) runs them:
//!
//! ```no_run
//! use agentry_test_postgres::PgServer;
//!
//! #[test]
//! #[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
//! fn stores_a_run() {
//!     let url = PgServer::shared().database();
//!     // postgres://agentry:PASSWORD@127.0.0.1:PORT/agentry_1234_1
//!     # let _ = url;
//! }
//! ```
//!
//! Every call blocks (a start takes about a second, a database tens of
//! milliseconds): from async code, call it before the runtime's work or in
//! `spawn_blocking`.
//!
//! Without the binaries every call panics with a message naming the package:
//! a test that needs the server fails, never passes.
//!
//! The server's settings for tests: `fsync` on (durability is what the tests
//! check), `max_connections = 200` (several nodes' pools against one server),
//! `shared_buffers = 32MB`, its log in `server.log` in the data directory (the
//! tail is in the panic message when it does not start).
//!
//! # Layout
//! - `programs.rs`: where the binaries are (`AGENTRY_PG_BIN`, then
//!   `/usr/lib/postgresql/*/bin`, then `PATH`), running them.
//! - `account.rs`: as root, the server runs as the `postgres` user.
//! - `datadir.rs`: `initdb`, the authentication rules, the log.
//! - `watchdog.rs`: the shell that ends the server with the test process.

mod account;
mod datadir;
mod programs;
mod watchdog;

use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

pub use programs::BIN_ENV;

use account::Account;
use datadir::{DataDir, SUPERUSER};
use programs::{Programs, run};
use watchdog::Watchdog;

/// The role tests connect as (with [`PgServer::url`]'s password).
pub const ROLE: &str = "agentry";

/// How long a start may take before it is a failure.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// How many free ports a start tries (another process may take the port
/// between the pick and the server's bind).
const PORT_ATTEMPTS: usize = 5;

/// A PostgreSQL server of the tests' own, on 127.0.0.1.
#[derive(Debug)]
pub struct PgServer {
    programs: Programs,
    account: Option<Account>,
    port: u16,
    password: String,
    /// The running server; `None` while stopped.
    running: Mutex<Option<Watchdog>>,
    next_database: AtomicU64,
    /// Last, so it is removed after the server stopped.
    data: DataDir,
}

/// How one attempt to start the server ended.
enum Launch {
    Ready(Watchdog),
    /// The port was taken before the server bound it.
    PortTaken,
}

impl PgServer {
    /// The test process's server, started on first use and stopped when the
    /// process ends (its watchdog sees the process go, even on SIGKILL).
    /// Take a database of your own from it with [`PgServer::database`]; do
    /// not stop it.
    pub fn shared() -> &'static PgServer {
        static SHARED: OnceLock<PgServer> = OnceLock::new();
        SHARED.get_or_init(PgServer::start)
    }

    /// A server of its own, ready for connections: a fresh data directory,
    /// a free port, the role [`ROLE`] with a random password. Stopped, and
    /// its data directory removed, when dropped. Panics when PostgreSQL is
    /// not installed or does not start (with its log's tail).
    pub fn start() -> PgServer {
        let programs = Programs::find();
        let account = Account::for_server();
        let data = DataDir::create(&programs, account);
        let mut server = PgServer {
            programs,
            account,
            port: free_port(),
            password: password(),
            running: Mutex::new(None),
            next_database: AtomicU64::new(1),
            data,
        };
        for _ in 0..PORT_ATTEMPTS {
            match server.launch() {
                Launch::Ready(watchdog) => {
                    *server
                        .running
                        .get_mut()
                        .unwrap_or_else(PoisonError::into_inner) = Some(watchdog);
                    server.create_role();
                    return server;
                }
                Launch::PortTaken => server.port = free_port(),
            }
        }
        panic!("PostgreSQL could not bind a free port on 127.0.0.1 in {PORT_ATTEMPTS} attempts")
    }

    /// A fresh database, owned by [`ROLE`], with a name no other call of
    /// this server gives; its URL
    /// (`postgres://agentry:PASSWORD@127.0.0.1:PORT/NAME`).
    pub fn database(&self) -> String {
        let n = self.next_database.fetch_add(1, Ordering::Relaxed);
        let name = format!("agentry_{}_{n}", std::process::id());
        self.superuser_sql(
            "postgres",
            &format!("CREATE DATABASE \"{name}\" OWNER \"{ROLE}\""),
        );
        self.url(&name)
    }

    /// The server's TCP port on 127.0.0.1 (the same after
    /// [`PgServer::start_again`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` as [`ROLE`], with its password.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{ROLE}:{}@127.0.0.1:{}/{db}",
            self.password, self.port
        )
    }

    /// The data directory (removed when the server is dropped, or when the
    /// test process ends with the shared server).
    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// Runs `sql` in database `db` as the superuser (over the private
    /// socket), for what [`ROLE`] may not do — e.g. end other sessions.
    /// Returns its output, unaligned (`psql -At`); panics if it fails.
    pub fn superuser_sql(&self, db: &str, sql: &str) -> String {
        let mut psql = self.programs.command("psql");
        psql.args([
            "-X",
            "-q",
            "-At",
            "-w",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            SUPERUSER,
        ])
        .arg("-h")
        .arg(self.data.path())
        .args(["-p", &self.port.to_string(), "-d", db, "-c", sql]);
        let output = run(&mut psql, "psql as the superuser");
        String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned()
    }

    /// Stops the server (fast shutdown: sessions are ended, a checkpoint is
    /// written) and waits until it has exited. The data stays for
    /// [`PgServer::start_again`]. Does nothing if it is stopped.
    pub fn stop(&self) {
        let Some(mut watchdog) = self.running().take() else {
            return;
        };
        if !watchdog.stop(true) {
            panic!(
                "PostgreSQL did not stop within its shutdown time and was killed; its log:\n{}",
                self.data.log_tail()
            );
        }
    }

    /// Starts the stopped server again on the same data directory and port,
    /// and waits until it accepts connections. Panics if it is running, or
    /// does not start (the port taken meanwhile, with its log's tail).
    pub fn start_again(&self) {
        let mut running = self.running();
        if running.is_some() {
            panic!(
                "start_again: the PostgreSQL server on port {} is running",
                self.port
            );
        }
        match self.launch() {
            Launch::Ready(watchdog) => *running = Some(watchdog),
            Launch::PortTaken => panic!(
                "start_again: port {} was taken while the server was stopped; its log:\n{}",
                self.port,
                self.data.log_tail()
            ),
        }
    }

    /// Whether the server runs and accepts connections now.
    pub fn is_running(&self) -> bool {
        let mut running = self.running();
        match running.as_mut() {
            Some(watchdog) => !watchdog.server_exited() && self.accepts(),
            None => false,
        }
    }

    fn running(&self) -> MutexGuard<'_, Option<Watchdog>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts `postgres` under its watchdog and waits until it accepts
    /// connections on its socket (it binds its TCP port before it makes the
    /// socket, so the port is its own by then).
    fn launch(&self) -> Launch {
        let offset = self.data.log_len();
        let postgres = self.programs.path("postgres");
        let mut watchdog =
            Watchdog::spawn(&postgres, &self.server_args(), &self.data, self.account);
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if watchdog.server_exited() {
                let log = self.data.log_since(offset);
                // Keep the data directory for another attempt.
                watchdog.stop(true);
                if log.contains("could not create any TCP/IP sockets") {
                    return Launch::PortTaken;
                }
                panic!(
                    "PostgreSQL exited while starting on port {}; its log:\n{log}",
                    self.port
                );
            }
            if self.accepts() {
                return Launch::Ready(watchdog);
            }
            if Instant::now() > deadline {
                watchdog.stop(true);
                panic!(
                    "PostgreSQL did not accept connections within {READY_WITHIN:?} on port {}; its log:\n{}",
                    self.port,
                    self.data.log_since(offset)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's command line: 127.0.0.1 and the socket in the data
    /// directory only, and the tests' settings.
    fn server_args(&self) -> Vec<String> {
        let dir = self.data.path().display().to_string();
        let mut args = vec![
            "-D".to_owned(),
            dir.clone(),
            "-p".to_owned(),
            self.port.to_string(),
            "-h".to_owned(),
            "127.0.0.1".to_owned(),
            "-k".to_owned(),
            dir,
        ];
        for setting in [
            // Durability is what the store's tests check.
            "fsync=on",
            "synchronous_commit=on",
            // Several processes' pools against one server.
            "max_connections=200",
            "shared_buffers=32MB",
            "password_encryption=scram-sha-256",
            "logging_collector=off",
            "log_min_messages=warning",
            "log_line_prefix=%m [%p] ",
        ] {
            args.push("-c".to_owned());
            args.push(setting.to_owned());
        }
        args
    }

    /// `pg_isready` on the private socket.
    fn accepts(&self) -> bool {
        let mut ready = self.programs.command("pg_isready");
        ready
            .args(["-q", "-t", "2", "-U", SUPERUSER, "-d", "postgres"])
            .arg("-h")
            .arg(self.data.path())
            .args(["-p", &self.port.to_string()]);
        match ready.status() {
            Ok(status) => status.success(),
            Err(error) => panic!("cannot run {:?}: {error}", ready.get_program()),
        }
    }

    fn create_role(&self) {
        self.superuser_sql(
            "postgres",
            &format!("CREATE ROLE \"{ROLE}\" LOGIN PASSWORD '{}'", self.password),
        );
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(mut watchdog) = self.running().take() {
            watchdog.stop(false);
        }
    }
}

/// A port free on 127.0.0.1 now (the server binds it a moment later; a
/// clash is retried with another).
fn free_port() -> u16 {
    match TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|listener| listener.local_addr()) {
        Ok(addr) => addr.port(),
        Err(error) => panic!("cannot find a free port on 127.0.0.1: {error}"),
    }
}

/// A random password (hex, so it needs no escaping in a URL or in SQL).
fn password() -> String {
    let seed = (std::process::id(), SystemTime::now());
    let a = RandomState::new().hash_one(seed);
    let b = RandomState::new().hash_one((a, seed));
    format!("{a:016x}{b:016x}")
}
