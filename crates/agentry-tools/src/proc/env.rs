//! The child's environment: the allowlist, the model's `env`, and the ids the
//! host sets on every child (see the module docs of `proc`).

use std::collections::BTreeMap;
use std::ffi::OsString;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;

/// Set on every child to [`RunScope::run_id`](crate::RunScope::run_id).
pub const ENV_RUN_ID: &str = "AGENTRY_RUN_ID";

/// Set on every child to [`ToolContext::call_id`](crate::ToolContext::call_id).
pub const ENV_CALL_ID: &str = "AGENTRY_CALL_ID";

/// Set on every child to [`ToolContext::operation_id`](crate::ToolContext::operation_id): the same for every
/// attempt of one action, the key a `required_key` command dedupes on.
pub const ENV_OPERATION_ID: &str = "AGENTRY_OPERATION_ID";

/// Set on every child to an id no other spawn of this host process shares (the
/// host's pid and start time, and a counter): the mark the stray sweep finds the
/// spawn's escaped processes by. The start time keeps a later host that got a
/// dead host's pid from reusing its spawn ids, which a resume's fence kills by. The run and call ids would not do: a retry, or a second call
/// under the same context, has the same two, and a sweep still finishing for the
/// first spawn must never touch the second.
pub const ENV_SPAWN_ID: &str = "AGENTRY_SPAWN_ID";

/// Set on every child of a durable run to the run's fence mark
/// ([`ProcessLog::run_mark`](crate::ProcessLog::run_mark)): unique to the run
/// across stores (a run id is unique within one store only) and the same for
/// every attempt of it, so a resume finds what an earlier attempt left by it
/// and never touches a same-named run of another store.
pub const ENV_RUN_MARK: &str = "AGENTRY_RUN_MARK";

/// Set on every child of a call that has one to
/// [`ToolContext::traceparent`](crate::ToolContext::traceparent), the W3C trace
/// context (`00-<trace id>-<span id>-<flags>`) a traced program continues.
/// Host-owned like the ids: a value from the host's environment, a command
/// tool's fixed `env` or the model's `env` is dropped, so a tool's spans can
/// only join the trace of the call that started it.
pub const ENV_TRACEPARENT: &str = "TRACEPARENT";

/// The variables the host sets on every child (the run mark and the trace
/// context when the call has them); nobody else may set them.
pub const HOST_ENV: [&str; 6] = [
    ENV_RUN_ID,
    ENV_RUN_MARK,
    ENV_CALL_ID,
    ENV_OPERATION_ID,
    ENV_SPAWN_ID,
    ENV_TRACEPARENT,
];

/// A fresh value for [`ENV_SPAWN_ID`]: `PID-START-N`.
pub(super) fn next_spawn_id() -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    static HOST: OnceLock<String> = OnceLock::new();
    let host = HOST.get_or_init(|| {
        let pid = std::process::id();
        let start = i32::try_from(pid)
            .ok()
            .and_then(super::warden::start_time)
            .unwrap_or_default();
        format!("{pid}-{start}")
    });
    format!("{host}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The host's values of the allowlisted variables, overridden by the model's
/// `env`, every name of which must be allowlisted (else `EPERM` naming them).
pub(super) fn model_env(
    allowlist: &[String],
    given: &BTreeMap<String, String>,
) -> Result<Vec<(String, OsString)>, ToolError> {
    let refused: Vec<&str> = given
        .keys()
        .filter(|name| !allowlist.contains(name))
        .map(String::as_str)
        .collect();
    if !refused.is_empty() {
        return Err(ToolError::new(
            ErrorCode::Eperm,
            format!(
                "environment variable not allowed: {} (allowed: {})",
                refused.join(", "),
                allowlist.join(", ")
            ),
        )
        .retryable(false)
        .with_action("set only allowlisted variables, or none"));
    }
    let mut env = host_env(allowlist);
    for (name, value) in given {
        env.retain(|(n, _)| n != name);
        env.push((name.clone(), OsString::from(value)));
    }
    Ok(env)
}

/// The host's values of the allowlisted variables that are set.
pub(super) fn host_env(allowlist: &[String]) -> Vec<(String, OsString)> {
    allowlist
        .iter()
        .filter_map(|name| std::env::var_os(name).map(|value| (name.clone(), value)))
        .collect()
}
