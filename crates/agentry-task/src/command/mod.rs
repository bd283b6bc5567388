//! `[[tools.command]]`: command tools a task declares in its task.toml.
//!
//! Each table becomes a [`CommandToolDecl`]: a full
//! [`ToolContract`](agentry_protocol::tool::ToolContract) plus the argv
//! template, stdin field and fixed environment of an
//! [`agentry_tools::proc::CommandTool`]. Everything that could make the tool fail
//! to build or register (a placeholder naming no property, a schema that does
//! not compile, a name taken by a built-in) is checked here, so the error names
//! the field (`tools.command[0].argv[4]: ...`) instead of surfacing at startup.
//!
//! Files, in import order: `fields` (single fields), `declaration` (one table
//! → [`CommandToolDecl`]); this file checks the list and the names across it.

mod declaration;
pub(crate) mod fields;
#[cfg(test)]
mod tests;

use agentry_protocol::tool::wire_name;
use toml::Value;

use crate::values::{FieldError, describe, field_error, section};
use declaration::declaration;

pub use declaration::CommandToolDecl;

/// Parses `tools.command`: an array of tables, in file order.
pub(crate) fn command_tools(value: Value) -> Result<Vec<CommandToolDecl>, FieldError> {
    let Value::Array(items) = value else {
        return Err(field_error!(
            "tools.command: expected an array of tables ([[tools.command]]), found {}",
            describe(&value)
        ));
    };
    let builtins: Vec<String> = agentry_tools::builtins()
        .iter()
        .map(|t| t.contract().name)
        .collect();
    let mut out: Vec<CommandToolDecl> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("tools.command[{i}]");
        let decl = declaration(&at, section(&at, item)?)?;
        name_is_free(&at, &decl.contract.name, &builtins, &out)?;
        out.push(decl);
    }
    Ok(out)
}

/// Refuses a name the registry would: the same as, or the same at the wire as
/// (`a.b` and `a_b`), a built-in or an earlier declaration.
fn name_is_free(
    at: &str,
    name: &str,
    builtins: &[String],
    earlier: &[CommandToolDecl],
) -> Result<(), FieldError> {
    let wire = wire_name(name);
    let same = |other: &str| other == name || wire_name(other) == wire;
    let how = |other: &str| {
        if other == name {
            String::new()
        } else {
            format!(" (both are {wire:?} for a model API)")
        }
    };
    if let Some(b) = builtins.iter().find(|b| same(b)) {
        return Err(field_error!(
            "{at}.name: {name:?} collides with the built-in tool {b:?}{}; choose another name",
            how(b)
        ));
    }
    if let Some((j, other)) = earlier
        .iter()
        .enumerate()
        .find(|(_, d)| same(&d.contract.name))
    {
        let other = &other.contract.name;
        return Err(field_error!(
            "{at}.name: {name:?} collides with tools.command[{j}] ({other:?}){}",
            how(other)
        ));
    }
    Ok(())
}
