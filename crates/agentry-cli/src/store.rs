//! The SQLite store on the command line: where it is by default, opening it,
//! and `agentry runs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry::{RuntimeError, SqliteStore, Store};

use crate::args::RunsArgs;

/// The store used when no `--store` is given: `$AGENTRY_STORE`, else
/// `agentry/runs.db` in the system temp dir. That one lives in a directory any
/// local user could have planted: it must be our own `0700` directory and the
/// file, if there, our own regular file (never a link), else an error.
pub(crate) fn default_store() -> Result<PathBuf, RuntimeError> {
    match std::env::var_os("AGENTRY_STORE").filter(|v| !v.is_empty()) {
        Some(path) => Ok(PathBuf::from(path)),
        None => {
            let path = agentry::runtime::tempdir::private_temp_dir()?.join("runs.db");
            agentry::runtime::tempdir::check_private_file(&path)?;
            Ok(path)
        }
    }
}

/// `--store FILE`, else the default store.
pub(crate) fn store_or_default(store: Option<&PathBuf>) -> Result<PathBuf, RuntimeError> {
    match store {
        Some(path) => Ok(path.clone()),
        None => default_store(),
    }
}

/// Opens (or creates) the SQLite store at `path`.
pub(crate) fn open_sqlite(path: &Path) -> Result<Arc<dyn Store>, RuntimeError> {
    Ok(Arc::new(SqliteStore::open(path)?))
}

/// `path`, if a store file is there: `resume` and `runs` never create one.
pub(crate) fn existing(path: PathBuf) -> Result<PathBuf, RuntimeError> {
    let why = match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => return Ok(path),
        Ok(meta) if meta.is_dir() => {
            "it is a directory, not a store file (pass the store's file, e.g. DIR/runs.db)".into()
        }
        Ok(_) => "it is not a regular file".into(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "no such file".into(),
        Err(e) => e.to_string(),
    };
    Err(agentry::store::StoreError::Open {
        path: path.display().to_string(),
        message: why,
    }
    .into())
}

/// `agentry runs --store FILE`.
pub(crate) fn list(args: &RunsArgs) -> Result<(), RuntimeError> {
    let path = existing(store_or_default(args.store.as_ref())?)?;
    let store = SqliteStore::open(&path)?;
    let runs: Vec<_> = store
        .runs()?
        .into_iter()
        .filter(|r| args.all || r.unfinished())
        .collect();
    if args.json {
        println!("{}", serde_json::to_string(&runs).unwrap_or_default());
        return Ok(());
    }
    for r in &runs {
        let status = serde_json::to_value(r.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let reason = r.stop_reason.map(|s| s.to_string()).unwrap_or_default();
        println!("{}  {:<18} {:<22} {}", r.run_id, status, reason, r.task_id);
    }
    Ok(())
}
