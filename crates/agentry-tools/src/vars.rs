//! `${VAR}` in a remote tool's configured header values (an MCP server's,
//! an A2A agent's), read from the environment when the tool first reaches
//! its server.

/// `template` with `${VAR}` expanded by `lookup`; `Err(VAR)` for the first
/// unset one. Anything not of that form (a lone `$`, `${` without `}`) is
/// kept as is.
pub fn expand_vars(
    template: &str,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let var = &after[..end];
        out.push_str(&lookup(var).ok_or_else(|| var.to_string())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
