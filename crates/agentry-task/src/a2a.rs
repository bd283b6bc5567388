//! `[[tools.a2a]]`: remote A2A 1.0 agents a task offers as tools, each table
//! → an [`A2aAgentConfig`] and, for a run, the tool `<name>.ask`
//! ([`agentry_a2a::A2aTool`]). Loading reads no card: what can be checked
//! without the agent is checked here, so the error names the field
//! (`tools.a2a[0].url: ...`). A run's start reads the cards
//! ([`read_cards`], within [`CARD_READ_TIMEOUT`]) for the tools'
//! descriptions; the tool reads its card again at its first call to reach
//! the agent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentry_a2a::{A2aOptions, A2aTool, AgentCard, InputRequired, card_description};
use agentry_protocol::tool::Effect;
use serde::Deserialize;
use toml::Value;

use crate::command::fields::{effect, max_retries};
use crate::mcp::{header_table, http_url, server_name};
use crate::values::{FieldError, ca_file, describe, duration, field_error, section};

/// The limit on one call of an A2A agent when `timeout` is not given: from
/// the message sent to the remote task's end.
pub const DEFAULT_A2A_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest a run's start waits for an agent's card (or the agent's
/// `timeout`, if shorter); past it the tool keeps its plain description.
pub const CARD_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One remote A2A agent a task declares.
#[derive(Debug, Clone, PartialEq)]
pub struct A2aAgentConfig {
    /// Its tool is `<name>.ask`; a run grants it by `<name>.ask` or `<name>.*`.
    pub name: String,
    /// Its agent card, or a base URL whose `/.well-known/agent-card.json` is.
    pub url: String,
    /// Headers on every request; `${VAR}` in a value is read as a run starts.
    pub headers: BTreeMap<String, String>,
    /// An extra CA for an `https` agent (in the task directory).
    pub ca_cert: Option<PathBuf>,
    /// The limit on one call.
    pub timeout: Duration,
    /// What the model is told the agent does (its card says more).
    pub description: Option<String>,
    /// The calls' effect: `irreversible_external` unless the task says
    /// otherwise, so a call waits for a human's approval by default.
    pub effect: Effect,
    /// Who answers the agent's questions (INPUT_REQUIRED): the model
    /// (`"model"`, the default) or a human through the approval path
    /// (`"human"`).
    pub input_required: InputRequired,
    /// How many times a retryable failure of a call is retried (when its
    /// effect allows retries at all); 0 unless the task says otherwise, as
    /// each retry is a new remote task.
    pub max_retries: u32,
    /// The agent's card as read at a run's start ([`read_cards`]); its
    /// description and skills go into the tool's description. `None` until
    /// read, or when it could not be.
    pub card: Option<AgentCard>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: Option<Value>,
    url: Option<Value>,
    headers: Option<Value>,
    ca_cert: Option<Value>,
    timeout: Option<Value>,
    description: Option<Value>,
    effect: Option<Value>,
    input_required: Option<Value>,
    max_retries: Option<Value>,
}

/// Parses `tools.a2a`: an array of tables, in file order, names unique.
pub(crate) fn a2a_agents(value: Value, dir: &Path) -> Result<Vec<A2aAgentConfig>, FieldError> {
    let Value::Array(items) = value else {
        return Err(field_error!(
            "tools.a2a: expected an array of tables ([[tools.a2a]]), found {}",
            describe(&value)
        ));
    };
    let mut out: Vec<A2aAgentConfig> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("tools.a2a[{i}]");
        let agent = agent(&at, section(&at, item)?, dir)?;
        if let Some(j) = out.iter().position(|a| a.name == agent.name) {
            return Err(field_error!(
                "{at}.name: {:?} is also the name of tools.a2a[{j}]; each agent needs its own",
                agent.name
            ));
        }
        out.push(agent);
    }
    Ok(out)
}

/// One table; `at` names it (`tools.a2a[0]`).
fn agent(at: &str, raw: RawAgent, dir: &Path) -> Result<A2aAgentConfig, FieldError> {
    let name = match raw.name {
        None => return Err(field_error!("{at}.name: missing; its tool is <name>.ask")),
        Some(v) => server_name(&format!("{at}.name"), &v)?,
    };
    let url = match raw.url {
        None => {
            return Err(field_error!(
                "{at}.url: missing; the agent's card, or the base URL it is under"
            ));
        }
        Some(v) => http_url(&format!("{at}.url"), &v)?,
    };
    let description = match raw.description {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s),
        Some(v) => {
            return Err(field_error!(
                "{at}.description: expected a non-empty string, found {}",
                describe(&v)
            ));
        }
    };
    Ok(A2aAgentConfig {
        name,
        url,
        headers: raw
            .headers
            .map(|v| header_table(&format!("{at}.headers"), v))
            .transpose()?
            .unwrap_or_default(),
        ca_cert: raw
            .ca_cert
            .map(|v| ca_file(&format!("{at}.ca_cert"), &v, dir))
            .transpose()?,
        timeout: raw
            .timeout
            .map(|v| duration(&format!("{at}.timeout"), &v))
            .transpose()?
            .unwrap_or(DEFAULT_A2A_TIMEOUT),
        description,
        effect: raw
            .effect
            .map(|v| effect(&format!("{at}.effect"), &v))
            .transpose()?
            .unwrap_or(Effect::IrreversibleExternal),
        max_retries: raw
            .max_retries
            .map(|v| max_retries(&format!("{at}.max_retries"), &v))
            .transpose()?
            .unwrap_or(0),
        card: None,
        input_required: match raw.input_required {
            None => InputRequired::Model,
            Some(Value::String(s)) if s == "model" => InputRequired::Model,
            Some(Value::String(s)) if s == "human" => InputRequired::Human,
            Some(v) => {
                return Err(field_error!(
                    "{at}.input_required: expected \"model\" or \"human\", found {}",
                    describe(&v)
                ));
            }
        },
    })
}

impl A2aAgentConfig {
    /// The tool `<name>.ask`. Its headers' `${VAR}`s are read from the
    /// environment with its card, at its first call: an unset one fails
    /// that call (`EINVAL`, naming header and variable), not the run. Its
    /// description is the task's `description`, with the card's description
    /// and skills once [`read_cards`] has read it.
    pub fn tool(&self) -> A2aTool {
        let description = match &self.card {
            Some(card) => card_description(&self.name, self.description.as_deref(), card),
            None => self.description.clone().unwrap_or_else(|| {
                format!(
                    "Ask the remote A2A agent {:?} (its card: {}). If it asks for input, answer with another call carrying its task_id.",
                    self.name, self.url
                )
            }),
        };
        A2aTool::declared(
            self.name.clone(),
            description,
            self.url.clone(),
            self.options(),
        )
        .effect(self.effect)
        .timeout(self.timeout)
        .input_required(self.input_required)
        .max_retries(self.max_retries)
    }

    /// How the agent is reached: its headers (`${VAR}`s read when used)
    /// and CA.
    fn options(&self) -> A2aOptions {
        A2aOptions {
            headers: self
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            ca_cert: self.ca_cert.clone(),
            env_vars: true,
            ..A2aOptions::default()
        }
    }
}

/// Reads each agent's card at once, each within [`CARD_READ_TIMEOUT`] (or
/// its `timeout`, if shorter), into [`A2aAgentConfig::card`]. A card that
/// cannot be read (the agent down, a header's variable unset) is logged and
/// its tool keeps the plain description; its calls read the card again.
pub async fn read_cards(agents: &mut [A2aAgentConfig]) {
    let asked = agents
        .iter()
        .map(|a| {
            let within = a.timeout.min(CARD_READ_TIMEOUT);
            (a.name.clone(), a.url.clone(), a.options(), within)
        })
        .collect();
    let cards = agentry_a2a::read_cards(asked).await;
    for (agent, card) in agents.iter_mut().zip(cards) {
        agent.card = card;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<A2aAgentConfig>, String> {
        let value: Value = toml::from_str::<toml::Table>(text)
            .map(|t| t.get("a2a").cloned().unwrap_or(Value::Array(Vec::new())))
            .unwrap();
        a2a_agents(value, Path::new("/tasks/t")).map_err(|e| e.to_string())
    }

    #[test]
    fn an_agent_is_read_with_its_defaults() {
        let agents = parse(
            "[[a2a]]\nname = \"billing\"\nurl = \"https://billing.example/agent-card.json\"\n\
             headers = { Authorization = \"Bearer ${BILLING_TOKEN}\" }\n",
        )
        .unwrap();
        assert_eq!(agents.len(), 1);
        let a = &agents[0];
        assert_eq!(a.name, "billing");
        assert_eq!(a.effect, Effect::IrreversibleExternal);
        assert_eq!(a.timeout, DEFAULT_A2A_TIMEOUT);
        assert_eq!(a.input_required, InputRequired::Model);
        assert_eq!(a.max_retries, 0, "each retry would be a new remote task");
        assert_eq!(a.tool().tool_name(), "billing.ask");
        use agentry_tools::Tool;
        assert_eq!(a.tool().contract().max_retries, 0);
        assert_eq!(
            a.headers["Authorization"], "Bearer ${BILLING_TOKEN}",
            "read from the environment at the first call, not at load"
        );
    }

    #[test]
    fn max_retries_and_a_read_card_reach_the_tools_contract() {
        use agentry_tools::Tool;
        let mut agents = parse(
            "[[a2a]]\nname = \"billing\"\nurl = \"http://x/\"\nmax_retries = 2\n\
             description = \"Bills.\"\n",
        )
        .unwrap();
        assert_eq!(agents[0].tool().contract().max_retries, 2);
        assert_eq!(agents[0].tool().contract().description, "Bills.");
        agents[0].card = Some(
            agentry_a2a::parse_card(
                "u",
                br#"{"name":"b","description":"Handles billing.","skills":[
                    {"id":"inv","name":"invoices","description":"lists invoices","examples":["invoices of ACME"]},
                    {"id":"ref","name":"refunds","description":"refunds a payment"}]}"#,
            )
            .unwrap(),
        );
        let described = agents[0].tool().contract().description;
        assert_eq!(
            described,
            "Bills. Its card: Handles billing. Skills: invoices (lists invoices; e.g. \"invoices of ACME\"); \
             refunds (refunds a payment). If it asks for input, answer with another call carrying its task_id."
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (
                "[[a2a]]\nurl = \"http://x/\"\n",
                "tools.a2a[0].name: missing",
            ),
            ("[[a2a]]\nname = \"b\"\n", "tools.a2a[0].url: missing"),
            (
                "[[a2a]]\nname = \"b\"\nurl = \"ftp://x\"\n",
                "tools.a2a[0].url: expected an http:// or https:// URL",
            ),
            (
                "[[a2a]]\nname = \"b.c\"\nurl = \"http://x/\"\n",
                "tools.a2a[0].name",
            ),
            (
                "[[a2a]]\nname = \"b\"\nurl = \"http://x/\"\neffect = \"maybe\"\n",
                "tools.a2a[0].effect",
            ),
            (
                "[[a2a]]\nname = \"b\"\nurl = \"http://x/\"\n[[a2a]]\nname = \"b\"\nurl = \"http://y/\"\n",
                "tools.a2a[1].name: \"b\" is also the name of tools.a2a[0]",
            ),
            (
                "[[a2a]]\nname = \"b\"\nurl = \"http://x/\"\nskills = 1\n",
                "unknown field",
            ),
            (
                "[[a2a]]\nname = \"b\"\nurl = \"http://x/\"\ninput_required = \"agent\"\n",
                "tools.a2a[0].input_required: expected \"model\" or \"human\"",
            ),
            (
                "[[a2a]]\nname = \"b\"\nurl = \"http://x/\"\nmax_retries = -1\n",
                "tools.a2a[0].max_retries: expected a non-negative integer, found -1",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
