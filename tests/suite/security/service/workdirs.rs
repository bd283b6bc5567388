//! What the service leaves on disk: its runs' working directories.

use std::os::unix::fs::PermissionsExt;

use super::*;

/// A run's working directory was made 0755 in the shared temp directory, its
/// files 0644: every user of the machine could read what a run was given and
/// wrote. Now it is 0700 under `<tmp>/agentry/service` (0700, under the
/// CLI's 0700 `<tmp>/agentry`), the posted files 0600 in 0700 directories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_working_directory_is_private() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let service = Service::launch(Launch {
        env: vec![("TMPDIR", tmp.path().display().to_string())],
        ..Launch::default()
    })?;
    let mut task = listener_task();
    task["files"] = json!({"notes/secret.txt": "s3cret", "top.txt": "t"});
    service.create(&task).await?;
    let runs: Vec<_> = std::fs::read_dir(run_dirs(tmp.path()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    let [run] = runs.as_slice() else {
        return Err(format!("expected one working directory: {runs:?}").into());
    };
    let mode = |path: &Path| -> Result<u32, TestError> {
        Ok(std::fs::symlink_metadata(path)?.permissions().mode() & 0o777)
    };
    let expected = [
        (tmp.path().join("agentry"), 0o700),
        (run_dirs(tmp.path()), 0o700),
        (run.clone(), 0o700),
        (run.join("notes"), 0o700),
        (run.join("notes/secret.txt"), 0o600),
        (run.join("top.txt"), 0o600),
    ];
    for (path, want) in expected {
        assert_eq!(
            mode(&path)?,
            want,
            "{} is {:o}",
            path.display(),
            mode(&path)?
        );
    }
    Ok(())
}
