//! `GET /runs?status=&agent=&limit=&cursor=`: the caller's runs, newest first
//! (creation time, then id), live and stopped, those of earlier starts
//! included: a service with a store lists from it (`Store::list`, on an
//! index), plus what only the table holds (runs of a runtime without a
//! store). `{"runs": [...], "next_cursor": "…" | null}`.
//!
//! The cursor is opaque to clients: base64url of the last run's place and a
//! tag of the tenant it was given to. A cursor of another tenant (or one
//! crafted from another tenant's run ids) is 400, and even a cursor that
//! passed would only position the page: every page is filtered by the
//! caller's tenant.

use std::sync::Arc;

use agentry::store::{RunKey, RunQuery, StatusFilter, TenantFilter};
use axum::extract::{Extension, RawQuery, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::agents::RunMeta;
use super::error::ApiError;
use super::table::{App, Run, RunEntry};
use super::tenants::Tenant;

/// Runs a page holds when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;
/// The largest `limit` a client may ask for.
pub const MAX_LIMIT: usize = 500;

/// What a `GET /runs` asks for.
#[derive(Debug, Default)]
struct Filters {
    status: Option<StatusFilter>,
    agent: Option<String>,
    limit: Option<usize>,
    after: Option<RunKey>,
}

/// What a cursor holds (short keys: it travels in URLs).
#[derive(Debug, Serialize, Deserialize)]
struct Cursor {
    /// The tenant's tag.
    t: String,
    /// The last run's creation time.
    c: u64,
    /// The last run's id.
    r: String,
}

/// A tag standing for `tenant` in its cursors.
fn tenant_tag(tenant: &Tenant) -> String {
    let name = tenant
        .name()
        .map_or_else(|| "\0anyone".to_string(), str::to_string);
    hex::encode(&Sha256::digest(name.as_bytes())[..12])
}

fn encode_cursor(tenant: &Tenant, key: &RunKey) -> String {
    let cursor = Cursor {
        t: tenant_tag(tenant),
        c: key.created_at_ms,
        r: key.run_id.clone(),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&cursor).unwrap_or_default())
}

fn decode_cursor(tenant: &Tenant, text: &str) -> Result<RunKey, ApiError> {
    let bad = || {
        ApiError::bad_field(
            "cursor",
            "not a cursor this service gave you; pass a next_cursor of an earlier GET /runs unchanged",
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(text.trim()).map_err(|_| bad())?;
    let cursor: Cursor = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if cursor.t != tenant_tag(tenant) {
        return Err(bad());
    }
    Ok(RunKey {
        created_at_ms: cursor.c,
        run_id: cursor.r,
    })
}

/// `%XX` and `+` decoded; `None` when the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 2;
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The query string's filters; a bad value is 400 naming its parameter.
fn filters(query: Option<&str>, tenant: &Tenant) -> Result<Filters, ApiError> {
    let mut filters = Filters::default();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_decode(name).unwrap_or_default();
        let Some(value) = percent_decode(value) else {
            return Err(ApiError::bad_field(name, "not UTF-8 once decoded"));
        };
        match name.as_str() {
            "status" => {
                filters.status = Some(match value.as_str() {
                    "running" => StatusFilter::Unfinished,
                    "stopped" => StatusFilter::Stopped,
                    other => {
                        return Err(ApiError::bad_field(
                            "status",
                            format!("{other:?}: expected running or stopped"),
                        ));
                    }
                });
            }
            "agent" if !value.is_empty() => filters.agent = Some(value),
            "limit" => {
                let limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n));
                filters.limit = Some(limit.ok_or_else(|| {
                    ApiError::bad_field(
                        "limit",
                        format!("{value:?}: expected a whole number from 1 to {MAX_LIMIT}"),
                    )
                })?);
            }
            "cursor" if !value.is_empty() => filters.after = Some(decode_cursor(tenant, &value)?),
            "agent" | "cursor" => {}
            other => {
                return Err(ApiError::bad_field(
                    other,
                    "not a parameter of GET /runs (status, agent, limit, cursor)",
                ));
            }
        }
    }
    Ok(filters)
}

/// One row of the answer.
struct Row {
    key: RunKey,
    status: &'static str,
    stop_reason: Option<Value>,
    meta: RunMeta,
}

impl Row {
    fn view(&self) -> Value {
        let mut row = json!({
            "run_id": self.key.run_id,
            "status": self.status,
            "created_at_ms": self.key.created_at_ms,
        });
        super::routes::meta_fields(&mut row, &self.meta);
        if let Some(reason) = &self.stop_reason {
            row["stop_reason"] = reason.clone();
        }
        row
    }
}

/// A run only the table holds, as a row, if the filters keep it.
fn table_row(id: String, entry: &RunEntry, filters: &Filters) -> Option<Row> {
    let key = RunKey {
        created_at_ms: entry.created_ms,
        run_id: id,
    };
    let (status, stop_reason) = match entry.current() {
        Run::Live(handle) if handle.outcome().is_none() => ("running", None),
        Run::Live(handle) => ("stopped", handle.outcome().map(|o| o.stop_reason)),
        Run::Stopped(outcome) => ("stopped", Some(outcome.stop_reason)),
    };
    let kept = filters.after.as_ref().is_none_or(|after| key < *after)
        && filters
            .agent
            .as_ref()
            .is_none_or(|a| entry.meta.agent.as_ref() == Some(a))
        && match filters.status {
            None => true,
            Some(StatusFilter::Stopped) => status == "stopped",
            Some(StatusFilter::Unfinished) => status == "running",
        };
    kept.then(|| Row {
        key,
        status,
        stop_reason: stop_reason.and_then(|r| serde_json::to_value(r).ok()),
        meta: entry.meta.clone(),
    })
}

/// `GET /runs`.
pub(super) async fn list_runs(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let filters = filters(query.as_deref(), &tenant)?;
    let limit = filters.limit.unwrap_or(DEFAULT_LIMIT);
    let mut rows = Vec::new();
    if let Some(store) = app.runtime().store().map(Arc::clone) {
        let query = RunQuery {
            tenant: TenantFilter::Of(tenant.name().map(str::to_string)),
            agent: filters.agent.clone(),
            status: filters.status,
            after: filters.after.clone(),
            // One more than asked: whether there is a next page.
            limit: limit + 1,
        };
        let page = tokio::task::spawn_blocking(move || store.list(&query))
            .await
            .map_err(|e| ApiError::internal(format!("listing the runs failed: {e}")))?
            .map_err(|e| ApiError::internal(format!("listing the runs failed: {e}")))?;
        rows.extend(page.into_iter().map(|listed| {
            Row {
                key: listed.key(),
                status: if listed.summary.unfinished() {
                    "running"
                } else {
                    "stopped"
                },
                stop_reason: listed
                    .summary
                    .stop_reason
                    .and_then(|r| serde_json::to_value(r).ok()),
                meta: RunMeta::of_policy(&listed.policy.into()),
            }
        }));
    }
    rows.extend(
        app.runs_of(&tenant)
            .into_iter()
            .filter(|(_, entry)| !entry.stored)
            .filter_map(|(id, entry)| table_row(id, &entry, &filters)),
    );
    rows.sort_by(|a, b| b.key.cmp(&a.key));
    let next_cursor = (rows.len() > limit)
        .then(|| {
            rows.get(limit - 1)
                .map(|row| encode_cursor(&tenant, &row.key))
        })
        .flatten();
    rows.truncate(limit);
    let runs: Vec<Value> = rows.iter().map(Row::view).collect();
    // `next_cursor` only when there is a next page: an answer that fits one
    // page keeps the shape clients of earlier versions compare.
    let mut answer = json!({ "runs": runs });
    if let Some(cursor) = next_cursor {
        answer["next_cursor"] = json!(cursor);
    }
    Ok(axum::Json(answer).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_bound_to_its_tenant_and_bad_values_name_their_field() {
        let a = Tenant::named("a");
        let b = Tenant::named("b");
        let key = RunKey {
            created_at_ms: 7,
            run_id: "run-1".into(),
        };
        let cursor = encode_cursor(&a, &key);
        let back = filters(Some(&format!("cursor={cursor}&limit=5")), &a).map(|f| f.after);
        assert_eq!(back.ok().flatten(), Some(key));
        for (query, field) in [
            (format!("cursor={cursor}"), "cursor"),
            ("cursor=run-1".to_string(), "cursor"),
            ("limit=0".to_string(), "limit"),
            ("limit=501".to_string(), "limit"),
            ("limit=ten".to_string(), "limit"),
            ("status=asleep".to_string(), "status"),
            ("tenant=a".to_string(), "tenant"),
        ] {
            let err = filters(Some(&query), &b).err();
            assert_eq!(
                err.and_then(|e| e.field),
                Some(field.to_string()),
                "{query}"
            );
        }
        assert_eq!(percent_decode("a%2Fb+c").as_deref(), Some("a/b c"));
    }
}
