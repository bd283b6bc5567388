//! Who may call `agentry mcp --http`: whoever holds its bearer token.
//! Loopback is not a boundary between the users of one machine, and the tools
//! run tasks (and their commands) as the user who started the server.
//!
//! The token comes from `--token-file` or `$AGENTRY_TOKEN`; without one the
//! server does not start unless `--no-auth` says every local user is trusted.
//! [`require_token`] sits in front of rmcp's service: a request without the
//! token is answered 401 from its headers alone, before its body is read or
//! parsed. The comparison takes the same time wherever the bytes differ.
//! The token is never printed: not in errors, logs or `Debug`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry_files::{FileKind, FileProblem};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::args::McpArgs;

/// The environment variable a token may come from (after `--token-file`).
pub(crate) const TOKEN_ENV: &str = "AGENTRY_TOKEN";

/// Why the server has no usable token.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// Neither `--token-file`, `$AGENTRY_TOKEN` nor `--no-auth`.
    #[error(
        "--http needs a bearer token: give --token-file PATH or set AGENTRY_TOKEN (clients send `Authorization: Bearer TOKEN`), or --no-auth where every local user of this machine is trusted"
    )]
    Missing,
    /// The token file cannot be used.
    #[error("--token-file {}: {why}", .path.display())]
    File {
        /// As given.
        path: PathBuf,
        /// Why not.
        why: TokenFileProblem,
    },
    /// `$AGENTRY_TOKEN` is set but unusable.
    #[error("{TOKEN_ENV}: {0}")]
    Env(&'static str),
}

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TokenFileProblem {
    /// Not readable as a token file (missing, not regular, too large, not text).
    #[error(transparent)]
    File(#[from] FileProblem),
    /// Other users may read or write it.
    #[error("readable or writable by other users; make it the owner's only (chmod 600)")]
    Shared,
    /// What it holds is not a token.
    #[error("{0}")]
    NotAToken(&'static str),
}

/// The bearer token clients must send. Its `Debug` does not show it.
#[derive(Clone)]
pub(crate) struct Token(Arc<[u8]>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The token `--http` requires, or `None` under `--no-auth`.
    pub(crate) fn for_http(args: &McpArgs) -> Result<Option<Token>, AuthError> {
        if args.no_auth {
            return Ok(None);
        }
        if let Some(path) = &args.token_file {
            let text = read_token_file(path).map_err(|why| AuthError::File {
                path: path.clone(),
                why,
            })?;
            return Token::parse(&text)
                .map(Some)
                .map_err(|why| AuthError::File {
                    path: path.clone(),
                    why: TokenFileProblem::NotAToken(why),
                });
        }
        match std::env::var_os(TOKEN_ENV) {
            Some(value) => {
                let text = value
                    .into_string()
                    .map_err(|_| AuthError::Env("not valid UTF-8"))?;
                Token::parse(&text).map(Some).map_err(AuthError::Env)
            }
            None => Err(AuthError::Missing),
        }
    }

    /// One trailing newline (`\n` or `\r\n`) is dropped, as `echo` writes
    /// it; what is left must be a non-empty header-safe word.
    fn parse(text: &str) -> Result<Token, &'static str> {
        let token = text
            .strip_suffix("\r\n")
            .or_else(|| text.strip_suffix('\n'))
            .unwrap_or(text);
        if token.is_empty() {
            return Err("the token is empty");
        }
        // What a client can send after `Bearer ` (RFC 6750's b64token is
        // narrower; any visible ASCII is accepted).
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token must be one line of visible ASCII, without spaces");
        }
        Ok(Token(token.as_bytes().into()))
    }

    /// Whether `Authorization` carries this token. Constant time over the
    /// token's bytes (a different length is refused at once: the length is
    /// not the secret).
    fn accepts(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(given) = authorization.and_then(|v| bearer(v.as_bytes())) else {
            return false;
        };
        bool::from(given.ct_eq(&self.0))
    }
}

/// The credentials of `Bearer CREDENTIALS` (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

/// The token file: a regular file (a FIFO or a device is refused, and its
/// open never blocks: `agentry_files`), readable by its owner only, at most
/// [`FileKind::TOKEN_FILE`]'s cap.
fn read_token_file(path: &Path) -> Result<String, TokenFileProblem> {
    let kind = FileKind::TOKEN_FILE;
    let (file, len) = agentry_files::open_regular(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = file.metadata().map_err(FileProblem::Read)?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(TokenFileProblem::Shared);
        }
    }
    let too_large = |bytes| FileProblem::TooLarge {
        kind: kind.name(),
        bytes,
        cap: kind.cap(),
    };
    if len > kind.cap() {
        return Err(too_large(len).into());
    }
    let mut bytes = Vec::new();
    file.take(kind.cap() + 1)
        .read_to_end(&mut bytes)
        .map_err(FileProblem::Read)?;
    if bytes.len() as u64 > kind.cap() {
        return Err(too_large(bytes.len() as u64).into());
    }
    String::from_utf8(bytes).map_err(|e| FileProblem::NotUtf8(e.utf8_error()).into())
}

/// Axum middleware: 401 with `WWW-Authenticate: Bearer` unless the request
/// carries the token. Only the headers are looked at; the body is untouched.
pub(crate) async fn require_token(
    State(token): State<Token>,
    request: Request,
    next: Next,
) -> Response {
    let authorization = request.headers().get(header::AUTHORIZATION);
    if token.accepts(authorization) {
        return next.run(request).await;
    }
    // RFC 6750 §3: no credentials get the bare challenge, wrong ones
    // `invalid_token`.
    let challenge = if authorization.is_some() {
        r#"Bearer realm="agentry mcp", error="invalid_token""#
    } else {
        r#"Bearer realm="agentry mcp""#
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        "a bearer token is required: Authorization: Bearer TOKEN (the server's --token-file or AGENTRY_TOKEN)\n",
    )
        .into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_token_drops_one_trailing_newline_and_refuses_empty_or_spaced_ones() {
        assert_eq!(&*Token::parse("s3cret\n").unwrap().0, b"s3cret");
        assert_eq!(&*Token::parse("s3cret\r\n").unwrap().0, b"s3cret");
        assert_eq!(Token::parse("").unwrap_err(), "the token is empty");
        assert_eq!(Token::parse("\n").unwrap_err(), "the token is empty");
        assert!(Token::parse("two words").is_err());
        assert!(Token::parse("a\n\n").is_err());
        assert_eq!(
            format!("{:?}", Token::parse("s3cret").unwrap()),
            "Token(..)"
        );
    }

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        let token = Token::parse("s3cret").unwrap();
        let accepts = |v: &str| token.accepts(Some(&HeaderValue::from_str(v).unwrap()));
        assert!(accepts("Bearer s3cret"));
        assert!(accepts("bearer s3cret"));
        assert!(!accepts("Bearer s3cre"));
        assert!(!accepts("Bearer s3cret2"));
        assert!(!accepts("Basic s3cret"));
        assert!(!accepts("Bearer"));
        assert!(!accepts("s3cret"));
        assert!(!token.accepts(None));
    }
}
