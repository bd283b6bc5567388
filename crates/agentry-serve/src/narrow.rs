//! A named agent's request may narrow what the operator's task allows —
//! its budget and its grants — and never widen it: a value above the
//! agent's is 400 naming the field (`budget.max_steps`), and so is a tool the
//! agent is not granted (`tools.grant`) or any other tools setting
//! (`tools.command`, `tools.mcp`: a request adds no tools).

use agentry::protocol::budget::BudgetLimits;
use agentry::{Grants, RunConfig};
use serde_json::{Map, Value};

use super::error::ApiError;

/// Narrows `config` (the agent's run) by a request's `budget` and `tools`.
pub fn narrow(
    config: &mut RunConfig,
    budget: Option<&Map<String, Value>>,
    tools: Option<&Map<String, Value>>,
) -> Result<(), ApiError> {
    if let Some(budget) = budget {
        narrow_budget(&mut config.limits, budget)?;
    }
    if let Some(tools) = tools {
        config.grants = narrow_grants(&config.grants, tools)?;
    }
    Ok(())
}

/// Each field is read as task.toml reads `[budget]` (the same names, units
/// and messages), one at a time so that a refusal names its own field.
fn narrow_budget(limits: &mut BudgetLimits, budget: &Map<String, Value>) -> Result<(), ApiError> {
    for (name, value) in budget {
        let field = format!("budget.{name}");
        let one = Map::from_iter([(name.clone(), value.clone())]);
        let asked = agentry::task::budget_from_json(one)
            .map_err(|error| ApiError::bad_field(&field, error.to_string()))?;
        let slots = [
            ("max_steps", asked.max_steps, &mut limits.max_steps),
            (
                "max_tool_calls",
                asked.max_tool_calls,
                &mut limits.max_tool_calls,
            ),
            ("max_tokens", asked.max_tokens, &mut limits.max_tokens),
            (
                "max_cost",
                asked.max_cost_micros,
                &mut limits.max_cost_micros,
            ),
            ("deadline", asked.deadline_ms, &mut limits.deadline_ms),
            ("max_retries", asked.max_retries, &mut limits.max_retries),
            ("max_ticks", asked.max_ticks, &mut limits.max_ticks),
        ];
        for (name, asked, slot) in slots {
            let Some(asked) = asked else { continue };
            match *slot {
                Some(allowed) if asked > allowed => {
                    return Err(ApiError::bad_field(
                        field,
                        format!(
                            "{} is above the agent's {}; a request may only narrow the budget",
                            shown(name, asked),
                            shown(name, allowed)
                        ),
                    ));
                }
                Some(_) | None => *slot = Some(asked),
            }
        }
    }
    Ok(())
}

/// A budget value as a request gives it.
fn shown(name: &str, value: u64) -> String {
    match name {
        "deadline" => {
            humantime::format_duration(std::time::Duration::from_millis(value)).to_string()
        }
        "max_cost" => format!("{}", value as f64 / 1_000_000.0),
        _ => value.to_string(),
    }
}

fn narrow_grants(granted: &Grants, tools: &Map<String, Value>) -> Result<Grants, ApiError> {
    if let Some(other) = tools.keys().find(|k| k.as_str() != "grant") {
        return Err(ApiError::bad_field(
            format!("tools.{other}"),
            "a request adds no tools; it may only narrow the agent's grants with tools.grant",
        ));
    }
    let Some(Value::Array(asked)) = tools.get("grant") else {
        return Err(ApiError::bad_field(
            "tools.grant",
            "expected an array of tool names the agent is granted",
        ));
    };
    let mut names = Vec::with_capacity(asked.len());
    for name in asked {
        let Value::String(name) = name else {
            return Err(ApiError::bad_field(
                "tools.grant",
                format!("expected tool names, found {name}"),
            ));
        };
        if !granted.covers(name) {
            return Err(ApiError::bad_field(
                "tools.grant",
                format!(
                    "{name:?} is not granted to this agent; a request may only narrow its grants"
                ),
            ));
        }
        names.push(name.clone());
    }
    Ok(Grants::new(names))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn agent() -> RunConfig {
        let mut config = RunConfig::new("g", "/nowhere");
        config.limits.max_steps = Some(10);
        config.limits.deadline_ms = Some(60_000);
        config.grants = Grants::new(["fs.read", "fs.write"]);
        config
    }

    fn field(e: &ApiError) -> String {
        e.message()
            .split(':')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn a_request_narrows_the_budget_and_grants_and_never_widens_them() {
        let mut config = agent();
        let budget = json!({"max_steps": 3, "deadline": "5s", "max_tool_calls": 4});
        let tools = json!({"grant": ["fs.read"]});
        narrow(&mut config, budget.as_object(), tools.as_object()).unwrap();
        assert_eq!(config.limits.max_steps, Some(3));
        assert_eq!(config.limits.deadline_ms, Some(5_000));
        assert_eq!(config.limits.max_tool_calls, Some(4));
        assert!(config.grants.covers("fs.read") && !config.grants.covers("fs.write"));

        for (budget, tools, at) in [
            (json!({"max_steps": 11}), json!(null), "budget.max_steps"),
            (json!({"deadline": "2m"}), json!(null), "budget.deadline"),
            (json!({"max_steps": "ten"}), json!(null), "budget.max_steps"),
            (json!({"max_stepz": 1}), json!(null), "budget.max_stepz"),
            (json!({}), json!({"grant": ["proc.exec"]}), "tools.grant"),
            (json!({}), json!({"command": {}}), "tools.command"),
        ] {
            let e = narrow(&mut agent(), budget.as_object(), tools.as_object()).unwrap_err();
            assert_eq!(field(&e), at, "{e:?}");
        }
    }
}
