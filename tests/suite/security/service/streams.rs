//! Event streams a client can hold: each holds its connection for as long as
//! its run lives, so they are bounded per run and in total, and the oldest
//! make room for new ones.

use super::*;

/// Opens `GET /runs/{id}/events` on a new connection; returns it once the
/// answer's head (200) has arrived.
async fn open_stream(service: &Service, id: &str) -> Result<TcpStream, TestError> {
    let host = service.addr.to_string();
    let mut stream = TcpStream::connect(service.addr).await?;
    let request = format!("GET /runs/{id}/events HTTP/1.1\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let head = read_response(&mut stream).await?;
    if head.status != 200 {
        return Err(format!("the stream of {id} was refused: {head:?}").into());
    }
    Ok(stream)
}

/// Reads `stream` until its chunked body ends (or the server closes it);
/// fails after [`WAIT`].
async fn ended(stream: &mut TcpStream) -> Result<(), TestError> {
    let mut got = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
            if got.ends_with(b"\r\n0\r\n\r\n") {
                return;
            }
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .map_err(|_| "the stream was not ended".into())
}

/// Reads `stream` until an `input_applied` event (the run took a message):
/// the stream is still open. Fails if it ends first, or after [`WAIT`].
async fn still_open(stream: &mut TcpStream) -> Result<(), TestError> {
    let mut got = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await?;
            got.extend_from_slice(&chunk[..n]);
            if n == 0 || got.ends_with(b"\r\n0\r\n\r\n") {
                return Err(TestError::from("the stream had ended"));
            }
            if String::from_utf8_lossy(&got).contains("event: input_applied") {
                return Ok(());
            }
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .map_err(|_| "no input_applied on the stream")?
}

/// 1,024 open event streams of sleeping runs held every connection: a
/// `GET /metrics` waited 16 s. Now, with 300 streams opened over 20 sleeping
/// runs past `--max-streams 64`, the oldest are ended to make room (the
/// connections past the streams are kept for short requests): `/metrics`
/// answers (5 s is the failure bound, not a measure), the oldest streams
/// have ended and the newest still follow their run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_event_streams_do_not_starve_other_clients() -> Result<(), TestError> {
    const RUNS: usize = 20;
    const STREAMS: usize = 300;
    const MAX: usize = 64;
    let service = Service::start(&["--max-connections", "128", "--max-streams", "64"])?;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(service.create(&listener_task()).await?);
    }
    let mut streams = Vec::new();
    for i in 0..STREAMS {
        // Round the runs, so each holds fewer than its own bound (16).
        streams.push(open_stream(&service, &runs[i % RUNS]).await?);
    }
    let host = service.addr.to_string();
    let metrics = tokio::time::timeout(
        Duration::from_secs(5),
        service.raw(&get("/metrics", &host, "")),
    )
    .await
    .map_err(|_| "GET /metrics was not answered with the streams open")??;
    assert_eq!(metrics.status, 200, "{metrics:?}");

    for stream in &mut streams[..STREAMS - MAX] {
        ended(stream).await?;
    }
    // The newest stream of the last run still follows it.
    let last = STREAMS - 1;
    let (status, body) = service
        .post(
            &format!("/runs/{}/messages", runs[last % RUNS]),
            &json!({"text": "still there?"}),
        )
        .await?;
    assert_eq!(status, 202, "{body}");
    still_open(&mut streams[last]).await?;
    Ok(())
}

/// Past `--max-streams-per-run`, a new stream of the run ends that run's
/// oldest; the others, and other runs' streams, stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_streams_are_bounded_on_their_own() -> Result<(), TestError> {
    let service = Service::start(&["--max-streams-per-run", "2"])?;
    let busy = service.create(&listener_task()).await?;
    let other = service.create(&listener_task()).await?;
    let mut other_stream = open_stream(&service, &other).await?;
    let mut first = open_stream(&service, &busy).await?;
    let mut second = open_stream(&service, &busy).await?;
    let mut third = open_stream(&service, &busy).await?;
    ended(&mut first).await?;
    for id in [&busy, &other] {
        let (status, body) = service
            .post(&format!("/runs/{id}/messages"), &json!({"text": "hi"}))
            .await?;
        assert_eq!(status, 202, "{body}");
    }
    for stream in [&mut second, &mut third, &mut other_stream] {
        still_open(stream).await?;
    }
    Ok(())
}
