//! The SQLite store on the command line: where it is by default (this user's
//! state directory), opening it, and `agentry runs` (with `--tree RUN_ID`,
//! one run's agent tree).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry::protocol::stored_policy::StoredPolicy;
use agentry::protocol::terminal::{escape_line, escape_text};
use agentry::store::RunSummary;
use agentry::{RunTree, RuntimeError, SqliteStore, Store};

use crate::args::RunsArgs;

/// The store used when no `--store` is given: `$AGENTRY_STORE`, else
/// `runs.db` in this user's state directory ([`state_dir`]). That directory
/// must be our own `0700` directory (created so) and the file, if there, our
/// own regular file (never a link), else an error naming the path.
pub(crate) fn default_store() -> Result<PathBuf, RuntimeError> {
    match std::env::var_os("AGENTRY_STORE").filter(|v| !v.is_empty()) {
        Some(path) => Ok(PathBuf::from(path)),
        None => {
            let dir = state_dir()?;
            agentry::runtime::tempdir::private_dir(&dir, "set AGENTRY_STORE")?;
            let path = dir.join("runs.db");
            agentry::runtime::tempdir::check_private_file(&path)?;
            Ok(path)
        }
    }
}

/// `$XDG_STATE_HOME/agentry`, else `$HOME/.local/state/agentry` (the XDG base
/// directory rules: per user, kept across reboots, unlike the shared temp
/// directory, where every user's and checkout's runs would mix). A relative
/// `XDG_STATE_HOME` is ignored, as the rules say.
fn state_dir() -> Result<PathBuf, RuntimeError> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(state) = absolute("XDG_STATE_HOME") {
        return Ok(state.join("agentry"));
    }
    match absolute("HOME") {
        Some(home) => Ok(home.join(".local/state/agentry")),
        None => Err(agentry::store::StoreError::Open {
            path: "~/.local/state/agentry/runs.db".into(),
            message: "neither XDG_STATE_HOME nor HOME is an absolute path; \
                      set AGENTRY_STORE, or pass --store FILE"
                .into(),
        }
        .into()),
    }
}

/// What a run's sandboxed processes must not read besides the defaults: the
/// store file's directory (`store`, when the run has one) and agentry's
/// state directory (where the default store and its siblings live).
pub(crate) fn sandbox_host(store: Option<&Path>) -> agentry::runtime::sandbox::SandboxHost {
    let mut deny: Vec<PathBuf> = Vec::new();
    if let Some(dir) = store.filter(|s| !is_url(s)).map(absolute_parent) {
        deny.push(dir);
    }
    if let Ok(dir) = state_dir()
        && !deny.contains(&dir)
    {
        deny.push(dir);
    }
    agentry::runtime::sandbox::SandboxHost { home: None, deny }
}

/// The directory a (possibly relative) file is in, made absolute.
fn absolute_parent(file: &Path) -> PathBuf {
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    file.parent().map_or(file.clone(), Path::to_path_buf)
}

/// The store a run started with these flags would use, for its sandbox
/// (`None` with `--no-store` or when the default cannot be used).
pub(crate) fn store_of(store: Option<&PathBuf>, no_store: bool) -> Option<PathBuf> {
    match (store, no_store) {
        (_, true) => None,
        (Some(path), false) => Some(path.clone()),
        (None, false) => default_store().ok(),
    }
}

/// `--store FILE`, else the default store.
pub(crate) fn store_or_default(store: Option<&PathBuf>) -> Result<PathBuf, RuntimeError> {
    match store {
        Some(path) => Ok(path.clone()),
        None => default_store(),
    }
}

/// Whether `--store` (or `$AGENTRY_STORE`) names a Postgres database
/// (`postgres://…`) rather than a SQLite file.
pub(crate) fn is_url(store: &Path) -> bool {
    store.to_str().is_some_and(agentry::store::is_postgres_url)
}

/// Opens the store `path` names: a Postgres database for a `postgres://`
/// URL (connected once per process and URL while in use), else the SQLite
/// file, created if missing. Within one process every caller asking for the
/// same file while it is open gets the same store: one writer connection and
/// one reader, however many runtimes commit to it (`agentry serve` starts a
/// runtime for each named agent's run).
pub(crate) fn open_store(path: &Path) -> Result<Arc<dyn Store>, RuntimeError> {
    if is_url(path) {
        return open_postgres(path.to_str().unwrap_or_default());
    }
    type Open = std::collections::HashMap<PathBuf, std::sync::Weak<SqliteStore>>;
    static OPEN: std::sync::OnceLock<std::sync::Mutex<Open>> = std::sync::OnceLock::new();
    let mut open = OPEN
        .get_or_init(Default::default)
        .lock()
        // Plain inserts and lookups: a panic elsewhere leaves the map whole.
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Ok(key) = std::fs::canonicalize(path)
        && let Some(store) = open.get(&key).and_then(std::sync::Weak::upgrade)
    {
        return Ok(store);
    }
    let store = Arc::new(SqliteStore::open(path)?);
    open.retain(|_, kept| kept.strong_count() > 0);
    if let Ok(key) = std::fs::canonicalize(path) {
        open.insert(key, Arc::downgrade(&store));
    }
    Ok(store)
}

/// `path`, if a store file is there: `resume` and `runs` never create one.
pub(crate) fn existing(path: PathBuf) -> Result<PathBuf, RuntimeError> {
    if is_url(&path) {
        // A database is checked by connecting to it.
        return Ok(path);
    }
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
    let store = open_store(&path)?;
    let store = store.as_ref();
    if let Some(run_id) = &args.tree {
        let all = store.runs()?;
        let tree = stored_tree(store, &all, run_id)?;
        if args.json {
            println!("{}", serde_json::to_string(&tree).unwrap_or_default());
        } else {
            print!("{}", escape_text(&tree.render()));
        }
        return Ok(());
    }
    let all = store.runs()?;
    let stored = all.len();
    let runs: Vec<_> = all
        .into_iter()
        .filter(|r| args.all || r.unfinished())
        .collect();
    if runs.is_empty() {
        eprintln!("agentry: {}", nothing_listed(&path, stored, args.all));
    }
    if args.json {
        println!("{}", serde_json::to_string(&runs).unwrap_or_default());
        return Ok(());
    }
    // Ids and task names are the store's: a hand-edited one is shown escaped.
    for r in &runs {
        let status = serde_json::to_value(r.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let reason = r.stop_reason.map(|s| s.to_string()).unwrap_or_default();
        println!(
            "{}  {:<18} {:<22} {}",
            escape_line(&r.run_id),
            status,
            reason,
            escape_line(&r.task_id)
        );
    }
    Ok(())
}

/// Why `agentry runs` lists nothing: an empty list alone reads as a broken
/// command (or the wrong store), and finished runs are hidden by default.
fn nothing_listed(store: &Path, stored: usize, all: bool) -> String {
    let store = store.display();
    if stored == 0 || all {
        format!("no runs in {store}")
    } else {
        format!("no unfinished runs in {store} ({stored} finished; agentry runs --all lists them)")
    }
}

/// The stored tree under `run_id`: its record and last checkpoint, then its
/// children's (recorded when they stopped), in the order they were created.
fn stored_tree(
    store: &dyn Store,
    runs: &[RunSummary],
    run_id: &str,
) -> Result<RunTree, RuntimeError> {
    let stored = store.load(run_id)?.ok_or_else(|| RuntimeError::NoSuchRun {
        run_id: run_id.to_string(),
        store: store.location(),
    })?;
    let config = &stored.record.config;
    let control = stored.checkpoint.map(|c| c.snapshot.control);
    let limits = control
        .as_ref()
        .map(|c| c.limits)
        .or_else(|| serde_json::from_value(config["limits"].clone()).ok())
        .unwrap_or_default();
    let mut kids: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| r.parent_id.as_deref() == Some(run_id))
        .collect();
    kids.sort_by_key(|r| r.created_at_ms);
    let children = kids
        .into_iter()
        .map(|r| stored_tree(store, runs, &r.run_id))
        .collect::<Result<_, _>>()?;
    Ok(RunTree {
        run_id: run_id.to_string(),
        name: stored.record.task_id.clone(),
        goal: config["goal"].as_str().unwrap_or_default().to_string(),
        model: model_of(&stored.record.policy),
        stop_reason: control.as_ref().and_then(|c| c.stop_reason),
        limits,
        spent: control.map(|c| c.spent).unwrap_or_default(),
        children,
    })
}

/// A stored policy as a model name: a root's or a child's `policy`, else the
/// embedder's text.
fn model_of(policy: &str) -> String {
    StoredPolicy::parse(policy).policy_name().to_string()
}

/// Connects to the Postgres store at `url`, once per process while in use.
fn open_postgres(url: &str) -> Result<Arc<dyn Store>, RuntimeError> {
    type Open = std::collections::HashMap<String, std::sync::Weak<agentry::PostgresStore>>;
    static OPEN: std::sync::OnceLock<std::sync::Mutex<Open>> = std::sync::OnceLock::new();
    let mut open = OPEN
        .get_or_init(Default::default)
        .lock()
        // Plain inserts and lookups: a panic elsewhere leaves the map whole.
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(store) = open.get(url).and_then(std::sync::Weak::upgrade) {
        return Ok(store);
    }
    let store = Arc::new(agentry::PostgresStore::connect(url)?);
    open.retain(|_, kept| kept.strong_count() > 0);
    open.insert(url.to_string(), Arc::downgrade(&store));
    Ok(store)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `agentry serve` opens the store once per named agent's run: each gets
    /// the one open store of that file, not connections of its own.
    #[test]
    fn one_file_open_twice_is_one_store_until_it_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let first = open_store(&path).unwrap();
        let again = open_store(&dir.path().join(".").join("runs.db")).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the same file, the same store");
        let other = open_store(&dir.path().join("other.db")).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        drop((first, again));
        let wal = dir.path().join("runs.db-wal");
        assert!(!wal.exists(), "closed with its last user");
    }
}
