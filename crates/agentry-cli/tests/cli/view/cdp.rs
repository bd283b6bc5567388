//! A small DevTools-protocol client for a real headless Chromium, over
//! `--remote-debugging-pipe` (the transport Playwright uses): the browser reads
//! NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4.
//! `sh` hands it our pipes there, so no WebSocket and no new crate are needed.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The browser: Debian's `chromium` (installed by `.ci/run`).
const CHROMIUM: &str = "chromium";

/// How long one protocol call may take: far above what any takes here.
const CALL_DEADLINE: Duration = Duration::from_secs(120);

/// One headless browser with one page attached.
pub struct Browser {
    child: Child,
    to: ChildStdin,
    from: Receiver<Value>,
    next_id: u64,
    session: String,
    /// Every event received so far, in order.
    pub events: Vec<Value>,
    profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium headless with a fresh profile and opens a blank page.
    /// Panics (the test fails) when Chromium is missing.
    pub fn launch() -> Browser {
        let version = Command::new(CHROMIUM).arg("--version").output();
        assert!(
            version.as_ref().is_ok_and(|o| o.status.success()),
            "`{CHROMIUM}` is not installed (Debian package chromium; .ci/run installs it): {version:?}"
        );
        let profile = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(profile.path().join("stderr.log")).unwrap();
        let mut child = Command::new("sh")
            .arg("-c")
            // fd 3 <- our stdin pipe, fd 4 -> our stdout pipe; the browser's
            // own stdin/stdout are not used.
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                // Without these it dials out, and this machine refuses that.
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1400,900",
                "--remote-debugging-pipe",
            ])
            .arg(format!(
                "--user-data-dir={}",
                profile.path().join("profile").display()
            ))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        let to = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, from) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(out);
            let mut buf = Vec::new();
            while reader.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                if let Ok(message) = serde_json::from_slice::<Value>(&buf)
                    && tx.send(message).is_err()
                {
                    return;
                }
                buf.clear();
            }
        });
        let mut browser = Browser {
            child,
            to,
            from,
            next_id: 0,
            session: String::new(),
            events: Vec::new(),
            profile,
        };
        let target = browser.browser_call("Target.createTarget", json!({"url": "about:blank"}));
        let attached = browser.browser_call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
            browser.call(domain, json!({}));
        }
        browser
    }

    fn browser_call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    /// A command to the page; its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(method, params, Some(&session))
    }

    fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        self.to.flush().unwrap();
        let deadline = Instant::now() + CALL_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from.recv_timeout(left) {
                Ok(m) if m["id"] == json!(id) => {
                    assert!(m.get("error").is_none(), "{method}: {m}");
                    return m["result"].clone();
                }
                Ok(event) => self.events.push(event),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{method}: no reply in {CALL_DEADLINE:?}; {}", self.stderr())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("{method}: the browser went away; {}", self.stderr())
                }
            }
        }
    }

    fn stderr(&self) -> String {
        let text =
            std::fs::read_to_string(self.profile.path().join("stderr.log")).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        format!(
            "browser stderr (last lines): {}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }

    /// Opens a file in the page.
    pub fn open(&mut self, file: &Path) {
        let url = format!("file://{}", file.display());
        let nav = self.call("Page.navigate", json!({"url": url}));
        assert!(nav.get("errorText").is_none(), "{nav}");
    }

    /// Navigates the page to `url` (an `agentry serve` console).
    pub fn navigate(&mut self, url: &str) {
        let nav = self.call("Page.navigate", json!({"url": url}));
        assert!(nav.get("errorText").is_none(), "{nav}");
    }

    /// Types `text` into the element matching `selector`, as keystrokes would
    /// (focus, then the browser's own text insertion: input events fire).
    pub fn type_into(&mut self, selector: &str, text: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        let found = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return false; e.focus(); e.value = ''; return true; }})()"
        ));
        assert_eq!(found, json!(true), "no element {selector}");
        self.call("Input.insertText", json!({"text": text}));
    }

    /// The page as a PNG, at `width` by the page's full height.
    pub fn screenshot(&mut self, width: u32, height: u32) -> Vec<u8> {
        use base64::Engine as _;
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": false}),
        );
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap()
    }

    /// Lays the page out at a phone's width (`width` CSS pixels).
    pub fn phone_width(&mut self, width: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": 800, "deviceScaleFactor": 2, "mobile": true}),
        );
    }

    /// Evaluates a JS expression in the page; its value (JSON).
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is true, for at most `within`.
    pub fn wait_for(&mut self, expression: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while self.eval(expression) != json!(true) {
            assert!(
                Instant::now() < deadline,
                "not true within {within:?}: {expression}; errors: {:?}",
                self.errors()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A real mouse click at the centre of the first element matching `selector`.
    pub fn click(&mut self, selector: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        let rect = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return null; e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
        ));
        assert!(rect.is_array(), "no element {selector}");
        let (x, y) = (rect[0].as_f64().unwrap(), rect[1].as_f64().unwrap());
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Every error the page reported: uncaught exceptions, console errors, and
    /// the browser's own error log entries (a refused load, a CSP violation).
    pub fn errors(&self) -> Vec<Value> {
        self.events
            .iter()
            .filter(|e| match e["method"].as_str() {
                Some("Runtime.exceptionThrown") => true,
                Some("Log.entryAdded") => e["params"]["entry"]["level"] == "error",
                Some("Runtime.consoleAPICalled") => e["params"]["type"] == "error",
                _ => false,
            })
            .cloned()
            .collect()
    }

    /// The text of every console.log call so far.
    pub fn console_logs(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Runtime.consoleAPICalled" && e["params"]["type"] == "log")
            .map(|e| {
                e["params"]["args"][0]["value"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self
            .to
            .write_all(b"{\"id\":999999,\"method\":\"Browser.close\"}\0");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
