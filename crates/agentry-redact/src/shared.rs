//! What every redactor of the process shares, so that building one per run
//! compiles nothing a redactor before it compiled already: the environment's
//! secret values (read once, when the first redactor that reads the
//! environment is built), and the compiled literal sets and task patterns,
//! each kept by its content.
//!
//! Values registered at run time (`Redactor::add_literal`) are never kept
//! here: a run's field secrets stay with its redactor.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::error::RedactError;
use crate::literals::{self, Entry, Literals};
use crate::task::TaskPatterns;

/// Distinct compiled sets kept of each kind; past this, a new set is compiled
/// for its redactor alone (a process with that many distinct environments or
/// pattern lists pays a compilation per redactor, as before).
const KEPT: usize = 32;

static ENV: OnceLock<Vec<Entry>> = OnceLock::new();
static LITERALS: Mutex<Vec<Arc<Literals>>> = Mutex::new(Vec::new());
static TASKS: Mutex<Vec<Arc<TaskPatterns>>> = Mutex::new(Vec::new());

/// The secret values of the process environment, read on the first call.
/// (Changing the environment of a running multi-threaded process is unsound,
/// which is why `std::env::set_var` is `unsafe`: once a runtime runs, the
/// environment read here is the one it keeps.)
pub(crate) fn process_env() -> &'static [Entry] {
    ENV.get_or_init(|| {
        // Non-UTF-8 values cannot appear in our UTF-8 writes.
        literals::env_entries(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    })
}

/// The compiled literal set of `entries`, compiled once per distinct set.
pub(crate) fn literals(entries: &[Entry]) -> Result<Arc<Literals>, RedactError> {
    let mut kept = LITERALS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = kept.iter().find(|l| l.entries == entries) {
        return Ok(Arc::clone(found));
    }
    let built = Arc::new(Literals::build(entries.to_vec())?);
    if kept.len() < KEPT {
        kept.push(Arc::clone(&built));
    }
    Ok(built)
}

/// The compiled task patterns of `patterns` (`None` for none), compiled once
/// per distinct list; a bad pattern is an error every time it is asked for.
pub(crate) fn task_patterns(patterns: &[String]) -> Result<Option<Arc<TaskPatterns>>, RedactError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut kept = TASKS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = kept.iter().find(|t| t.patterns() == patterns) {
        return Ok(Some(Arc::clone(found)));
    }
    let Some(built) = TaskPatterns::compile(patterns)? else {
        return Ok(None);
    };
    let built = Arc::new(built);
    if kept.len() < KEPT {
        kept.push(Arc::clone(&built));
    }
    Ok(Some(built))
}
