//! The one error of this crate: a script that cannot be read or does not parse.

use std::path::PathBuf;

/// Why a script was refused. Each message names the file (when there is one)
/// and the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The script text or value is not a valid script (from [`Script::parse`] and
    /// [`Script::from_value`], which have no file to name).
    ///
    /// [`Script::parse`]: crate::Script::parse
    /// [`Script::from_value`]: crate::Script::from_value
    #[error("{message}")]
    Invalid {
        /// What is wrong, naming the field.
        message: String,
    },
    /// The script file could not be read.
    #[error("{path}: cannot read script: {source}", path = path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why: missing, not a regular file, over the script cap.
        #[source]
        source: agentry_files::FileProblem,
    },
    /// The script file does not hold a valid script.
    #[error("{path}: {message}", path = path.display())]
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
}

impl ScriptError {
    /// Shorthand for [`ScriptError::Invalid`].
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ScriptError::Invalid {
            message: message.into(),
        }
    }
}
