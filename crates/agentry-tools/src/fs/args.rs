//! The arguments of the three file tools, as the model sends them.

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `fs.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// Path of the file, relative to the working directory.
    pub path: String,
    /// Read from this byte (default 0). With `offset` or `limit` a part of a
    /// file of any size up to 256 MiB is returned; a cut character at either
    /// end is left out, and `next_offset` says where to go on.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Read at most this many bytes (1 to 1048576; default 1048576).
    #[serde(default)]
    pub limit: Option<u64>,
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
