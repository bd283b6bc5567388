//! The agent card: fetched from its URL (or a base URL's
//! `/.well-known/agent-card.json`), and its A2A 1.0 JSON-RPC interface.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::{A2aClient, A2aOptions};
use crate::error::A2aError;
use crate::rpc::{Capped, read_capped};

/// Where an agent serves its card, below its base URL.
pub const WELL_KNOWN_PATH: &str = ".well-known/agent-card.json";
/// The largest card read (a card is a few KiB).
const MAX_CARD: usize = 1024 * 1024;
/// The binding this client speaks.
pub const JSONRPC_BINDING: &str = "JSONRPC";

/// One way to reach the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// Where to send requests (absolute).
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`.
    #[serde(default)]
    pub protocol_binding: String,
    /// `1.0`, or e.g. `0.3.0` for an older agent.
    #[serde(default)]
    pub protocol_version: String,
    /// Added to every request's params when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// One thing the agent can do, as it advertises it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// Its id.
    #[serde(default)]
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Example requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// An A2A agent card (the fields this client reads; the rest is ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// The agent's name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Its version.
    #[serde(default)]
    pub version: String,
    /// How to reach it; absent on a 0.3 card (which has a top-level `url`).
    #[serde(default)]
    pub supported_interfaces: Vec<AgentInterface>,
    /// What it can do.
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
    /// Its capabilities (streaming, push notifications…), as sent.
    #[serde(default)]
    pub capabilities: Value,
}

impl AgentCard {
    /// The `supportedInterfaces[]` entry with binding `JSONRPC` and protocol
    /// version `1.0`; `card_url` names the card in the error.
    pub fn jsonrpc_interface(&self, card_url: &str) -> Result<&AgentInterface, A2aError> {
        self.supported_interfaces
            .iter()
            .find(|i| {
                i.protocol_binding == JSONRPC_BINDING
                    && i.protocol_version == crate::client::PROTOCOL_VERSION
            })
            .ok_or_else(|| A2aError::NoJsonRpc10 {
                url: card_url.to_string(),
                offered: if self.supported_interfaces.is_empty() {
                    "no supportedInterfaces (an A2A 0.3 card?)".to_string()
                } else {
                    self.supported_interfaces
                        .iter()
                        .map(|i| {
                            format!("{} {} at {}", i.protocol_binding, i.protocol_version, i.url)
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            })
    }
}

/// The card's URL for `url`: itself when it names a `.json` file, else the
/// well-known path below it (a per-agent base such as `…/agents/x` keeps its
/// last segment).
pub fn card_url(url: &str) -> String {
    if url.ends_with(".json") {
        url.to_string()
    } else {
        format!("{}/{WELL_KNOWN_PATH}", url.trim_end_matches('/'))
    }
}

/// An agent found by its card: the card, and a client of its 1.0 JSON-RPC
/// interface.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The card.
    pub card: AgentCard,
    /// Where the card was read.
    pub card_url: String,
    /// A client of its JSON-RPC 1.0 interface.
    pub client: A2aClient,
}

/// Fetches the card at `url` (see [`card_url`]) and opens a client of its
/// A2A 1.0 JSON-RPC interface, with `options` on every request (the card's
/// GET too: an agent may guard its card).
pub async fn discover(url: &str, options: &A2aOptions) -> Result<Discovered, A2aError> {
    let card_url = card_url(url);
    let card = fetch_card(&card_url, options).await?;
    let interface = card.jsonrpc_interface(&card_url)?;
    let streams = card.capabilities.get("streaming") == Some(&Value::Bool(true));
    let client = A2aClient::new(interface.url.clone(), options)?
        .with_tenant(interface.tenant.clone())
        .with_streaming(streams);
    Ok(Discovered {
        card,
        card_url,
        client,
    })
}

/// The card at exactly `card_url`.
pub async fn fetch_card(card_url: &str, options: &A2aOptions) -> Result<AgentCard, A2aError> {
    let (http, headers) = options.http(card_url)?;
    let transport = |e: reqwest::Error| A2aError::Transport {
        url: card_url.to_string(),
        method: "agent card",
        timed_out: e.is_timeout(),
        reason: agentry_tls::error_chain(&e),
    };
    let response = http
        .get(card_url)
        .headers(headers)
        .timeout(options.request_timeout)
        .send()
        .await
        .map_err(transport)?;
    let status = response.status();
    if !status.is_success() {
        return Err(A2aError::CardStatus {
            url: card_url.to_string(),
            status: status.as_u16(),
        });
    }
    let body = read_capped(response, MAX_CARD).await.map_err(|e| match e {
        Capped::Http(e) => transport(e),
        Capped::TooLarge => A2aError::CardNotJson {
            url: card_url.to_string(),
            reason: format!("the body is over {MAX_CARD} bytes"),
        },
    })?;
    parse_card(card_url, &body)
}

/// The card of the agent at `url` (see [`card_url`]) read within `within`,
/// its headers' `${VAR}`s read from the environment (`options.env_vars`).
pub async fn read_card(
    url: &str,
    options: &A2aOptions,
    within: std::time::Duration,
) -> Result<AgentCard, A2aError> {
    let mut options = options.expanded(url, |var| std::env::var(var).ok())?;
    options.request_timeout = options.request_timeout.min(within);
    fetch_card(&card_url(url), &options).await
}

/// Reads the cards of several agents at once ([`read_card`] each; an
/// agent is `(name, url, options, within)`), in their order: `None` for a
/// card that could not be read, logged with why.
pub async fn read_cards(
    agents: Vec<(String, String, A2aOptions, std::time::Duration)>,
) -> Vec<Option<AgentCard>> {
    let reading: Vec<_> = agents
        .into_iter()
        .map(|(name, url, options, within)| {
            tokio::spawn(async move {
                let read = read_card(&url, &options, within).await;
                if let Err(e) = &read {
                    tracing::warn!(agent = %name, error = %e, "the A2A agent's card could not be read; its tool's description does not show its skills");
                }
                read.ok()
            })
        })
        .collect();
    let mut cards = Vec::with_capacity(reading.len());
    for read in reading {
        cards.push(read.await.ok().flatten());
    }
    cards
}

/// `body` as an agent card; `card_url` names it in the error.
pub fn parse_card(card_url: &str, body: &[u8]) -> Result<AgentCard, A2aError> {
    serde_json::from_slice(body).map_err(|e| A2aError::CardNotJson {
        url: card_url.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_url_of_a_base_or_a_card() {
        assert_eq!(
            card_url("http://h:1"),
            "http://h:1/.well-known/agent-card.json"
        );
        assert_eq!(
            card_url("http://h:1/agents/x/"),
            "http://h:1/agents/x/.well-known/agent-card.json"
        );
        assert_eq!(card_url("http://h:1/c.json"), "http://h:1/c.json");
    }

    #[test]
    fn the_jsonrpc_1_0_interface_is_picked_and_its_absence_named() {
        let card = parse_card(
            "u",
            br#"{"name":"e","supportedInterfaces":[
                {"url":"http://a/","protocolBinding":"GRPC","protocolVersion":"1.0"},
                {"url":"http://b/","protocolBinding":"JSONRPC","protocolVersion":"0.3.0"},
                {"url":"http://c/","protocolBinding":"JSONRPC","protocolVersion":"1.0"}]}"#,
        )
        .unwrap();
        assert_eq!(card.jsonrpc_interface("u").unwrap().url, "http://c/");
        let old = parse_card(
            "u",
            br#"{"name":"e","url":"http://b/","preferredTransport":"JSONRPC","protocolVersion":"0.3.0"}"#,
        )
        .unwrap();
        let err = old.jsonrpc_interface("u").unwrap_err();
        assert!(matches!(err, A2aError::NoJsonRpc10 { .. }), "{err}");
        assert!(err.to_string().contains("0.3"), "{err}");
        let err = parse_card("u", b"<html>").unwrap_err();
        assert!(matches!(err, A2aError::CardNotJson { .. }), "{err}");
    }
}
