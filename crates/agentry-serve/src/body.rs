//! Reading a request's JSON body: every failure is a 400 naming the problem.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use serde_json::{Map, Value};

use super::error::ApiError;

/// The body as a JSON object, refusing fields not in `allowed`. Read as bytes
/// (not `Json<T>`) so that every failure gets a JSON error naming it.
pub(super) fn object(body: &[u8], allowed: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(fields) = parse_json(body)? else {
        return Err(ApiError::bad_request(format!(
            "the body must be a JSON object with {}",
            allowed.join(", ")
        )));
    };
    if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown field {unknown:?}, expected one of {}",
            allowed.join(", ")
        )));
    }
    Ok(fields)
}

/// The body the guard read (it refused what does not fit, so this only fails
/// if a route is reached without it).
pub(super) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| ApiError::new(r.status(), r.body_text()))
}

pub(super) fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))
}

/// A required string field (`required`), or an optional one.
pub(super) fn string_field(
    fields: &Map<String, Value>,
    name: &str,
    required: bool,
) -> Result<Option<String>, ApiError> {
    match fields.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        None if !required => Ok(None),
        None => Err(ApiError::bad_request(format!("{name}: missing"))),
        Some(other) => Err(ApiError::bad_request(format!(
            "{name}: expected a non-empty string, found {other}"
        ))),
    }
}
