//! The harness against a real PostgreSQL server: it starts, clients
//! authenticate with the role's password, databases are apart, a restart
//! keeps the data, and the server dies with the process that started it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentry_test_postgres::PgServer;

/// Set in the child process of `a_server_dies_with_the_process_that_started_it`.
const CHILD_ENV: &str = "AGENTRY_TEST_POSTGRES_CHILD";

/// Before the child's server's port and data directory on its stdout.
const MARKER: &str = "agentry-test-postgres child server:";

/// `psql` with `url` (its password included), no password from anywhere else.
fn psql(url: &str, sql: &str) -> Output {
    Command::new("psql")
        .args([
            "-X",
            "-q",
            "-At",
            "-w",
            "-v",
            "ON_ERROR_STOP=1",
            url,
            "-c",
            sql,
        ])
        .env_remove("PGPASSWORD")
        .env("PGPASSFILE", "/nonexistent/.pgpass")
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(Stdio::null())
        .output()
        .expect("run psql (Debian's postgresql-client, installed with postgresql)")
}

/// `psql`'s output, asserting it succeeded.
fn query(url: &str, sql: &str) -> String {
    let output = psql(url, sql);
    assert!(
        output.status.success(),
        "psql {url} -c {sql:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .trim_end()
        .to_owned()
}

fn accepts(port: u16) -> bool {
    TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok()
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_database_url_connects_with_its_password_and_only_with_it() {
    let server = PgServer::shared();
    let url = server.database();
    let db = url.rsplit('/').next().expect("a database name");
    let prefix = "postgres://agentry:";
    assert!(url.starts_with(prefix), "{url}");
    assert!(
        url.contains(&format!("@127.0.0.1:{}/", server.port())),
        "{url}"
    );
    assert_eq!(
        query(&url, "select current_user, current_database()"),
        format!("agentry|{db}")
    );
    // TCP connections are password-checked with SCRAM, and only that.
    let methods = server.superuser_sql(
        "postgres",
        "select distinct auth_method from pg_hba_file_rules where type = 'host'",
    );
    assert_eq!(methods, "scram-sha-256");

    let password = url[prefix.len()..].split('@').next().expect("a password");
    let wrong = url.replacen(password, "not-the-password", 1);
    let refused = psql(&wrong, "select 1");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );

    let without = url.replacen(&format!(":{password}@"), "@", 1);
    let refused = psql(&without, "select 1");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("no password supplied"), "{stderr}");
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn two_databases_are_apart() {
    let server = PgServer::shared();
    // Tests take theirs at the same time.
    let urls: Vec<String> = std::thread::scope(|scope| {
        let takers: Vec<_> = (0..8).map(|_| scope.spawn(|| server.database())).collect();
        takers
            .into_iter()
            .map(|taker| taker.join().unwrap())
            .collect()
    });
    let distinct: std::collections::HashSet<&String> = urls.iter().collect();
    assert_eq!(distinct.len(), urls.len(), "{urls:?}");
    let (one, two) = (&urls[0], &urls[1]);
    query(
        one,
        "create table marks (n int); insert into marks values (7)",
    );
    assert_eq!(query(one, "select n from marks"), "7");
    assert_eq!(query(two, "select to_regclass('marks') is null"), "t");
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn the_shared_server_is_one_per_process() {
    let first = PgServer::shared();
    assert!(std::ptr::eq(first, PgServer::shared()));
    assert!(first.is_running());
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn stop_and_start_again_keep_the_data_and_the_port() {
    let server = PgServer::start();
    let url = server.database();
    query(
        &url,
        "create table kept (word text); insert into kept values ('still here')",
    );
    let port = server.port();

    server.stop();
    assert!(!server.is_running());
    assert!(!accepts(port), "port {port} still accepts after stop");
    let refused = psql(&url, "select 1");
    assert!(!refused.status.success());

    server.start_again();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(query(&url, "select word from kept"), "still here");

    let dir = server.data_dir().to_path_buf();
    drop(server);
    assert!(!dir.exists(), "{} outlived its server", dir.display());
    assert!(!accepts(port), "port {port} still accepts after drop");
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn start_again_on_a_port_taken_meanwhile_fails_naming_it() {
    let server = PgServer::start();
    let url = server.database();
    server.stop();
    let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, server.port())).expect("take the port");
    let failed = std::panic::catch_unwind(|| server.start_again()).expect_err("start_again failed");
    let message = failed
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    // Told by the server's own failure, not by the readiness timeout.
    assert!(
        message.contains("was taken while the server was stopped"),
        "{message}"
    );
    assert!(message.contains("could not bind"), "{message}");
    assert!(!server.is_running());

    drop(squatter);
    server.start_again();
    assert_eq!(query(&url, "select 1"), "1");
}

/// Child: starts a server, says where it is, and waits to be SIGKILLed.
/// Parent: runs this test again as that child, SIGKILLs it, and sees the
/// server go (its port closed, its data directory removed).
#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_server_dies_with_the_process_that_started_it() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let server = PgServer::start();
        // On the line libtest began ("test NAME ... "), hence the marker.
        println!("{MARKER} {} {}", server.port(), server.data_dir().display());
        // Time passing is the scenario: the parent kills this process long
        // before; if it does not, the test fails here.
        std::thread::sleep(Duration::from_secs(120));
        panic!("the child was not killed");
    }
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "a_server_dies_with_the_process_that_started_it",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().expect("the child's stdout");
    let (lines, line) = mpsc::channel();
    std::thread::spawn(move || {
        for read in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(read).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let (port, dir) = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let read = line.recv_timeout(left);
        let read = read.unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the child printed no server within 90 s")
        });
        if let Some((_, rest)) = read.split_once(&format!("{MARKER} ")) {
            let (port, dir) = rest.split_once(' ').expect("port and directory");
            break (port.parse::<u16>().expect("a port"), PathBuf::from(dir));
        }
    };
    assert!(
        accepts(port),
        "the child's server does not accept on {port}"
    );
    assert!(dir.is_dir());

    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");

    let deadline = Instant::now() + Duration::from_secs(60);
    while (accepts(port) || dir.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !accepts(port),
        "the server on {port} outlived its SIGKILLed process"
    );
    assert!(
        !dir.exists(),
        "{} outlived its SIGKILLed process",
        dir.display()
    );
}
