//! Attribute names.
//!
//! Followed: the OpenTelemetry GenAI semantic conventions (development status)
//! as of semantic-conventions v1.37.0 (`gen_ai.provider.name`, which replaced
//! `gen_ai.system`; `gen_ai.input.messages` / `gen_ai.output.messages`;
//! `gen_ai.usage.cache_read.input_tokens`). Span names: `invoke_agent {agent}`
//! (INTERNAL), `chat {model}` (CLIENT), `execute_tool {tool}` (INTERNAL).
//! agentry's own facts are under `agentry.*`.
//!
//! `tracing`'s field macros take these names as literal tokens, so the call
//! sites spell them out; these constants are for the attributes set through
//! OpenTelemetry directly (arrays) and for tests.

/// `gen_ai.operation.name`: `invoke_agent`, `chat` or `execute_tool`.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// The run id.
pub const AGENT_ID: &str = "gen_ai.agent.id";
/// The task id.
pub const AGENT_NAME: &str = "gen_ai.agent.name";
/// The run tree's root run id.
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `openai`, `anthropic`, or `agentry` for a scripted/in-process policy.
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The model asked for.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// Whether the model request streamed.
pub const REQUEST_STREAM: &str = "gen_ai.request.stream";
/// The request's output token cap.
pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// The response's id.
pub const RESPONSE_ID: &str = "gen_ai.response.id";
/// The model that answered.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Why the model stopped (an array of strings).
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Prompt tokens.
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Completion tokens.
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Prompt tokens served from the provider's cache.
pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// The tool's name.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// The call's id.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function` (agentry's tools all are).
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// Tool arguments (opt-in content, redacted).
pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// Tool result (opt-in content, redacted).
pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// Messages sent to the model (opt-in content, redacted).
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// Messages the model answered (opt-in content, redacted).
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// The error's class: a stop reason, an error code, a failure kind.
pub const ERROR_TYPE: &str = "error.type";
/// Why the run stopped.
pub const STOP_REASON: &str = "agentry.stop_reason";
/// A tool call's outcome: `ok` or `error`.
pub const OUTCOME: &str = "agentry.outcome";
/// The number of the call's last attempt (from 1).
pub const ATTEMPT: &str = "agentry.attempt";
