//! agentry's own artifact writes: links planted where it saves output, and
//! file tools kept out of its artifact directory.

use super::*;

/// A tar archive at `dest` holding one symbolic link `link` → `target`, made
/// with the real `tar`.
fn tar_with_link(dest: &Path, link: &str, target: &Path) -> Result<(), TestError> {
    let staging = tempfile::tempdir()?;
    let at = staging.path().join(link);
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent)?;
    }
    symlink(target, &at)?;
    let status = std::process::Command::new("tar")
        .arg("-cf")
        .arg(dest)
        .arg("-C")
        .arg(staging.path())
        .arg(link)
        .status()?;
    if !status.success() {
        return Err(format!("tar failed: {status}").into());
    }
    Ok(())
}

/// A runtime with two command tools and no `proc.run`: `unpack` extracts
/// `payload.tar`, `flood` prints 100,000 bytes of text (past the inline cap, so
/// it is saved as an artifact).
fn unpack_and_flood() -> Result<Runtime, TestError> {
    let unpack = CommandTool::new(
        ToolContract::new(
            "unpack",
            "Extract payload.tar here.",
            json!({"type": "object"}),
        )
        .effect(Effect::Reversible),
        ["tar", "-xf", "payload.tar"],
    )?;
    let flood = CommandTool::new(
        ToolContract::new("flood", "Print a lot.", json!({"type": "object"}))
            .effect(Effect::ReadOnly),
        ["sh", "-c", "yes agentry | head -c 100000"],
    )?;
    Ok(runtime_with(vec![Arc::new(unpack), Arc::new(flood)])?)
}

fn unpack_then_flood_policy() -> agentry::ScriptedPolicy {
    ScriptBuilder::new()
        .call("unpack", "unpack", json!({}))
        .call("big", "flood", json!({}))
        .call(
            "read",
            "fs.read",
            json!({"path": ".agentry/out/big.1.stdout"}),
        )
        .finish("done")
        .policy()
}

/// Issue 16, item 2: an unpacking tool plants `.agentry/out/big.1.stdout` as a
/// link to a file outside; agentry then saves call `big`'s large output. The
/// link is replaced, not followed: the outside file is intact, and the artifact
/// is a real file the model can read back by its reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_link_planted_by_a_tool_is_replaced_not_followed() -> Result<(), TestError> {
    let task =
        TestTask::new("unpack, then print a lot", &[])?.grant(&["unpack", "flood", "fs.read"]);
    let victim = task.outside().join("victim.txt");
    std::fs::write(&victim, "precious")?;
    tar_with_link(
        &task.workdir().join("payload.tar"),
        ".agentry/out/big.1.stdout",
        &victim,
    )?;

    let (outcome, events) = run_with_events(
        &unpack_and_flood()?,
        task.config(),
        unpack_then_flood_policy(),
    )
    .await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let after = std::fs::read(&victim)?;
    assert!(
        after == b"precious",
        "the file outside was overwritten ({} bytes)",
        after.len()
    );
    let results = tool_results(&events);
    let big = &results[1].1;
    assert_eq!(big.refs.len(), 1, "{big:?}");
    assert_eq!(big.refs[0].path, ".agentry/out/big.1.stdout");
    let artifact = task.workdir().join(&big.refs[0].path);
    assert!(std::fs::symlink_metadata(&artifact)?.file_type().is_file());
    assert_eq!(std::fs::metadata(&artifact)?.len(), 100_000);
    let read = &results[2].1;
    assert_eq!(task.whole_data(read)?["bytes"], json!(100_000), "{read:?}");
    Ok(())
}

/// The same, with the whole `.agentry` directory planted as a link to a
/// directory outside: the artifact is refused (a problem in the result, the
/// head still inline), and nothing is written outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_directory_planted_as_a_link_is_refused() -> Result<(), TestError> {
    let task =
        TestTask::new("unpack, then print a lot", &[])?.grant(&["unpack", "flood", "fs.read"]);
    let outside = task.outside();
    tar_with_link(&task.workdir().join("payload.tar"), ".agentry", &outside)?;

    let (_, events) = run_with_events(
        &unpack_and_flood()?,
        task.config(),
        unpack_then_flood_policy(),
    )
    .await?;

    let written: Vec<_> = walk(&outside);
    assert!(written.is_empty(), "written outside: {written:?}");
    let results = tool_results(&events);
    let big = &results[1].1;
    assert!(big.refs.is_empty(), "{big:?}");
    // Nor could the result itself be saved there: only its head is kept.
    assert_eq!(big.saved, None, "{big:?}");
    let head = &big.cut.as_ref().ok_or("not cut")?.head;
    let problems = head.split("\"signal\"").next().unwrap_or_default();
    assert!(problems.contains("could not be stored"), "{problems}");
    assert!(head.contains("\"stdout\":\"agentry\\n"), "{head}");
    Ok(())
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// `fs.write` refuses agentry's artifact directory, by its name or through a
/// link to it; `fs.read` still reads an artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tools_cannot_write_into_the_artifact_directory() -> Result<(), TestError> {
    // Every tampering is tried: the run must not stop at the third denial.
    let task = TestTask::new("tamper with artifacts", &[])?
        .grant(&["fs.*"])
        .max_denied(0);
    std::fs::create_dir_all(task.workdir().join(".agentry/out"))?;
    std::fs::write(task.workdir().join(".agentry/out/c.1.stdout"), "agentry's")?;
    symlink(".agentry", task.workdir().join("alias"))?;
    let policy = ScriptBuilder::new()
        .call(
            "w1",
            "fs.write",
            json!({"path": ".agentry/out/c.1.stdout", "content": "forged"}),
        )
        .call(
            "w2",
            "fs.write",
            json!({"path": "alias/out/c.1.stdout", "content": "forged"}),
        )
        .call(
            "w3",
            "fs.write",
            json!({"path": ".agentry/new/x", "content": "x"}),
        )
        .call("r1", "fs.read", json!({"path": ".agentry/out/c.1.stdout"}))
        .finish("done")
        .policy();

    let (_, events) = run_with_events(&Runtime::with_builtins()?, task.config(), policy).await?;

    let codes: Vec<Option<ErrorCode>> = tool_results(&events)
        .iter()
        .map(|(_, r)| r.error_code())
        .collect();
    let eperm = Some(ErrorCode::Eperm);
    assert_eq!(codes[..4], [eperm, eperm, eperm, None]);
    assert_eq!(task.read_file(".agentry/out/c.1.stdout")?, "agentry's");
    assert!(!task.workdir().join(".agentry/new").exists());
    Ok(())
}
