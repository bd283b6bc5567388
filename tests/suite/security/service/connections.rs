//! Connections a client can hold: idle and half-sent ones, stalls, SIGTERM
//! with stalled connections, a large create beside other requests.

use super::*;

/// With 256 file descriptors, 300 connections that send nothing, half a head or
/// half a body used to take every descriptor: no request was answered again.
/// Now at most `--max-connections` are open and, at the limit, the oldest idle
/// one is closed to let a new one in: a real request is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_do_not_starve_a_real_client() -> Result<(), TestError> {
    let service = Service::launch(Launch {
        args: vec!["--max-connections", "64"],
        max_files: Some(256),
        ..Launch::default()
    })?;
    let host = service.addr.to_string();
    let mut held = Vec::new();
    for i in 0..300 {
        let mut stream = TcpStream::connect(service.addr).await?;
        match i % 3 {
            0 => {}
            1 => {
                let head = format!("GET /runs/x HTTP/1.1\r\nHost: {host}\r\nX-Slow: ");
                stream.write_all(head.as_bytes()).await?;
            }
            _ => {
                let head = format!(
                    "POST /runs/x/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"te"
                );
                stream.write_all(head.as_bytes()).await?;
            }
        }
        held.push(stream);
    }
    let started = Instant::now();
    for _ in 0..3 {
        let raw = service.raw(&get("/runs/nope", &host, "")).await?;
        assert_eq!(raw.status, 404, "{raw:?}");
    }
    eprintln!(
        "answered in {:?} with 300 connections held",
        started.elapsed()
    );
    Ok(())
}

/// A connection that sends nothing, stops halfway through its head or its body,
/// or idles after a request is closed by the server, within ten times the
/// timeouts given (1 s each here). The half-sent body gets a 408 first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_are_closed_by_the_server() -> Result<(), TestError> {
    let service = Service::start(&["--header-timeout", "1s", "--body-timeout", "1s"])?;
    let host = service.addr.to_string();
    let within = Duration::from_secs(10);

    let idle = async {
        let mut stream = TcpStream::connect(service.addr).await?;
        closed_by_server(&mut stream, within).await
    };
    let half_head = async {
        let mut stream = TcpStream::connect(service.addr).await?;
        stream
            .write_all(format!("GET /runs/x HTTP/1.1\r\nHost: {host}\r\n").as_bytes())
            .await?;
        closed_by_server(&mut stream, within).await
    };
    let half_body = async {
        let mut stream = TcpStream::connect(service.addr).await?;
        let head = format!(
            "POST /runs/x/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"te"
        );
        stream.write_all(head.as_bytes()).await?;
        let raw = read_response(&mut stream).await?;
        closed_by_server(&mut stream, within).await?;
        Ok::<_, TestError>(raw)
    };
    let kept_alive = async {
        let mut stream = TcpStream::connect(service.addr).await?;
        let request = format!("GET /runs/nope HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let raw = read_response(&mut stream).await?;
        closed_by_server(&mut stream, within).await?;
        Ok::<_, TestError>(raw)
    };
    let (idle, half_head, half_body, kept_alive) =
        tokio::join!(idle, half_head, half_body, kept_alive);
    assert!(idle?.is_empty());
    let half_head = half_head?;
    assert!(
        half_head.is_empty() || String::from_utf8_lossy(&half_head).starts_with("HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&half_head)
    );
    let half_body = half_body?;
    assert_eq!(half_body.status, 408, "{half_body:?}");
    assert!(half_body.error()?.contains("--body-timeout"));
    assert_eq!(kept_alive?.status, 404);
    Ok(())
}

/// SIGTERM stops the service at once even with connections that sent nothing
/// or half a head (hyper's graceful shutdown would wait them out, until the
/// 10 s grace); an open event stream still ends with its run's `run_stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_not_held_up_by_stalled_connections() -> Result<(), TestError> {
    let mut service = Service::start(&[])?;
    let host = service.addr.to_string();
    let id = service.create(&listener_task()).await?;
    let mut idle = TcpStream::connect(service.addr).await?;
    let mut half = TcpStream::connect(service.addr).await?;
    half.write_all(format!("GET /runs/x HTTP/1.1\r\nHost: {host}\r\n").as_bytes())
        .await?;
    let mut events = TcpStream::connect(service.addr).await?;
    events
        .write_all(format!("GET /runs/{id}/events HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let head = read_response(&mut events).await?;
    assert_eq!(head.status, 200, "{head:?}");

    let signalled = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &service.child.id().to_string()])
        .status()?;
    assert!(killed.success());
    let stream = closed_by_server(&mut events, WAIT).await?;
    let stream = String::from_utf8_lossy(&stream);
    assert!(stream.contains("user_abort"), "{stream}");
    closed_by_server(&mut idle, WAIT).await?;
    closed_by_server(&mut half, WAIT).await?;
    let exited = loop {
        if let Some(status) = service.child.try_wait()? {
            break status;
        }
        assert!(signalled.elapsed() < WAIT, "the service did not exit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(exited.success(), "{exited}");
    // Well under the 10 s the grace (and the header timeout) would have taken.
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
    Ok(())
}

/// The service wrote a request's `files` on its async workers, so one large
/// create held up every other request. With one async worker
/// (`TOKIO_WORKER_THREADS=1`), an unrelated GET is answered while the files of a
/// large create are still being written (seen in its working directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_create_does_not_hold_up_other_requests() -> Result<(), TestError> {
    const FILES: usize = 4000;
    let tmp = tempfile::tempdir()?;
    let service = Service::launch(Launch {
        env: vec![
            ("TOKIO_WORKER_THREADS", "1".into()),
            ("TMPDIR", tmp.path().display().to_string()),
        ],
        ..Launch::default()
    })?;
    let files: serde_json::Map<String, Value> = (0..FILES)
        .map(|i| (format!("f{i:05}.txt"), Value::String("a".repeat(2048))))
        .collect();
    let task = json!({"goal": "g", "files": files, "script": {"turns": [finish("ok")]}});
    let create = {
        let client = service.client.clone();
        let url = service.url("/runs");
        tokio::spawn(async move {
            // What is checked is the order (the GET first), not how long the
            // create takes: a loaded machine may take minutes to write it.
            let response = client
                .post(url)
                .header("content-type", "application/json")
                .body(task.to_string())
                .timeout(Duration::from_secs(300))
                .send()
                .await?;
            Ok::<_, reqwest::Error>(response.status().as_u16())
        })
    };
    // Progress: the working directory exists and holds a first file.
    let deadline = Instant::now() + WAIT;
    let workdir = loop {
        let found = std::fs::read_dir(run_dirs(tmp.path()))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_some()));
        if let Some(dir) = found {
            break dir;
        }
        assert!(Instant::now() < deadline, "no file was ever written");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let seen = Instant::now();
    let (status, body) = service.get("/runs/nope").await?;
    let written = std::fs::read_dir(&workdir)?.count();
    let answered = seen.elapsed();
    assert_eq!(status, 404, "{body}");
    assert!(
        written < FILES,
        "the GET was answered only after all {FILES} files were written"
    );
    assert_eq!(create.await??, 201);
    eprintln!(
        "GET answered in {answered:?} with {written} of {FILES} files written; all written after {:?}",
        seen.elapsed()
    );
    assert_eq!(std::fs::read_dir(&workdir)?.count(), FILES);
    Ok(())
}
