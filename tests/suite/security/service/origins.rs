//! What a web page can make the service do: cross-site posts, allowed
//! origins, DNS rebinding.

use super::*;

/// A page on any site can post to localhost, but only as a "simple" request:
/// text/plain, a form, multipart, and always with its `Origin`. Each is refused
/// before any run starts; the same task posted as JSON from no page runs its
/// command (so the payload was live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_post_cannot_start_a_run() -> Result<(), TestError> {
    let service = Service::start(&[])?;
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("pwned");
    let task = command_task(&marker).to_string();
    let host = service.addr.to_string();
    for content_type in [
        "Content-Type: text/plain\r\n",
        "Content-Type: application/x-www-form-urlencoded\r\n",
        "Content-Type: multipart/form-data; boundary=x\r\n",
        "",
    ] {
        let raw = service
            .raw(&post("/runs", &host, content_type, &task))
            .await?;
        assert_eq!(raw.status, 415, "{content_type:?}: {raw:?}");
        assert!(raw.error()?.contains("application/json"), "{raw:?}");
    }
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let headers = format!("Content-Type: application/json\r\nOrigin: {origin}\r\n");
        let raw = service.raw(&post("/runs", &host, &headers, &task)).await?;
        assert_eq!(raw.status, 403, "{origin}: {raw:?}");
        assert!(raw.error()?.contains(origin), "{raw:?}");
    }
    assert!(!marker.exists(), "a refused request ran its command");

    let id = service.create(&control_task()).await?;
    let view = service.wait_for(&id, |v| v["status"] == "stopped").await?;
    assert_eq!(view["outcome"]["stop_reason"], "done", "{view}");
    Ok(())
}

/// `--allow-origin` lets that origin's pages in, with the CORS answers a
/// browser needs to send JSON; any other origin is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_origin_gets_cors_answers() -> Result<(), TestError> {
    let service = Service::start(&["--allow-origin", "http://ui.example:3000"])?;
    let host = service.addr.to_string();
    let preflight = format!(
        "OPTIONS /runs HTTP/1.1\r\nHost: {host}\r\nOrigin: http://ui.example:3000\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\nConnection: close\r\n\r\n"
    );
    let raw = service.raw(preflight.as_bytes()).await?;
    assert_eq!(raw.status, 204, "{raw:?}");
    assert_eq!(
        raw.header("access-control-allow-origin"),
        Some("http://ui.example:3000")
    );
    assert!(
        raw.header("access-control-allow-headers")
            .is_some_and(|h| h.contains("content-type"))
    );

    let task = json!({"goal": "g", "script": {"turns": [finish("ok")]}}).to_string();
    let headers = "Content-Type: application/json\r\nOrigin: http://ui.example:3000\r\n";
    let raw = service.raw(&post("/runs", &host, headers, &task)).await?;
    assert_eq!(raw.status, 201, "{raw:?}");
    assert_eq!(
        raw.header("access-control-allow-origin"),
        Some("http://ui.example:3000")
    );
    let headers = "Content-Type: application/json\r\nOrigin: http://ui.example:3001\r\n";
    let raw = service.raw(&post("/runs", &host, headers, &task)).await?;
    assert_eq!(raw.status, 403, "{raw:?}");
    Ok(())
}

/// DNS rebinding: a page on evil.example re-points its name at 127.0.0.1, so
/// its requests are same-origin and carry `Host: evil.example:PORT`. Only the
/// bound address, `localhost` on its port, and `--allow-host` names are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_host_name_is_refused() -> Result<(), TestError> {
    let service = Service::start(&["--allow-host", "agentry.test"])?;
    let port = service.addr.port();
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("pwned");
    let task = command_task(&marker).to_string();
    let json = "Content-Type: application/json\r\n";
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_string(),
        format!("localhost.evil.example:{port}"),
        "127.0.0.1:1".to_string(),
        format!("user@127.0.0.1:{port}"),
    ] {
        let raw = service.raw(&post("/runs", &host, json, &task)).await?;
        assert_eq!(raw.status, 421, "{host}: {raw:?}");
        assert!(raw.error()?.contains("Host"), "{raw:?}");
    }
    // No Host at all (HTTP/1.0), and an absolute-form target naming another host.
    let raw = service
        .raw(b"GET /runs/x HTTP/1.0\r\nConnection: close\r\n\r\n")
        .await?;
    assert_eq!(raw.status, 421, "{raw:?}");
    let absolute = format!(
        "GET http://evil.example:{port}/runs/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    );
    let raw = service.raw(absolute.as_bytes()).await?;
    assert_eq!(raw.status, 421, "{raw:?}");
    assert!(!marker.exists(), "a refused request ran its command");

    // The service's own names pass the check (and reach the route: 404, no such run).
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("agentry.test:{port}"),
        "agentry.test".to_string(),
    ] {
        let raw = service.raw(&get("/runs/nope", &host, "")).await?;
        assert_eq!(raw.status, 404, "{host}: {raw:?}");
        assert!(raw.error()?.contains("no run with id"), "{raw:?}");
    }
    Ok(())
}
