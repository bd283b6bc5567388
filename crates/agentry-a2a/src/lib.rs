//! Remote A2A 1.0 agents as agentry tools.
//!
//! An agent is found by its card ([`discover`]: the card's own URL, or a
//! base URL and `/.well-known/agent-card.json`), reached through the card's
//! `supportedInterfaces[]` entry with binding `JSONRPC` and protocol version
//! `1.0` ([`A2aClient`]), and offered to a model as one tool, `<name>.ask`
//! ([`A2aTool`]), an [`agentry_tools::Tool`] registered like any other,
//! whose description is made from the card ([`card_description`]: its
//! description and skills; [`read_cards`] reads several cards at once, each
//! within a limit).
//!
//! # Layout
//! - `types.rs`: the messages in ProtoJSON form ([`Task`], [`Message`],
//!   [`Part`], [`TaskState`]…).
//! - `client.rs`: [`A2aClient`] (`SendMessage`, `GetTask`, `CancelTask`,
//!   `SendStreamingMessage`, `SubscribeToTask`) and
//!   [`A2aOptions`] (extra headers such as `Authorization`, the per-request
//!   timeout, a CA file).
//! - `rpc.rs`: a JSON-RPC answer's body (capped) and its result or error.
//! - `card.rs`: [`AgentCard`], [`discover`], [`fetch_card`].
//! - `stream.rs`: [`EventStream`], the server-sent events of
//!   `SendStreamingMessage` and `SubscribeToTask`.
//! - `tool.rs`: [`A2aTool`].
//! - `describe.rs`: [`card_description`], the tool's description from the
//!   card.
//! - `watch.rs`: how a call follows its task, streamed or polled.
//! - `remote.rs`: what one call holds on its agent (how it reaches it, the
//!   remote task it cancels unless that settled).
//! - `error.rs`: [`A2aError`], the crate's one error; [`RpcErrorKind`].
//!
//! # The wire
//!
//! Every request carries `A2A-Version: 1.0` (without it a 1.0 agent takes
//! the request for 0.3 and answers -32009), `Content-Type:
//! application/json`, and the configured headers. Enums go by their
//! ProtoJSON names (`ROLE_USER`, `TASK_STATE_COMPLETED`); parts have no
//! `kind`; `SendMessage`'s result is `{"task": …}` or `{"message": …}`
//! ([`SendResult`]). A JSON-RPC error is [`A2aError::Rpc`] with its code by
//! name ([`RpcErrorKind`]: -32001 `TaskNotFound`, -32002
//! `TaskNotCancelable`, …); a non-2xx answer is [`A2aError::HttpStatus`]
//! (401 when the agent wants other credentials).
//!
//! # A call of `<name>.ask`
//!
//! `{"message": "…"}` starts a task; `{"message": "…", "task_id": "…"}`
//! answers a task that asked for input (the same task continues, in its
//! context). For an agent whose card says `capabilities.streaming` the tool
//! sends `SendStreamingMessage` and reads the task's events until it
//! settles (each new state and artifact a progress report; a stream that
//! breaks off is polled on; one `GetTask` reads the settled task whole);
//! otherwise it sends `SendMessage` with `configuration.returnImmediately`
//! and polls `GetTask` until the task settles:
//!
//! | remote state                | the call                                                   |
//! |-----------------------------|------------------------------------------------------------|
//! | `TASK_STATE_COMPLETED`      | result: `text` = the artifacts' text parts, joined; `parts` = the others (data as is, files by URL, bytes by size) |
//! | `TASK_STATE_INPUT_REQUIRED` | result: `input_required: true`, `text` = the question, `next` says how to answer |
//! | `TASK_STATE_AUTH_REQUIRED`  | `EPERM`, naming the state and the agent's message          |
//! | `TASK_STATE_REJECTED`       | `EPERM`                                                    |
//! | `TASK_STATE_CANCELED`       | `ECANCELED`                                                |
//! | `TASK_STATE_FAILED`         | `EUNAVAIL`, not retryable                                  |
//! | still running at the timeout| `ETIMEDOUT`; the remote task is sent `CancelTask`          |
//!
//! Every result carries `task_id`, `context_id` and `state`, so the trace
//! records the remote task; error messages name it; while the call runs,
//! each state it sees is a progress report (`remote task <id>: <state>`, a
//! `tool_progress` run event). A direct reply (`{"message": …}`, no task) is
//! a result with its `text`. An answer over 16 MiB (a card over 1 MiB) is an
//! error, not read further.
//!
//! A call cancelled by its token (deadline, abort) or dropped while its task
//! runs sends `CancelTask` for that task from a task of its own, so the
//! remote agent stops too. A call dropped before `SendMessage` answered
//! cannot know the task id; that task runs on.
//!
//! # A crash of agentry during a call
//!
//! The message's id is `agentry-<operation id>-<call id>-<attempt>`, and
//! its request carries `metadata.agentry`: `deadline_ms` (when the call is
//! cut, Unix ms), `run_remaining_ms`, `run_id`, `call_id`, `operation_id`.
//! Once `SendMessage` returned the task, the tool records it
//! (`ToolContext::remote`, a [`agentry_protocol::RemoteRef`] of kind
//! [`REMOTE_KIND`] on the call's ledger row) before it waits. A call run
//! again after a crash with such a record follows that task (`GetTask`)
//! instead of sending the message again. Once a task is under way, a
//! failed `GetTask` is not retryable: a retry would send again.
//!
//! With [`InputRequired::Human`] a `TASK_STATE_INPUT_REQUIRED` goes to a
//! human inside the call (`ToolContext::human`, the run's approval path):
//! an answer is sent to the same task and the call follows it on; no
//! answer hands the question to the model as above; a refusal is `EPERM`
//! and the task is sent `CancelTask`.
//!
//! The tool's effect is `irreversible_external` unless its constructor says
//! otherwise ([`A2aTool::effect`]): what a remote agent does is outside the
//! run, and a run parks such calls for approval by default. Its
//! `max_retries` is 0 unless set ([`A2aTool::max_retries`]): an executor
//! retry sends the message again, a new remote task.

mod card;
mod client;
mod describe;
mod error;
mod remote;
mod rpc;
mod stream;
mod tool;
mod types;
mod watch;

pub use card::{
    AgentCard, AgentInterface, AgentSkill, Discovered, JSONRPC_BINDING, WELL_KNOWN_PATH, card_url,
    discover, fetch_card, parse_card, read_card, read_cards,
};
pub use client::{A2aClient, A2aOptions, PROTOCOL_VERSION, SendRequest, VERSION_HEADER};
pub use describe::card_description;
pub use error::{A2aError, RpcErrorKind};
pub use stream::{ArtifactUpdate, EventStream, StatusUpdate, StreamEvent};
pub use tool::{A2aTool, InputRequired, REMOTE_KIND};
pub use types::{Artifact, Message, Part, Role, SendResult, Task, TaskState, TaskStatus};
