//! [`A2aClient`]: A2A 1.0's JSON-RPC binding at one interface URL
//! (`SendMessage`, `GetTask`, `CancelTask`), and [`A2aOptions`], what every
//! request carries.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::A2aError;
use crate::rpc::{MAX_BODY, capped_error, read_capped, rpc_result};
use crate::stream::EventStream;
use crate::types::{Message, Part, Role, SendResult, Task};

/// The header every A2A 1.0 request carries; without it a 1.0 agent takes
/// the request for 0.3 and refuses it (-32009).
pub const VERSION_HEADER: &str = "A2A-Version";
/// The protocol version this client speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The longest body kept in an [`A2aError::HttpStatus`].
const BODY_KEPT: usize = 512;

/// How requests to one agent are made.
#[derive(Debug, Clone)]
pub struct A2aOptions {
    /// Extra headers on every request, e.g. `Authorization: Bearer …`.
    pub headers: Vec<(String, String)>,
    /// The limit on each HTTP request (not on a whole task).
    pub request_timeout: Duration,
    /// An extra CA file for an `https` agent (besides the OS roots and
    /// `SSL_CERT_FILE`).
    pub ca_cert: Option<PathBuf>,
    /// The header values hold `${VAR}`s, read from the environment when
    /// the agent is first reached ([`A2aOptions::expanded`]).
    pub env_vars: bool,
}

impl Default for A2aOptions {
    fn default() -> Self {
        A2aOptions {
            headers: Vec::new(),
            request_timeout: Duration::from_secs(30),
            ca_cert: None,
            env_vars: false,
        }
    }
}

impl A2aOptions {
    /// Adds `Authorization: Bearer <token>`.
    pub fn bearer(mut self, token: &str) -> Self {
        self.headers
            .push(("Authorization".to_string(), format!("Bearer {token}")));
        self
    }

    /// These options with every header's `${VAR}`s read through `lookup`
    /// (when [`A2aOptions::env_vars`] says they hold some); an unset one is
    /// [`A2aError::MissingHeaderVar`].
    pub fn expanded(
        &self,
        url: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<A2aOptions, A2aError> {
        let mut options = self.clone();
        if !self.env_vars {
            return Ok(options);
        }
        for (name, value) in &mut options.headers {
            *value = agentry_tools::expand_vars(value, &lookup).map_err(|var| {
                A2aError::MissingHeaderVar {
                    url: url.to_string(),
                    name: name.clone(),
                    var,
                }
            })?;
        }
        options.env_vars = false;
        Ok(options)
    }

    /// The HTTP client and the headers for an agent at `url`.
    pub(crate) fn http(&self, url: &str) -> Result<(reqwest::Client, HeaderMap), A2aError> {
        let http = agentry_tls::client(agentry_tls::ClientOptions {
            https: url.starts_with("https://"),
            ca_cert: self.ca_cert.as_deref().map(|path| agentry_tls::CaFile {
                field: "ca_cert",
                path,
            }),
            connect_timeout: Some(self.request_timeout),
        })
        .map_err(|e| A2aError::Setup {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("a2a-version"),
            HeaderValue::from_static(PROTOCOL_VERSION),
        );
        for (name, value) in &self.headers {
            let bad = || A2aError::BadHeader {
                url: url.to_string(),
                name: name.clone(),
            };
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let mut v = HeaderValue::from_str(value).map_err(|_| bad())?;
            // Credentials stay out of reqwest's debug output.
            v.set_sensitive(true);
            headers.insert(n, v);
        }
        Ok((http, headers))
    }
}

/// What to send with [`A2aClient::send_message`].
#[derive(Debug, Clone, Default)]
pub struct SendRequest {
    /// The text of the user message.
    pub text: String,
    /// The task it continues (an INPUT_REQUIRED one), if any.
    pub task_id: Option<String>,
    /// The conversation, if any (a continued task's).
    pub context_id: Option<String>,
    /// Whether the agent answers at once with the task (SUBMITTED or
    /// WORKING) instead of when it ends or is interrupted.
    pub return_immediately: bool,
    /// The message's id; `None`: a fresh UUID.
    pub message_id: Option<String>,
    /// The request's `metadata` (a JSON object), if any.
    pub metadata: Option<Value>,
}

/// A JSON-RPC client of one agent interface.
#[derive(Debug, Clone)]
pub struct A2aClient {
    http: reqwest::Client,
    headers: HeaderMap,
    url: String,
    tenant: Option<String>,
    timeout: Duration,
    streams: bool,
}

impl A2aClient {
    /// A client of the JSON-RPC interface at `url` (a card's
    /// `supportedInterfaces[].url`).
    pub fn new(url: impl Into<String>, options: &A2aOptions) -> Result<Self, A2aError> {
        let url = url.into();
        let (http, headers) = options.http(&url)?;
        Ok(A2aClient {
            http,
            headers,
            url,
            tenant: None,
            timeout: options.request_timeout,
            streams: false,
        })
    }

    /// Whether the agent streams (its card's `capabilities.streaming`):
    /// then a call watches its task over `SendStreamingMessage` and
    /// `SubscribeToTask` instead of polling.
    pub fn with_streaming(mut self, streams: bool) -> Self {
        self.streams = streams;
        self
    }

    /// Whether the agent streams ([`A2aClient::with_streaming`]).
    pub fn streams(&self) -> bool {
        self.streams
    }

    /// Adds `tenant` to every request's params (the interface's `tenant`).
    pub fn with_tenant(mut self, tenant: Option<String>) -> Self {
        self.tenant = tenant;
        self
    }

    /// The interface URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `SendMessage`: a user text message, new or continuing a task.
    pub async fn send_message(&self, request: &SendRequest) -> Result<SendResult, A2aError> {
        self.call("SendMessage", send_params(request)).await
    }

    /// `SendStreamingMessage`: as [`A2aClient::send_message`], the task's
    /// events as they come (the task first, then its updates, until it ends
    /// or is interrupted).
    pub async fn send_streaming(&self, request: &SendRequest) -> Result<EventStream, A2aError> {
        let method = "SendStreamingMessage";
        let response = self.post(method, send_params(request), None).await?;
        Ok(EventStream::new(response, self.url.clone(), method))
    }

    /// `SubscribeToTask`: a running task's events from now on. A task that
    /// ended already is refused (`UnsupportedOperation`).
    pub async fn subscribe(&self, id: &str) -> Result<EventStream, A2aError> {
        let method = "SubscribeToTask";
        let response = self.post(method, json!({"id": id}), None).await?;
        Ok(EventStream::new(response, self.url.clone(), method))
    }
}

/// `SendMessage`'s params for `request`.
fn send_params(request: &SendRequest) -> Value {
    let message = Message {
        message_id: request
            .message_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        context_id: request.context_id.clone(),
        task_id: request.task_id.clone(),
        role: Role::User,
        parts: vec![Part::text(request.text.clone())],
    };
    let mut params = json!({
        "message": message,
        "configuration": {"returnImmediately": request.return_immediately},
    });
    if let Some(metadata) = &request.metadata {
        params["metadata"] = metadata.clone();
    }
    params
}

impl A2aClient {
    /// `GetTask`.
    pub async fn get_task(&self, id: &str) -> Result<Task, A2aError> {
        self.call("GetTask", json!({"id": id})).await
    }

    /// `CancelTask`: the task as the agent has it after the cancel.
    pub async fn cancel_task(&self, id: &str) -> Result<Task, A2aError> {
        self.call("CancelTask", json!({"id": id})).await
    }

    /// One JSON-RPC call; the result parsed as `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<T, A2aError> {
        let response = self.post(method, params, Some(self.timeout)).await?;
        let bytes = read_capped(response, MAX_BODY)
            .await
            .map_err(|e| capped_error(e, &self.url, method))?;
        rpc_result(&self.url, method, &bytes)
    }

    /// Posts one JSON-RPC request (limited to `timeout` in all, when
    /// given: a stream is limited by its reader); a non-2xx answer is
    /// [`A2aError::HttpStatus`].
    async fn post(
        &self,
        method: &'static str,
        mut params: Value,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, A2aError> {
        if let (Some(tenant), Some(map)) = (&self.tenant, params.as_object_mut()) {
            map.insert("tenant".into(), Value::String(tenant.clone()));
        }
        let body = json!({
            "jsonrpc": "2.0",
            "id": uuid::Uuid::now_v7().to_string(),
            "method": method,
            "params": params,
        });
        let transport = |e: reqwest::Error| A2aError::Transport {
            url: self.url.clone(),
            method,
            timed_out: e.is_timeout(),
            reason: agentry_tls::error_chain(&e),
        };
        let mut post = self
            .http
            .post(&self.url)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json");
        if let Some(timeout) = timeout {
            post = post.timeout(timeout);
        }
        let send = post.json(&body).send();
        // Until the answer's head, also for a stream.
        let response = match tokio::time::timeout(self.timeout, send).await {
            Ok(sent) => sent.map_err(transport)?,
            Err(_) => {
                return Err(A2aError::Transport {
                    url: self.url.clone(),
                    method,
                    timed_out: true,
                    reason: format!("no answer within {} ms", self.timeout.as_millis()),
                });
            }
        };
        let status = response.status();
        if !status.is_success() {
            let bytes = read_capped(response, MAX_BODY)
                .await
                .map_err(|e| capped_error(e, &self.url, method))?;
            let text = String::from_utf8_lossy(&bytes);
            return Err(A2aError::HttpStatus {
                url: self.url.clone(),
                method,
                status: status.as_u16(),
                body: text.chars().take(BODY_KEPT).collect(),
            });
        }
        Ok(response)
    }
}
