//! What every JSON-RPC answer goes through: the body read up to a cap
//! ([`read_capped`]), and its result or error ([`rpc_result`]).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{A2aError, RpcErrorKind};

/// The largest response body read from an agent: a task with its history
/// and artifacts fits many times over; past it the answer is an error, not
/// memory spent on a runaway peer.
pub(crate) const MAX_BODY: usize = 16 * 1024 * 1024;

/// A failed capped read as the client's error.
pub(crate) fn capped_error(e: Capped, url: &str, method: &'static str) -> A2aError {
    match e {
        Capped::Http(e) => A2aError::Transport {
            url: url.to_string(),
            method,
            timed_out: e.is_timeout(),
            reason: agentry_tls::error_chain(&e),
        },
        Capped::TooLarge => A2aError::InvalidResponse {
            url: url.to_string(),
            method,
            reason: format!("the body is over {MAX_BODY} bytes"),
        },
    }
}

/// The result of a JSON-RPC response body, or its error.
pub(crate) fn rpc_result<T: DeserializeOwned>(
    url: &str,
    method: &'static str,
    body: &[u8],
) -> Result<T, A2aError> {
    let invalid = |reason: String| A2aError::InvalidResponse {
        url: url.to_string(),
        method,
        reason,
    };
    let mut value: Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("not JSON: {e}")))?;
    if let Some(error) = value.get("error") {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        return Err(A2aError::Rpc {
            url: url.to_string(),
            method,
            kind: RpcErrorKind::from_code(code),
            code,
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            data: error.get("data").cloned(),
        });
    }
    let result = value
        .get_mut("result")
        .map(Value::take)
        .ok_or_else(|| invalid("neither result nor error".into()))?;
    serde_json::from_value(result).map_err(|e| invalid(format!("unexpected result: {e}")))
}

/// Why [`read_capped`] stopped.
pub(crate) enum Capped {
    /// The connection failed.
    Http(reqwest::Error),
    /// The body passed the cap.
    TooLarge,
}

/// The whole body of `response`, unless it passes `cap` bytes.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, Capped> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Capped::Http)? {
        if body.len() + chunk.len() > cap {
            return Err(Capped::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
