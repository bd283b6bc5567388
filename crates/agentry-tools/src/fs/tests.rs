//! The file tools, driven through `Tool::call` on real temporary directories.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::{ResourceRef, ToolError};
use agentry_protocol::fingerprint::sha256_hex;
use agentry_protocol::tool::{Effect, Idempotency};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::errors::LIST_ACTION;
use super::*;
use crate::tool::{RunScope, Tool, ToolContext, ToolOutput};

fn ctx(workdir: &Path) -> ToolContext {
    ToolContext {
        run: Arc::new(RunScope::new("run-1", workdir).unwrap()),
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

fn assert_eperm(result: Result<ToolOutput, ToolError>) -> ToolError {
    let err = result.expect_err("expected EPERM");
    assert_eq!(err.code, ErrorCode::Eperm, "{err}");
    assert!(!err.retryable);
    assert!(err.suggested_action.is_some());
    err
}

#[tokio::test]
async fn write_then_read_round_trips_with_sha256() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let content = "hello, wörld\n";
    let expected = sha256_hex(content.as_bytes());

    let out = WriteTool
        .call(json!({"path": "notes.txt", "content": content}), &c)
        .await
        .unwrap();
    assert_eq!(out.data["path"], "notes.txt");
    assert_eq!(out.data["bytes"], content.len() as u64);
    assert_eq!(out.data["sha256"], expected.as_str());
    assert_eq!(
        out.refs,
        vec![ResourceRef {
            path: "notes.txt".into(),
            sha256: expected.clone(),
            bytes: content.len() as u64
        }]
    );

    let out = ReadTool
        .call(json!({"path": "./notes.txt"}), &c)
        .await
        .unwrap();
    assert_eq!(out.data["path"], "notes.txt");
    assert_eq!(out.data["content"], content);
    assert_eq!(out.data["bytes"], content.len() as u64);
    assert_eq!(out.data["sha256"], expected.as_str());
    assert_eq!(out.refs.len(), 1);
    assert_eq!(out.refs[0].sha256, expected);

    // Overwrite replaces the content and leaves no temp file behind.
    WriteTool
        .call(json!({"path": "notes.txt", "content": "v2"}), &c)
        .await
        .unwrap();
    let out = ReadTool
        .call(json!({"path": "notes.txt"}), &c)
        .await
        .unwrap();
    assert_eq!(out.data["content"], "v2");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![OsString::from("notes.txt")]);
}

#[tokio::test]
async fn write_creates_nested_directories() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let out = WriteTool
        .call(json!({"path": "a/b/c/d.txt", "content": "deep"}), &c)
        .await
        .unwrap();
    assert_eq!(out.data["path"], "a/b/c/d.txt");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a/b/c/d.txt")).unwrap(),
        "deep"
    );
}

/// A path too long or too deep for the system is refused for what it is,
/// not as a tree that "kept changing" (retryable): a 3,000-level path used to
/// be.
#[tokio::test]
async fn a_path_too_long_or_too_deep_is_refused_for_that_and_not_retryable() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let write = |path: String| {
        let c = &c;
        async move {
            WriteTool
                .call(json!({"path": path, "content": "x"}), c)
                .await
        }
    };
    let err = write(format!("{}f", "a/".repeat(3_000))).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval, "{err}");
    assert!(!err.retryable, "{err}");
    assert!(
        err.message.contains("ENAMETOOLONG") && err.message.contains("4095"),
        "{err}"
    );
    // Within PATH_MAX, but deeper than a walk may hold handles for.
    let err = write(format!("{}f", "a/".repeat(300))).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval, "{err}");
    assert!(!err.retryable, "{err}");
    assert!(err.message.contains("more than 256 directories"), "{err}");
    // Deep, but within both limits: every directory is made.
    let deep = format!("{}f", "d/".repeat(256));
    write(deep.clone()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join(&deep)).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn list_is_sorted_with_kinds_and_sizes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.txt"), "12345").unwrap();
    std::fs::write(dir.path().join("a.txt"), "1").unwrap();
    std::fs::create_dir(dir.path().join("c")).unwrap();
    symlink(dir.path().join("a.txt"), dir.path().join("d")).unwrap();
    let c = ctx(dir.path());

    let out = ListTool.call(json!({}), &c).await.unwrap();
    assert_eq!(out.data["path"], ".");
    assert_eq!(
        out.data["entries"],
        json!([
            {"name": "a.txt", "kind": "file", "bytes": 1},
            {"name": "b.txt", "kind": "file", "bytes": 5},
            {"name": "c", "kind": "dir", "bytes": 0},
            {"name": "d", "kind": "symlink", "bytes": 0},
        ])
    );
    assert!(out.data.get("truncated").is_none());

    let out = ListTool.call(json!({"path": "c"}), &c).await.unwrap();
    assert_eq!(out.data["path"], "c");
    assert_eq!(out.data["entries"], json!([]));
}

#[tokio::test]
async fn absolute_paths_are_eperm() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    assert_eperm(ReadTool.call(json!({"path": "/etc/passwd"}), &c).await);
    assert_eperm(
        WriteTool
            .call(json!({"path": "/tmp/x", "content": "x"}), &c)
            .await,
    );
    assert_eperm(ListTool.call(json!({"path": "/"}), &c).await);
    // Even an absolute path that points inside the workdir.
    let inside = dir.path().join("x.txt");
    std::fs::write(&inside, "x").unwrap();
    assert_eperm(
        ReadTool
            .call(json!({"path": inside.to_str().unwrap()}), &c)
            .await,
    );
}

#[tokio::test]
async fn parent_components_are_eperm() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a")).unwrap();
    let c = ctx(dir.path());
    let err = assert_eperm(ReadTool.call(json!({"path": "../x"}), &c).await);
    assert!(err.message.contains("../x"), "{}", err.message);
    assert_eperm(ReadTool.call(json!({"path": "a/../../x"}), &c).await);
    // `..` is refused even when it would stay inside.
    assert_eperm(ReadTool.call(json!({"path": "a/../x"}), &c).await);
    assert_eperm(
        WriteTool
            .call(json!({"path": "a/../../x", "content": "x"}), &c)
            .await,
    );
    assert_eperm(ListTool.call(json!({"path": ".."}), &c).await);
}

#[tokio::test]
async fn empty_path_is_einval() {
    let dir = tempfile::tempdir().unwrap();
    let err = resolve_in_workdir(dir.path(), "", false).unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
}

#[tokio::test]
async fn symlink_to_outside_is_eperm_for_read_write_and_list() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    let dir = tempfile::tempdir().unwrap();
    symlink(outside.path(), dir.path().join("out")).unwrap();
    symlink(
        outside.path().join("secret.txt"),
        dir.path().join("secret-link"),
    )
    .unwrap();
    let c = ctx(dir.path());

    let err = assert_eperm(ReadTool.call(json!({"path": "out/secret.txt"}), &c).await);
    assert!(
        err.message.contains("escapes the working directory"),
        "{}",
        err.message
    );
    assert!(err.message.contains("out/secret.txt"), "{}", err.message);
    assert_eperm(ReadTool.call(json!({"path": "secret-link"}), &c).await);
    assert_eperm(
        WriteTool
            .call(json!({"path": "out/new.txt", "content": "x"}), &c)
            .await,
    );
    assert_eperm(
        WriteTool
            .call(json!({"path": "out/sub/new.txt", "content": "x"}), &c)
            .await,
    );
    assert_eperm(
        WriteTool
            .call(json!({"path": "secret-link", "content": "pwned"}), &c)
            .await,
    );
    assert_eperm(ListTool.call(json!({"path": "out"}), &c).await);

    // Nothing leaked out.
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!outside.path().join("new.txt").exists());
    assert!(!outside.path().join("sub").exists());
}

#[tokio::test]
async fn dangling_symlink_to_outside_cannot_be_written_through() {
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = outside.path().join("created.txt");
    symlink(&target, dir.path().join("dangling")).unwrap();
    let c = ctx(dir.path());
    assert_eperm(
        WriteTool
            .call(json!({"path": "dangling", "content": "x"}), &c)
            .await,
    );
    assert!(!target.exists());
    let err = ReadTool
        .call(json!({"path": "dangling"}), &c)
        .await
        .unwrap_err();
    assert!(matches!(err.code, ErrorCode::Einval | ErrorCode::Eperm));
}

#[tokio::test]
async fn symlink_inside_the_workdir_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::fs::write(dir.path().join("real/f.txt"), "inside").unwrap();
    symlink(dir.path().join("real"), dir.path().join("alias")).unwrap();
    let c = ctx(dir.path());
    let out = ReadTool
        .call(json!({"path": "alias/f.txt"}), &c)
        .await
        .unwrap();
    assert_eq!(out.data["content"], "inside");
    let out = ListTool.call(json!({"path": "alias"}), &c).await.unwrap();
    assert_eq!(out.data["entries"][0]["name"], "f.txt");
}

#[tokio::test]
async fn workdir_reached_through_a_symlink_still_works() {
    let real = tempfile::tempdir().unwrap();
    let holder = tempfile::tempdir().unwrap();
    let link = holder.path().join("wd");
    symlink(real.path(), &link).unwrap();
    let c = ctx(&link);
    WriteTool
        .call(json!({"path": "x.txt", "content": "ok"}), &c)
        .await
        .unwrap();
    let out = ReadTool.call(json!({"path": "x.txt"}), &c).await.unwrap();
    assert_eq!(out.data["content"], "ok");
}

#[tokio::test]
async fn missing_file_is_einval_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let err = ReadTool
        .call(json!({"path": "nope/missing.txt"}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    assert_eq!(err.message, "no such file: nope/missing.txt");
    assert_eq!(err.suggested_action.as_deref(), Some(LIST_ACTION));

    let err = ListTool
        .call(json!({"path": "nope"}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    assert!(err.message.contains("nope"), "{}", err.message);
}

#[tokio::test]
async fn non_utf8_and_oversized_files_are_einval() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bin"), [0x66, 0x6f, 0xff, 0xfe]).unwrap();
    std::fs::write(
        dir.path().join("big"),
        vec![b'a'; (MAX_READ_BYTES + 1) as usize],
    )
    .unwrap();
    std::fs::write(
        dir.path().join("exact"),
        vec![b'a'; MAX_READ_BYTES as usize],
    )
    .unwrap();
    let c = ctx(dir.path());

    let err = ReadTool.call(json!({"path": "bin"}), &c).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    assert!(err.message.contains("utf-8"), "{}", err.message);
    assert!(err.message.contains("bin"), "{}", err.message);

    let err = ReadTool.call(json!({"path": "big"}), &c).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    assert!(err.message.starts_with("file too large"), "{}", err.message);

    let out = ReadTool.call(json!({"path": "exact"}), &c).await.unwrap();
    assert_eq!(out.data["bytes"], MAX_READ_BYTES);
}

#[tokio::test]
async fn directories_are_not_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("f"), "x").unwrap();
    let c = ctx(dir.path());
    let err = ReadTool.call(json!({"path": "d"}), &c).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    let err = WriteTool
        .call(json!({"path": "d", "content": "x"}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    let err = WriteTool
        .call(json!({"path": ".", "content": "x"}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    let err = ListTool.call(json!({"path": "f"}), &c).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    let err = WriteTool
        .call(json!({"path": "f/under-a-file", "content": "x"}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval, "{err}");
}

#[test]
fn schemas_forbid_additional_properties() {
    for tool in [
        Arc::new(ReadTool) as Arc<dyn Tool>,
        Arc::new(WriteTool),
        Arc::new(ListTool),
    ] {
        let contract = tool.contract();
        assert_eq!(
            contract.input_schema["additionalProperties"],
            json!(false),
            "{}",
            contract.name
        );
        assert_eq!(contract.timeout_ms, 10_000);
        assert_eq!(contract.idempotency, Idempotency::Idempotent);
    }
    let read = ReadTool.contract();
    assert_eq!(read.name, "fs.read");
    assert_eq!(read.effect, Effect::ReadOnly);
    assert_eq!(read.auth_scope, "fs.read");
    let write = WriteTool.contract();
    assert_eq!(write.name, "fs.write");
    assert_eq!(write.effect, Effect::Reversible);
    assert_eq!(write.auth_scope, "fs.write");
    let list = ListTool.contract();
    assert_eq!(list.name, "fs.list");
    assert_eq!(list.effect, Effect::ReadOnly);
    assert_eq!(list.auth_scope, "fs.read");
    assert_eq!(
        list.input_schema["required"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0),
        0
    );
}

#[tokio::test]
async fn read_parts_by_offset_and_limit_cover_a_file_larger_than_one_read() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    // Over 1 MiB, with two- and three-byte characters.
    let content: String = (0..120_000).map(|i| format!("{i} añ€\n")).collect();
    assert!(content.len() as u64 > MAX_READ_BYTES);
    std::fs::write(dir.path().join("big.txt"), &content).unwrap();
    let whole = ReadTool
        .call(json!({"path": "big.txt"}), &c)
        .await
        .expect_err("too large whole");
    assert!(whole.suggested_action.unwrap().contains("offset"));
    let mut back = String::new();
    let mut offset = 0u64;
    loop {
        let out = ReadTool
            .call(
                json!({"path": "big.txt", "offset": offset, "limit": 100_001}),
                &c,
            )
            .await
            .unwrap();
        assert_eq!(out.data["offset"], offset);
        assert_eq!(out.data["sha256"], sha256_hex(content.as_bytes()).as_str());
        assert_eq!(out.data["bytes"], content.len() as u64);
        back.push_str(out.data["content"].as_str().unwrap());
        offset = out.data["next_offset"].as_u64().unwrap();
        if out.data["eof"] == true {
            break;
        }
    }
    assert_eq!(back, content);
    // A part that starts inside a character starts after it.
    let euro = content.find('€').unwrap() as u64;
    let out = ReadTool
        .call(
            json!({"path": "big.txt", "offset": euro + 1, "limit": 10}),
            &c,
        )
        .await
        .unwrap();
    assert_eq!(out.data["offset"], euro + 3);
}

#[tokio::test]
async fn bad_offsets_and_limits_are_einval() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    std::fs::write(dir.path().join("a.txt"), "abc").unwrap();
    for args in [
        json!({"path": "a.txt", "offset": 4}),
        json!({"path": "a.txt", "limit": 0}),
        json!({"path": "a.txt", "limit": MAX_READ_BYTES + 1}),
        json!({"path": "a.txt", "offset": -1}),
    ] {
        let err = ReadTool.call(args.clone(), &c).await.expect_err("refused");
        assert_eq!(err.code, ErrorCode::Einval, "{args}: {err}");
    }
    let out = ReadTool
        .call(json!({"path": "a.txt", "offset": 3}), &c)
        .await
        .unwrap();
    assert_eq!(out.data["content"], "");
    assert_eq!(out.data["eof"], true);
}
