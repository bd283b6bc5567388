//! Memory a client can make the service hold: stopped runs' history and
//! handles, how many stopped runs are kept, a paused run's input.

use super::*;

/// A run that read a 256 KiB file 100 times (25 MiB of tool results) used to
/// keep every result in its replay buffer after it stopped. Stopped, it keeps
/// its outcome and at most `--stopped-replay-bytes` of history: the replay a
/// late client gets is that small, and the service's memory (measured: RSS,
/// with glibc returning large blocks as they are freed) goes back down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_keeps_a_bounded_history() -> Result<(), TestError> {
    const READS: usize = 100;
    const FILE: usize = 256 * 1024;
    let service = Service::launch(Launch {
        env: vec![("MALLOC_MMAP_THRESHOLD_", "65536".into())],
        ..Launch::default()
    })?;
    let mut turns: Vec<Value> = (0..READS)
        .map(|i| json!({"tool_calls": [{"id": format!("r{i}"), "name": "fs.read", "arguments": {"path": "big.txt"}}]}))
        .collect();
    turns.push(finish("read it"));
    let task = json!({
        "goal": "read big.txt, many times",
        "budget": {"max_steps": READS + 5, "max_tool_calls": READS + 5, "deadline": "120s"},
        "tools": {"grant": ["fs.read"]},
        "progress": {"window": 0},
        "files": {"big.txt": "a".repeat(FILE)},
        "script": {"turns": turns}
    });
    // Warm up (allocator arenas, the runtime's first run), then measure from here.
    let warm = service
        .create(&json!({"goal": "g", "script": {"turns": [finish("ok")]}}))
        .await?;
    service
        .wait_for(&warm, |v| v["status"] == "stopped")
        .await?;
    let before = service.rss()?;

    let id = service.create(&task).await?;
    let view = service.wait_for(&id, |v| v["status"] == "stopped").await?;
    assert_eq!(view["outcome"]["stop_reason"], "done", "{view}");
    assert_eq!(view["steps"], READS as u64 + 1);

    let events = service.url(&format!("/runs/{id}/events"));
    // Read to the end once: the stream ends at the stop, and the log is shrunk
    // in the same step as the stop enters it.
    service.client.get(&events).send().await?.bytes().await?;
    let replay = service.client.get(&events).send().await?.bytes().await?;
    let replay = String::from_utf8(replay.to_vec())?;
    assert!(
        replay.len() < 512 * 1024,
        "replay of {} bytes",
        replay.len()
    );
    assert!(
        replay.contains("event: run_stopped"),
        "the replay ends with the stop"
    );
    assert!(
        !replay.contains("\nid: 1\n"),
        "the oldest events were dropped"
    );

    let after = service.rss()?;
    let kept = after.saturating_sub(before);
    let results = (READS * FILE) as u64;
    eprintln!("rss before {before}, after {after}: {kept} bytes kept of {results} read");
    assert!(
        kept < results / 2,
        "{kept} bytes kept after the run stopped"
    );
    Ok(())
}

/// A stopped run used to keep its handle, and with it the run's event channel
/// (~170 KiB each, measured): a thousand short runs held 170 MiB. Stopped, a
/// run keeps its outcome and its (small) history only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_runs_keep_little_each() -> Result<(), TestError> {
    const RUNS: usize = 100;
    let service = Service::launch(Launch {
        env: vec![("MALLOC_MMAP_THRESHOLD_", "65536".into())],
        ..Launch::default()
    })?;
    let task = json!({"goal": "g", "script": {"turns": [finish("ok")]}});
    let mut rss = Vec::new();
    for _ in 0..2 {
        let mut ids = Vec::new();
        for _ in 0..RUNS {
            ids.push(service.create(&task).await?);
        }
        for id in &ids {
            service.wait_for(id, |v| v["status"] == "stopped").await?;
        }
        rss.push(service.rss()?);
    }
    // The first batch warms the allocator up; the second one is what runs cost.
    let each = rss[1].saturating_sub(rss[0]) / RUNS as u64;
    eprintln!("rss {rss:?}: {each} bytes per stopped run");
    assert!(each < 64 * 1024, "{each} bytes kept per stopped run");
    Ok(())
}

/// Past `--keep-stopped`, the oldest stopped run is forgotten: 404, and its
/// working directory removed. Live runs are never forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_stopped_runs_are_forgotten() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let service = Service::launch(Launch {
        args: vec!["--keep-stopped", "2"],
        env: vec![("TMPDIR", tmp.path().display().to_string())],
        ..Launch::default()
    })?;
    let live = service.create(&listener_task()).await?;
    let task = json!({"goal": "g", "script": {"turns": [finish("ok")]}});
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = service.create(&task).await?;
        service.wait_for(&id, |v| v["status"] == "stopped").await?;
        ids.push(id);
    }
    let deadline = Instant::now() + WAIT;
    while service.get(&format!("/runs/{}", ids[0])).await?.0 != 404 {
        assert!(
            Instant::now() < deadline,
            "the oldest stopped run is still kept"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for id in [&ids[1], &ids[2], &live] {
        assert_eq!(service.get(&format!("/runs/{id}")).await?.0, 200);
    }
    // One directory per run still kept: the live one and two stopped ones.
    while std::fs::read_dir(run_dirs(tmp.path()))?.count() != 3 {
        assert!(
            Instant::now() < deadline,
            "the forgotten run's directory is still there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A paused run keeps every message it is sent. A message over
/// `--max-message-bytes` is refused (413), and so is any input past the run's
/// `--max-run-input-bytes`: the run cannot be fed without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_takes_bounded_input() -> Result<(), TestError> {
    const MESSAGE: usize = 64 * 1024;
    const RUN: usize = 1024 * 1024;
    let service = Service::start(&[
        "--max-message-bytes",
        &MESSAGE.to_string(),
        "--max-run-input-bytes",
        &RUN.to_string(),
    ])?;
    let id = service.create(&listener_task()).await?;
    let (status, body) = service
        .post(
            &format!("/runs/{id}/interrupt"),
            &json!({"action": "pause"}),
        )
        .await?;
    assert_eq!(status, 202, "{body}");

    let messages = format!("/runs/{id}/messages");
    let (status, body) = service
        .post(&messages, &json!({"text": "x".repeat(MESSAGE)}))
        .await?;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("--max-message-bytes")
    );

    let text = json!({"text": "x".repeat(60_000)});
    let size = text.to_string().len();
    let mut accepted = 0;
    let refused = loop {
        let (status, body) = service.post(&messages, &text).await?;
        match status {
            202 => accepted += 1,
            413 => break body,
            other => return Err(format!("{other}: {body}").into()),
        }
        assert!(
            accepted <= RUN / size,
            "{accepted} messages of {size} bytes taken"
        );
    };
    assert_eq!(accepted, RUN / size);
    let error = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(error.contains("--max-run-input-bytes"), "{error}");
    assert!(error.contains(&id), "{error}");
    Ok(())
}
