//! `[serve] retention`: stopped runs older than it (counted from their stop,
//! the store's last commit) are removed: their stored records, every table's
//! rows of their tree (`Store::delete_run`, one transaction), their working
//! directories, their finished webhook rows, and their entry in the table
//! (404 afterwards). A sweep runs at start and then every `retention / 2`
//! (at least every second, at most every minute).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::table::App;

/// Runs removed per store query; a sweep repeats until none is left.
const BATCH: usize = 100;

/// How often the sweep runs for `retention`.
pub(super) fn period(retention: Duration) -> Duration {
    (retention / 2).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

impl App {
    /// Sweeps at once, then every period (half the retention, from 1 s to 1 min), until `stop` resolves; nothing
    /// without `retention` in the config.
    pub async fn keep_retention(self, stop: impl std::future::Future<Output = ()>) {
        let Some(retention) = self.config.retention else {
            return;
        };
        let mut stop = std::pin::pin!(stop);
        loop {
            let removed = self.sweep(retention).await;
            if removed > 0 {
                tracing::info!(removed, "retention removed stopped runs");
            }
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(period(retention)) => {}
            }
        }
    }

    /// Removes every run that stopped more than `retention` ago; how many.
    pub async fn sweep(&self, retention: Duration) -> usize {
        let app = self.clone();
        tokio::task::spawn_blocking(move || app.sweep_blocking(retention))
            .await
            .unwrap_or(0)
    }

    fn sweep_blocking(&self, retention: Duration) -> usize {
        let now = agentry::protocol::now_millis();
        let cutoff = now.saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
        let mut removed = 0;
        if let Some(store) = self.runtime.store() {
            loop {
                let old = match store.stopped_before(cutoff, BATCH) {
                    Ok(old) => old,
                    Err(error) => {
                        tracing::warn!(%error, "retention: cannot list the stopped runs");
                        break;
                    }
                };
                let count = old.len();
                for run in old {
                    if self.is_live(&run.run_id) {
                        continue;
                    }
                    match store.delete_run(&run.run_id) {
                        Ok(records) => {
                            for record in &records {
                                remove_workdir(record.config.get("workdir"));
                            }
                        }
                        Err(error) => {
                            tracing::warn!(run_id = run.run_id, %error, "retention: run not removed");
                            // Not again in this sweep: the next one retries.
                            return removed;
                        }
                    }
                    self.forget_webhook(&run.run_id);
                    drop(self.forget(&run.run_id));
                    removed += 1;
                }
                if count < BATCH {
                    break;
                }
            }
        }
        // Runs only the table holds (a service without a store).
        for id in self.stopped_before(cutoff) {
            if let Some(entry) = self.forget(&id) {
                self.forget_webhook(&id);
                if !entry.stored {
                    removed += 1;
                }
            }
        }
        removed
    }
}

/// Removes a removed run's working directory, if it is one the service
/// made: directly inside `<tmp>/agentry/service` (inline tasks) or
/// `<tmp>/agentry/runs` (agents' task copies). Any other directory (one an
/// embedder named) is left alone.
fn remove_workdir(workdir: Option<&serde_json::Value>) {
    let Some(dir) = workdir
        .and_then(serde_json::Value::as_str)
        .map(PathBuf::from)
    else {
        return;
    };
    if !made_by_the_service(&dir) {
        return;
    }
    if let Err(error) = std::fs::remove_dir_all(&dir)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(workdir = %dir.display(), %error, "retention: working directory not removed");
    }
}

fn made_by_the_service(dir: &Path) -> bool {
    let Ok(root) = agentry::runtime::tempdir::private_temp_dir() else {
        return false;
    };
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    let parent = dir
        .parent()
        .map(|p| std::fs::canonicalize(p).unwrap_or(p.to_path_buf()));
    let named = dir
        .file_name()
        .is_some_and(|n| n != "." && n != ".." && !n.is_empty());
    named
        && [root.join("service"), root.join("runs")]
            .iter()
            .any(|r| Some(r) == parent.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_runs_every_half_retention_within_a_second_and_a_minute() {
        assert_eq!(period(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(period(Duration::from_millis(10)), Duration::from_secs(1));
        assert_eq!(
            period(Duration::from_secs(7 * 86_400)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn only_the_services_own_directories_are_removed() {
        assert!(!made_by_the_service(Path::new("/home/someone/project")));
        assert!(!made_by_the_service(Path::new("/")));
        let root = agentry::runtime::tempdir::private_temp_dir().unwrap_or_default();
        assert!(made_by_the_service(&root.join("service").join("run-x")));
        assert!(!made_by_the_service(&root.join("service")));
        assert!(!made_by_the_service(&root.join("elsewhere").join("run-x")));
    }
}
