//! The console in a real headless Chromium against the real `agentry serve`:
//! sign-in, a wrong token, runs growing live, the stream catching up after a
//! drop, a run started from the form, approvals, denials, a redirect, tenants
//! kept apart, and no console or CSP error on any page.

use std::time::{Duration, Instant};

use serde_json::json;

use super::serve::{Served, WAIT};
use super::serve_console::{
    ACME, GLOBEX, Place, accessibility_faults, napping, open_run, shown, sign_in, unexpected_errors,
};
use super::view::cdp::Browser;
use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium; .ci/run runs it"]
async fn the_console_signs_in_shows_runs_live_and_keeps_tenants_apart() {
    let place = Place::new();
    let served = place.serve();
    let mut browser = Browser::launch();
    browser.navigate(&format!("{}/", served.base));
    // A wrong token: the sign-in again, saying so, and nothing kept.
    browser.wait_for(&shown("#signin-form"), WAIT);
    assert_eq!(accessibility_faults(&mut browser), json!([]), "the sign-in");
    // (The check finds what it looks for: pale text on white.)
    browser.eval("const p = document.createElement('p'); p.id = 'pale'; p.textContent = 'pale'; p.style.color = '#bbb'; document.getElementById('signin').appendChild(p); true");
    assert_eq!(
        accessibility_faults(&mut browser).as_array().unwrap().len(),
        1
    );
    browser.eval("document.getElementById('pale').remove(); true");
    sign_in(&mut browser, "not-a-token");
    browser.wait_for(
        "document.getElementById('signin-error').textContent.includes('refused')",
        WAIT,
    );
    browser.wait_for(&shown("#signin-form"), WAIT);
    assert_eq!(browser.eval("sessionStorage.length"), json!(0));
    assert_eq!(
        unexpected_errors(&browser, &["401 (Unauthorized)"]),
        Vec::<Value>::new()
    );
    browser.events.clear();

    let id = acme_watches_a_run_live(&served, &mut browser).await;
    the_stream_catches_up_after_a_drop(&served, &mut browser, &id).await;
    a_run_started_from_the_page(&place, &mut browser);
    // Globex sees its own runs only, and acme's run is no run of its.
    browser.click("#sign-out");
    sign_in(&mut browser, GLOBEX);
    browser.wait_for(&shown("#runs-table"), WAIT);
    let theirs = served.create(GLOBEX, &json!({"agent": "chat"})).await;
    browser.wait_for(
        &shown(&format!("#runs-body tr[data-run-id=\"{theirs}\"]")),
        WAIT,
    );
    assert_eq!(
        browser.eval("document.querySelectorAll('#runs-body tr').length"),
        json!(1)
    );
    browser.eval(&format!("location.hash = '#/runs/{id}'; true"));
    browser.wait_for(
        "document.getElementById('status').textContent.startsWith('No run')",
        WAIT,
    );
    assert_eq!(
        browser.eval("document.querySelectorAll('#events li').length"),
        json!(0)
    );
    assert_eq!(
        unexpected_errors(&browser, &["404 (Not Found)"]),
        Vec::<Value>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium; .ci/run runs it"]
async fn the_console_approves_denies_and_redirects() {
    let place = Place::new();
    let served = place.serve();
    let mut browser = Browser::launch();
    browser.navigate(&format!("{}/console/", served.base));
    sign_in(&mut browser, ACME);
    browser.wait_for(&shown("#runs-table"), WAIT);

    approve_from_the_page(&place, &served, &mut browser).await;
    a_write_is_shown_as_a_diff_before_it_is_approved(&served, &mut browser).await;
    deny_from_the_page(&place, &served, &mut browser).await;
    redirect_from_the_page(&served, &mut browser).await;
    a_tree_draws_a_lane_per_agent(&served, &mut browser).await;
    assert_eq!(unexpected_errors(&browser, &[]), Vec::<Value>::new());
}

/// The page's stream dropped: it reconnects with `Last-Event-ID` and sees
/// every later event once.
async fn the_stream_catches_up_after_a_drop(served: &Served, browser: &mut Browser, id: &str) {
    browser.phone_width(1280);
    browser.eval("consoleRun.stream.controller.abort(); true");
    for i in 1..=2 {
        let reply = served
            .send(
                "POST",
                &format!("/runs/{id}/messages"),
                Some(ACME),
                Some(&json!({"text": format!("after the drop {i}")})),
            )
            .await;
        assert_eq!(reply.status, 202, "{:?}", reply.body);
    }
    browser.wait_for(
        "document.getElementById('run-stream').textContent.includes('caught up after event')",
        WAIT,
    );
    browser.wait_for(
        "consoleRun.records.some(r => JSON.stringify(r.record).includes('after the drop 2'))",
        WAIT,
    );
    let seqs = browser.eval("consoleRun.records.map(r => r.seq)");
    let seqs: Vec<u64> = seqs
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "each event once, in order");
}

/// A run of a named agent started from the form, with its input and a file.
fn a_run_started_from_the_page(place: &Place, browser: &mut Browser) {
    browser.eval("location.hash = '#/runs'; true");
    browser.wait_for(&shown("#new-run"), WAIT);
    browser.eval("document.getElementById('new-agent').value = 'chat'; true");
    browser.type_into("#new-input", "hello from the form");
    let upload = place.dir.path().join("console-upload.txt");
    std::fs::write(&upload, "uploaded").unwrap();
    let document = browser.call("DOM.getDocument", json!({}));
    let input = browser.call(
        "DOM.querySelector",
        json!({"nodeId": document["root"]["nodeId"], "selector": "#new-files"}),
    );
    browser.call(
        "DOM.setFileInputFiles",
        json!({"nodeId": input["nodeId"], "files": [path_str(&upload)]}),
    );
    browser.click("#new-run button[type=submit]");
    browser.wait_for(
        "window.consoleRun != null && consoleRun.records.some(r => JSON.stringify(r.record).includes('hello from the form'))",
        WAIT,
    );
    let written = walk(&place.dir.path().join("work")).into_iter().any(|p| {
        p.ends_with("console-upload.txt") && std::fs::read_to_string(&p).unwrap() == "uploaded"
    });
    assert!(written, "the file did not reach the run's directory");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Acme signs in, and watches a run started elsewhere appear and grow, and
/// messages it from the page; its run's id.
async fn acme_watches_a_run_live(served: &Served, browser: &mut Browser) -> String {
    sign_in(browser, ACME);
    browser.wait_for(&shown("#runs-table"), WAIT);
    // The new-run form offers the agents.
    browser.wait_for(
        "document.querySelectorAll('#new-agent option').length === 6",
        WAIT,
    );
    // A run started elsewhere appears by itself.
    let id = served.create(ACME, &json!({"agent": "chat"})).await;
    let row = format!("#runs-body tr[data-run-id=\"{id}\"] a");
    browser.wait_for(&shown(&row), WAIT);
    assert_eq!(accessibility_faults(browser), json!([]), "the runs page");
    // Its spend, from its own view.
    browser.wait_for(
        &format!("document.querySelector('#runs-body tr[data-run-id=\"{id}\"] .spend').textContent.endsWith(' calls')"),
        WAIT,
    );
    browser.click(&row);
    browser.wait_for(
        &format!("window.consoleRun != null && consoleRun.id === '{id}'"),
        WAIT,
    );
    // Its steps grow as they happen.
    let start = browser
        .eval("consoleRun.timeline.stepCount()")
        .as_u64()
        .unwrap();
    for i in 1..=3u64 {
        let reply = served
            .send(
                "POST",
                &format!("/runs/{id}/messages"),
                Some(ACME),
                Some(&json!({"text": format!("m{i}")})),
            )
            .await;
        assert_eq!(reply.status, 202, "{:?}", reply.body);
        browser.wait_for(
            &format!("consoleRun.timeline.stepCount() >= {}", start + i),
            WAIT,
        );
    }
    // A message from the page: the event it produced is marked as its.
    browser.type_into("#message-text", "from the page");
    browser.click("#send-message");
    browser.wait_for(
        "[...document.querySelectorAll('#events li.mine')].some(li => li.textContent.includes('from the page'))",
        WAIT,
    );
    browser.wait_for(
        "document.getElementById('act-result').textContent.includes('→ event #')",
        WAIT,
    );
    // The token is in the tab's storage only.
    assert_eq!(browser.eval("document.cookie"), json!(""));
    let href = browser.eval("location.href");
    assert!(!href.as_str().unwrap().contains(ACME), "{href}");
    assert_eq!(
        browser.eval("sessionStorage.getItem('agentry.console.token')"),
        json!(ACME)
    );
    // Readable at a phone's width: nothing wider than the screen.
    browser.phone_width(375);
    browser.wait_for("document.documentElement.scrollWidth <= 376", WAIT);
    assert_eq!(unexpected_errors(browser, &[]), Vec::<Value>::new());

    id
}

/// Approved from the page: the call runs once.
async fn approve_from_the_page(place: &Place, served: &Served, browser: &mut Browser) {
    // Approved from the page: the call runs once.
    let approved = served.create(ACME, &json!({"agent": "gated"})).await;
    served
        .wait_status(ACME, &approved, "awaiting_approval")
        .await;
    open_run(browser, &approved);
    browser.wait_for(&shown(".approval .approve"), WAIT);
    // The arguments as the stream shows them: redacted.
    browser.wait_for(
        "document.querySelector('.approval pre').textContent.includes('[redacted')",
        WAIT,
    );
    assert!(
        !browser
            .eval("document.body.textContent")
            .as_str()
            .unwrap()
            .contains("console-secret-42")
    );
    assert_eq!(
        accessibility_faults(browser),
        json!([]),
        "a run's page, a call waiting"
    );
    assert_eq!(place.appended(&approved), 0);
    browser.click(".approval .approve");
    let done = served.wait_status(ACME, &approved, "stopped").await;
    assert_eq!(done["outcome"]["stop_reason"], "done", "{done:?}");
    assert_eq!(place.appended(&approved), 1);
    browser.wait_for(
        "[...document.querySelectorAll('#events li.mine')].some(li => li.textContent.includes('approved a1'))",
        WAIT,
    );
}

/// A parked `fs.write` shows its effect and a diff of the file it would
/// write; approved, the file is what the diff said.
async fn a_write_is_shown_as_a_diff_before_it_is_approved(served: &Served, browser: &mut Browser) {
    let id = served.create(ACME, &json!({"agent": "writer"})).await;
    let parked = served.wait_status(ACME, &id, "awaiting_approval").await;
    let pending = &parked["pending_approvals"][0];
    assert_eq!(pending["effect"], "reversible", "{pending}");
    open_run(browser, &id);
    browser.wait_for(&shown(".approval pre.preview"), WAIT);
    let diff = browser.eval("document.querySelector('.approval pre.preview').textContent");
    let diff = diff.as_str().unwrap();
    assert!(
        diff.contains("-old line") && diff.contains("+new line") && diff.contains(" kept line"),
        "{diff}"
    );
    assert_eq!(
        browser.eval("document.querySelectorAll('.approval pre.preview .diff-add').length"),
        json!(1)
    );
    assert!(
        browser
            .eval("document.querySelector('.approval .effect').textContent")
            .as_str()
            .unwrap()
            .contains("reversible")
    );
    screenshot(browser);
    browser.click(".approval .approve");
    let done = served.wait_status(ACME, &id, "stopped").await;
    assert_eq!(done["outcome"]["stop_reason"], "done", "{done:?}");
    // The step picked shows what it changed: the call it spent, the state's
    // new version; the last step, the answer.
    browser.wait_for(
        "document.querySelectorAll('#events li[data-type=\"step_started\"]').length === 2",
        WAIT,
    );
    browser.click("#events li[data-type=\"tool_call_finished\"] button");
    browser.wait_for(
        "document.querySelector('#step-detail table.changes') !== null",
        WAIT,
    );
    let changes = browser.eval("document.querySelector('#step-detail table.changes').textContent");
    let changes = changes.as_str().unwrap();
    assert!(
        changes.contains("state version") && changes.contains("spent.tool_calls01"),
        "{changes}"
    );
    browser.eval("[...document.querySelectorAll('#events li[data-type=\"step_started\"] button')].pop().click(); true");
    browser.wait_for(
        "document.querySelector('#step-detail table.changes').textContent.includes('answer—written')",
        WAIT,
    );
}

/// Denied from the page, with a reason: the model sees EPERM.
async fn deny_from_the_page(place: &Place, served: &Served, browser: &mut Browser) {
    // Denied from the page, with a reason: the model sees EPERM.
    let denied = served.create(ACME, &json!({"agent": "gated"})).await;
    served.wait_status(ACME, &denied, "awaiting_approval").await;
    open_run(browser, &denied);
    browser.wait_for(&shown(".approval .deny"), WAIT);
    browser.type_into(".approval input", "not today");
    browser.click(".approval .deny");
    served.wait_status(ACME, &denied, "stopped").await;
    let events = served.events_until(ACME, &denied, "run_stopped").await;
    let result = events
        .iter()
        .find(|(name, _)| name == "tool_call_finished")
        .map(|(_, data)| data["event"]["result"].clone())
        .unwrap();
    assert_eq!(result["ok"], false, "{result}");
    assert_eq!(result["error"]["code"], "EPERM", "{result}");
    assert_eq!(place.appended(&denied), 0);
    browser.wait_for(
        "[...document.querySelectorAll('#events .chip')].some(c => c.textContent === 'EPERM')",
        WAIT,
    );
    // A step picked in the list shows its decision and results. Clicked
    // until it shows: the page may still be drawing the run's last events
    // (under load a click could land on a row about to be redrawn).
    browser.wait_for(
        "(() => { const b = document.querySelector('#events li[data-type=\"tool_call_finished\"] button'); \
         if (b) b.click(); \
         return document.getElementById('step-detail').textContent.includes('EPERM'); })()",
        WAIT,
    );
    browser.wait_for(
        "document.getElementById('run-status').textContent === 'stopped: done' && document.querySelector('.approval') === null",
        WAIT,
    );
}

/// Redirected from the page: the sleeping tool is stopped, the run goes on.
async fn redirect_from_the_page(served: &Served, browser: &mut Browser) {
    // Redirected from the page: the sleeping tool is stopped, the run goes on.
    browser.phone_width(1280);
    let nap = served.create(ACME, &json!({"agent": "nap"})).await;
    let deadline = Instant::now() + WAIT;
    while !napping() {
        assert!(Instant::now() < deadline, "the nap never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    open_run(browser, &nap);
    browser.wait_for(
        "[...document.querySelectorAll('#events li')].some(li => li.dataset.type === 'tool_call_started')",
        WAIT,
    );
    browser.type_into("#message-text", "stop napping and finish");
    let asked = Instant::now();
    browser.click("#redirect");
    let done = served.wait_status(ACME, &nap, "stopped").await;
    assert_eq!(done["outcome"]["stop_reason"], "done", "{done:?}");
    assert_eq!(done["outcome"]["answer"], "went on", "{done:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "{:?}",
        asked.elapsed()
    );
    assert!(!napping(), "the nap's process outlived the redirect");
    let events = served.events_until(ACME, &nap, "run_stopped").await;
    let redirect = events.iter().find(|(name, data)| {
        name == "input_applied" && data["event"]["input"]["type"] == "interrupt"
    });
    assert!(redirect.is_some(), "{events:?}");
    assert_eq!(
        redirect.unwrap().1["event"]["input"]["text"],
        "stop napping and finish"
    );
    browser.wait_for("document.querySelector('#events li.mine') !== null", WAIT);
}

/// The README's picture of the console (`docs/console.png`), written when
/// `AGENTRY_WRITE_SCREENSHOT` is set.
fn screenshot(browser: &mut Browser) {
    browser.eval("window.scrollTo(0, 0); true");
    let png = browser.screenshot(1280, 900);
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    if std::env::var_os("AGENTRY_WRITE_SCREENSHOT").is_some() {
        std::fs::write(root().join("docs/console.png"), png).unwrap();
    }
}

/// A run that starts two children: a lane for each, drawn from the parent's
/// `agent.spawn` and `agent.wait` results.
async fn a_tree_draws_a_lane_per_agent(served: &Served, browser: &mut Browser) {
    let tree = served.create(ACME, &json!({"agent": "tree"})).await;
    let done = served.wait_status(ACME, &tree, "stopped").await;
    assert_eq!(done["outcome"]["stop_reason"], "done", "{done:?}");
    open_run(browser, &tree);
    // (Each lane says what it shows once it is drawn.)
    let labels = "JSON.stringify([...document.querySelectorAll('.lane-row canvas')].slice(1).map(c => c.getAttribute('aria-label')))";
    let expected = json!([
        "child agent a: done, 1 steps",
        "child agent b: done, 1 steps"
    ]);
    browser.wait_for(
        &format!(
            "{labels} === {}",
            serde_json::to_string(&expected.to_string()).unwrap()
        ),
        WAIT,
    );
}

/// The service killed while a tool naps: started again, the call (with
/// effects, not idempotent) waits for a human, who skips it from the page;
/// the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium; .ci/run runs it"]
async fn a_call_a_crash_interrupted_is_settled_from_the_page() {
    let place = Place::new();
    let served = place.serve();
    let nap = served.create(ACME, &json!({"agent": "nap"})).await;
    let deadline = Instant::now() + WAIT;
    while !napping() {
        assert!(Instant::now() < deadline, "the nap never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    served.kill();
    let served = place.serve();
    served.wait_status(ACME, &nap, "awaiting_decision").await;
    let mut browser = Browser::launch();
    browser.navigate(&format!("{}/console/", served.base));
    sign_in(&mut browser, ACME);
    browser.wait_for(&shown("#runs-table"), WAIT);
    open_run(&mut browser, &nap);
    browser.wait_for(&shown("#decisions .decision button"), WAIT);
    browser.click("#decisions .decision button:nth-child(3)");
    let done = served.wait_status(ACME, &nap, "stopped").await;
    assert_eq!(done["outcome"]["stop_reason"], "done", "{done:?}");
    assert_eq!(done["outcome"]["answer"], "went on", "{done:?}");
    browser.wait_for("document.getElementById('decisions-panel').hidden", WAIT);
    browser.wait_for(
        "[...document.querySelectorAll('#events li.mine')].length > 0",
        WAIT,
    );
    assert_eq!(unexpected_errors(&browser, &[]), Vec::<Value>::new());
}
