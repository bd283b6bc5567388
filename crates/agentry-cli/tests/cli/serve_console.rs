//! The browser console of `agentry serve`: its page and assets over plain
//! HTTP (open, with their CSP), `GET /agents`, the service's own origin, and
//! a 1,000-step run in a real headless Chromium; the flows a user takes in
//! the page are in `serve_console_page.rs`. Shared here: the service's
//! directory of tenants and agents, and the page helpers.

use std::time::{Duration, Instant};

use serde_json::json;

use super::serve::{Served, WAIT, tokens_file};
use super::view::cdp::Browser;
use crate::*;

pub(super) const ACME: &str = "acme-console-token-7c1e";
pub(super) const GLOBEX: &str = "globex-console-token-2b9f";
/// The nap's `sleep` argument: unique, so its process can be found.
pub(super) const NAP: &str = "37.125";

/// A service directory: tokens of acme and globex, and its agents — `chat`
/// (answers every message), `gated` (one approved append to a ledger, then
/// done), `writer` (an approved `fs.write` over its workspace's notes.txt),
/// `nap` (a 37 s sleep, then finish).
pub(super) struct Place {
    pub(super) dir: tempfile::TempDir,
}

impl Place {
    pub(super) fn new() -> Place {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        tokens_file(root, &[("acme", ACME), ("globex", GLOBEX)]);
        let ledger = root.join("ledger");
        std::fs::create_dir_all(&ledger).unwrap();
        let append_tool = format!(
            "[sandbox]\nwrite = [\"{ledger}\"]\n\
             [[tools.command]]\nname = \"append\"\ndescription = \"append a line\"\n\
             argv = [\"sh\", \"-c\", \"echo \\\"$AGENTRY_RUN_ID $AGENTRY_CALL_ID\\\" >> {ledger}/lines\"]\n\
             idempotency = \"idempotent\"\ntimeout = \"60s\"\n\
             input_schema = {{ type = \"object\", properties = {{ note = {{ type = \"string\" }} }} }}\n\
             [redact]\npatterns = [\"console-secret-[0-9]+\"]\n",
            ledger = ledger.display()
        );
        task(
            root,
            "chat",
            "goal = \"answer every message\"\n[budget]\nmax_steps = 5000\ndeadline = \"600s\"\n\
             [driver]\nmode = \"events\"\n[progress]\nwindow = 0\n",
            &json!({"turns": [{"final": "ok"}], "then": "repeat_last"}),
        );
        task(
            root,
            "gated",
            &format!(
                "goal = \"append once, approved\"\n[budget]\nmax_steps = 10\ndeadline = \"600s\"\n\
                 [tools]\ngrant = [\"append\"]\napprove = [\"append\"]\n[progress]\nwindow = 0\n{append_tool}"
            ),
            &json!({"turns": [
                {"tool_calls": [{"id": "a1", "name": "append", "arguments": {"note": "console-secret-42"}}]},
                {"final": "done"}
            ]}),
        );
        task(
            root,
            "writer",
            "goal = \"rewrite the notes, approved\"\n[budget]\nmax_steps = 10\ndeadline = \"600s\"\n\
             [tools]\ngrant = [\"fs.write\"]\napprove = [\"fs.write\"]\n[progress]\nwindow = 0\n",
            &json!({"turns": [
                {"tool_calls": [{"id": "w1", "name": "fs.write",
                    "arguments": {"path": "notes.txt", "content": "kept line\nnew line\n"}}]},
                {"final": "written"}
            ]}),
        );
        std::fs::create_dir_all(root.join("tasks/writer/workspace")).unwrap();
        std::fs::write(
            root.join("tasks/writer/workspace/notes.txt"),
            "kept line\nold line\n",
        )
        .unwrap();
        task(
            root,
            "nap",
            "goal = \"nap, unless told otherwise\"\n[budget]\nmax_steps = 10\ndeadline = \"120s\"\n\
             [tools]\ngrant = [\"proc.run\"]\n[progress]\nwindow = 0\n",
            &json!({"turns": [
                {"tool_calls": [{"id": "nap1", "name": "proc.run",
                    "arguments": {"argv": ["sh", "-c", format!("sleep {NAP}")]}}]},
                {"tool_calls": [{"id": "finish", "name": "task.finish",
                    "arguments": {"answer": "went on"}}]}
            ]}),
        );
        tree_and_long_tasks(root);
        std::fs::write(
            root.join("serve.toml"),
            format!(
                "[auth]\ntokens_file = \"tokens\"\n[serve]\nworkdir_root = \"{work}\"\n\
                 [agents.chat]\ntask = \"tasks/chat\"\n\
                 [agents.gated]\ntask = \"tasks/gated\"\n\
                 [agents.writer]\ntask = \"tasks/writer\"\n\
                 [agents.nap]\ntask = \"tasks/nap\"\n\
                 [agents.long]\ntask = \"tasks/long\"\n\
                 [agents.tree]\ntask = \"tasks/tree\"\n",
                work = root.join("work").display()
            ),
        )
        .unwrap();
        Place { dir }
    }

    pub(super) fn serve(&self) -> Served {
        let config = self.dir.path().join("serve.toml");
        let store = self.dir.path().join("runs.db");
        Served::start(
            &["--config", path_str(&config), "--store", path_str(&store)],
            &[("RUST_LOG", "warn")],
        )
    }

    /// How many times the ledger was appended to for `run`.
    pub(super) fn appended(&self, run: &str) -> usize {
        let text =
            std::fs::read_to_string(self.dir.path().join("ledger/lines")).unwrap_or_default();
        text.lines().filter(|l| l.starts_with(run)).count()
    }
}

/// `tree` (two children, waited for) and `long` (1,000 steps).
fn tree_and_long_tasks(root: &Path) {
    task(
        root,
        "tree",
        "goal = \"delegate twice\"\n[budget]\nmax_steps = 10\ndeadline = \"60s\"\n\
         [tools]\ngrant = [\"agent\"]\n[progress]\nwindow = 0\n",
        &json!({"turns": [
            {"tool_calls": [
                {"id": "s1", "name": "agent.spawn", "arguments": {"name": "a", "goal": "one", "script": {"turns": [{"final": "a done"}]}}},
                {"id": "s2", "name": "agent.spawn", "arguments": {"name": "b", "goal": "two", "script": {"turns": [{"final": "b done"}]}}}
            ]},
            {"tool_calls": [
                {"id": "wa", "name": "agent.wait", "arguments": {"child_id": "a"}},
                {"id": "wb", "name": "agent.wait", "arguments": {"child_id": "b"}}
            ]},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "both"}}]}
        ]}),
    );
    // 1,000 steps of one read each (every tenth of a file that is not
    // there), then an answer; it stays live, waiting for messages.
    let mut turns: Vec<Value> = (0..1000)
        .map(|i| {
            let path = if i % 10 == 9 { "missing.txt" } else { "notes.txt" };
            json!({"tool_calls": [{"id": format!("r{i}"), "name": "fs.read", "arguments": {"path": path}}]})
        })
        .collect();
    turns.push(json!({"final": "read"}));
    task(
        root,
        "long",
        "goal = \"read, a thousand times\"\n[budget]\nmax_steps = 5000\nmax_tool_calls = 5000\ndeadline = \"600s\"\n\
         [driver]\nmode = \"events\"\n[tools]\ngrant = [\"fs.read\"]\n[progress]\nwindow = 0\n",
        &json!({"turns": turns, "then": "repeat_last"}),
    );
}

fn task(root: &Path, name: &str, toml: &str, script: &Value) {
    let dir = root.join("tasks").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::write(dir.join("script.json"), script.to_string()).unwrap();
}

/// Whether the nap's `sleep` process is alive.
pub(super) fn napping() -> bool {
    Command::new("pgrep")
        .args(["-f", &format!("sleep {NAP}")])
        .output()
        .unwrap()
        .status
        .success()
}

/// `selector` exists and is shown.
pub(super) fn shown(selector: &str) -> String {
    let sel = serde_json::to_string(selector).unwrap();
    format!(
        "(() => {{ const e = document.querySelector({sel}); return e !== null && e.offsetParent !== null; }})()"
    )
}

/// Signs the page in with `token` from the sign-in form (the page must show it).
pub(super) fn sign_in(browser: &mut Browser, token: &str) {
    browser.wait_for(&shown("#signin-form"), WAIT);
    browser.type_into("#token", token);
    browser.click("#signin-form button");
}

/// Opens run `id` in the console (already signed in) and waits for its view.
pub(super) fn open_run(browser: &mut Browser, id: &str) {
    browser.eval(&format!("location.hash = '#/runs/{id}'; true"));
    browser.wait_for(
        &format!("window.consoleRun != null && consoleRun.id === '{id}'"),
        WAIT,
    );
}

/// What the page shows that fails WCAG AA: text under 4.5:1 against the
/// background it is drawn on, a form field without a label, a button without
/// a name. Empty when none.
pub(super) fn accessibility_faults(browser: &mut Browser) -> Value {
    browser.eval(
        r#"(() => {
  const faults = [];
  const parse = (c) => { const m = /rgba?\(([^)]+)\)/.exec(c); if (!m) return null; const p = m[1].split(',').map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const background = (e) => { for (; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor); if (c && c[3] > 0.5) return c; } return [255, 255, 255, 1]; };
  for (const e of document.querySelectorAll('body *')) {
    if (e.offsetParent === null || e.disabled) continue;
    if (![...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    const a = lum(parse(getComputedStyle(e).color)), b = lum(background(e));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) faults.push(e.tagName + ' "' + e.textContent.trim().slice(0, 30) + '": ' + ratio.toFixed(2));
  }
  for (const f of document.querySelectorAll('input, select, textarea')) {
    if (f.offsetParent !== null && f.labels.length === 0) faults.push('no label: #' + f.id);
  }
  for (const b of document.querySelectorAll('button')) {
    if (b.offsetParent !== null && !b.textContent.trim() && !b.getAttribute('aria-label')) faults.push('a button without a name');
  }
  return faults;
})()"#,
    )
}

/// The page's errors, but for the refusals a step of the test asked for
/// (`expected`: texts such as "401 (Unauthorized)").
pub(super) fn unexpected_errors(browser: &Browser, expected: &[&str]) -> Vec<Value> {
    browser
        .errors()
        .into_iter()
        .filter(|e| {
            let text = e["params"]["entry"]["text"].as_str().unwrap_or_default();
            !expected.iter().any(|x| text.contains(x))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_open_with_its_policy_and_lists_the_agents() {
    let place = Place::new();
    let served = place.serve();
    let root = served.send("GET", "/", None, None).await;
    // (The client follows the redirect to the page.)
    assert_eq!(root.status, 200);
    assert!(root.text.contains("<title>agentry console</title>"));
    for path in [
        "/console/",
        "/console/console.js",
        "/console/api.js",
        "/console/run.js",
        "/console/lanes.js",
        "/console/console.css",
    ] {
        let reply = served.send("GET", path, None, None).await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(
            reply.headers["content-security-policy"],
            agentry_serve::console::CONTENT_SECURITY_POLICY,
            "{path}"
        );
        assert_eq!(reply.headers["x-content-type-options"], "nosniff");
        assert_eq!(reply.headers["referrer-policy"], "no-referrer");
    }
    let missing = served.send("GET", "/console/nope.js", None, None).await;
    assert_eq!(missing.status, 404);
    // The data is not open: the agents need a token.
    let refused = served.send("GET", "/agents", None, None).await;
    assert_eq!(refused.status, 401, "{:?}", refused.body);
    let agents = served.send("GET", "/agents", Some(ACME), None).await;
    assert_eq!(agents.status, 200, "{:?}", agents.body);
    assert_eq!(
        agents.body,
        json!({
            "agents": [
                {"name": "chat", "model": null},
                {"name": "gated", "model": null},
                {"name": "long", "model": null},
                {"name": "nap", "model": null},
                {"name": "tree", "model": null},
                {"name": "writer", "model": null},
            ],
            "queue": {"running": 0, "max_running": null, "queued": 0, "max_queued": 100},
            "models": [],
        })
    );
}

/// The page posts with its own origin: let through; another origin is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_own_origin_may_post_and_another_may_not() {
    let place = Place::new();
    let served = place.serve();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |origin: String| {
        client
            .post(format!("{}/runs", served.base))
            .header("authorization", format!("Bearer {ACME}"))
            .header("origin", origin)
            .header("content-type", "application/json")
            .body(json!({"agent": "chat"}).to_string())
            .send()
    };
    let own = post(served.base.clone()).await.unwrap();
    assert_eq!(own.status().as_u16(), 201);
    assert!(own.headers().get("access-control-allow-origin").is_none());
    let port = served.base.rsplit(':').next().unwrap();
    let other = post(format!("http://rebound.example:{port}"))
        .await
        .unwrap();
    assert_eq!(other.status().as_u16(), 403);
}

/// A run of 1,000 steps, opened in a fresh page: how long until the page
/// shows every step and answers a click (printed; BENCHMARKS.md keeps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium; .ci/run runs it"]
async fn a_thousand_step_run_stays_responsive() {
    let place = Place::new();
    let served = place.serve();
    let id = served
        .create(
            ACME,
            &json!({"agent": "long", "input": "go", "files": {"notes.txt": "hello"}}),
        )
        .await;
    let deadline = Instant::now() + WAIT;
    loop {
        let view = served
            .send("GET", &format!("/runs/{id}"), Some(ACME), None)
            .await;
        if view.body["steps"].as_u64().unwrap_or(0) >= 1000 && view.body["status"] == "sleeping" {
            break;
        }
        assert!(Instant::now() < deadline, "{:?}", view.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut browser = Browser::launch();
    browser.navigate(&format!("{}/console/", served.base));
    sign_in(&mut browser, ACME);
    browser.wait_for(&shown("#runs-table"), WAIT);
    browser.navigate("about:blank");
    let started = Instant::now();
    browser.navigate(&format!("{}/console/#/runs/{id}", served.base));
    browser.wait_for(
        "window.consoleRun != null && consoleRun.timeline.stepCount() >= 1000 && document.querySelectorAll('#events li').length > 0",
        WAIT,
    );
    let shown_all = started.elapsed();
    browser.click(".lane-row canvas");
    browser.wait_for("document.querySelector('#step-detail h3') !== null", WAIT);
    let interactive = started.elapsed();
    // The keyboard picks the next step of the focused lane.
    let picked = browser.eval("document.querySelector('#step-detail h3').textContent");
    let number: u64 = picked
        .as_str()
        .unwrap()
        .trim_start_matches("Step ")
        .parse()
        .unwrap();
    browser.call(
        "Input.dispatchKeyEvent",
        json!({"type": "keyDown", "key": "ArrowRight", "code": "ArrowRight", "windowsVirtualKeyCode": 39}),
    );
    browser.wait_for(
        &format!(
            "document.querySelector('#step-detail h3').textContent === 'Step {}'",
            number + 1
        ),
        WAIT,
    );
    let events = browser.eval("consoleRun.records.length");
    let longest = browser.eval(
        "(() => { const t = performance.now(); consoleRun.render(); return performance.now() - t; })()",
    );
    println!(
        "console: a 1000-step run ({events} events): every step shown in {shown_all:?}, \
         a step's detail after a click at {interactive:?}; a full redraw takes {longest} ms"
    );
    assert_eq!(unexpected_errors(&browser, &[]), Vec::<Value>::new());
}
