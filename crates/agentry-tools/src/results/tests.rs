//! Saving a large result and reading it back, on real temporary directories.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::tool::RunScope;

fn ctx(workdir: &Path, artifacts: &Path) -> ToolContext {
    let run = RunScope {
        artifacts: Arc::from(artifacts),
        ..RunScope::new("run-1", workdir).unwrap()
    };
    ToolContext {
        run: Arc::new(run),
        call_id: "call-1".to_string(),
        cancel: CancellationToken::new(),
        attempt: 1,
        operation_id: Arc::from("op-test"),
        processes: None,
        remote: None,
        deadlines: Default::default(),
        traceparent: None,
    }
}

/// A JSON text of `n` bytes-ish with multi-byte characters in it.
fn text(n: usize) -> String {
    serde_json::to_string(&json!({"content": "añb".repeat(n / 4)})).unwrap()
}

async fn read(c: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
    ResultReadTool.call(args, c).await
}

#[tokio::test]
async fn a_saved_result_reads_back_whole_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path(), &dir.path().join(".agentry"));
    let whole = text(10_000);
    let saved = save_result(&c.run.root, dir.path(), &c.run.artifacts, whole.as_bytes()).unwrap();
    assert_eq!(saved.sha256, sha256_hex(whole.as_bytes()));
    assert_eq!(
        saved.path,
        format!(".agentry/results/{}.json", saved.sha256)
    );
    let name = saved.path.rsplit('/').next().unwrap().to_string();
    // Parts of 999 bytes: some end inside a two-byte character.
    let mut back = String::new();
    let mut offset = 0u64;
    loop {
        let out = read(&c, json!({"ref": name, "offset": offset, "limit": 999}))
            .await
            .unwrap();
        assert_eq!(out.data["offset"], offset);
        back.push_str(out.data["content"].as_str().unwrap());
        offset = out.data["next_offset"].as_u64().unwrap();
        if out.data["eof"] == true {
            break;
        }
    }
    assert_eq!(back, whole);
}

#[tokio::test]
async fn bad_refs_limits_and_offsets_are_einval() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path(), &dir.path().join(".agentry"));
    let saved = save_result(&c.run.root, dir.path(), &c.run.artifacts, b"\"abc\"").unwrap();
    let name = saved.path.rsplit('/').next().unwrap().to_string();
    for args in [
        json!({"ref": "../../etc/passwd"}),
        json!({"ref": format!("{}.json", "0".repeat(64))}),
        json!({"ref": name, "limit": 0}),
        json!({"ref": name, "limit": 2_000_000}),
        json!({"ref": name, "offset": 6}),
    ] {
        let err = read(&c, args.clone()).await.expect_err("refused");
        assert_eq!(err.code, ErrorCode::Einval, "{args}: {err}");
    }
}

#[tokio::test]
async fn a_saved_result_changed_after_saving_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path(), &dir.path().join(".agentry"));
    let saved = save_result(&c.run.root, dir.path(), &c.run.artifacts, b"\"the truth\"").unwrap();
    // A tool that can write in the working directory rewrites it.
    std::fs::write(dir.path().join(&saved.path), "\"a lie\"").unwrap();
    let name = saved.path.rsplit('/').next().unwrap();
    let err = read(&c, json!({"ref": name})).await.expect_err("refused");
    assert_eq!(err.code, ErrorCode::Eprecond, "{err}");
}

#[tokio::test]
async fn a_link_planted_at_the_results_folder_or_a_saved_result_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let work = dir.path();
    std::fs::create_dir(work.join(".agentry")).unwrap();
    symlink(outside.path(), work.join(".agentry/results")).unwrap();
    let c = ctx(work, &work.join(".agentry"));
    assert!(save_result(&c.run.root, work, &c.run.artifacts, b"\"x\"").is_err());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

    // A link at a saved result's name, pointing outside, is not read through.
    std::fs::remove_file(work.join(".agentry/results")).unwrap();
    let secret = outside.path().join("secret.json");
    std::fs::write(&secret, "\"secret\"").unwrap();
    let name = format!("{}.json", sha256_hex(b"\"secret\""));
    std::fs::create_dir(work.join(".agentry/results")).unwrap();
    symlink(&secret, work.join(".agentry/results").join(&name)).unwrap();
    let err = read(&c, json!({"ref": name})).await.expect_err("refused");
    assert!(!err.message.contains("secret\""), "{err}");
}

#[tokio::test]
async fn results_saved_outside_the_working_directory_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = tempfile::tempdir().unwrap();
    let c = ctx(dir.path(), artifacts.path());
    let whole = text(3_000);
    let saved = save_result(&c.run.root, dir.path(), &c.run.artifacts, whole.as_bytes()).unwrap();
    assert!(saved.path.starts_with('/'), "{}", saved.path);
    let name = saved.path.rsplit('/').next().unwrap();
    let out = read(&c, json!({"ref": name})).await.unwrap();
    assert_eq!(out.data["content"], whole.as_str());
    assert_eq!(out.data["eof"], true);
}
