//! The arguments of the three file tools, as the model sends them.

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `fs.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// Path of the file, relative to the working directory.
    pub path: String,
}

/// Arguments of `fs.write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// Path of the file, relative to the working directory. Missing parent
    /// directories are created.
    pub path: String,
    /// The full new content of the file (UTF-8 text).
    pub content: String,
}

/// Arguments of `fs.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Directory to list, relative to the working directory; defaults to `"."`.
    #[serde(default)]
    pub path: Option<String>,
}
