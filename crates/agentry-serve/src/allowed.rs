//! Who besides the bound address may call the service: the `--allow-host` and
//! `--allow-origin` values, parsed (the guard compares requests against them).

use std::str::FromStr;

use axum::http::uri::Authority;

/// A host name the service answers to besides its bound address: `NAME` (any
/// port) or `NAME:PORT`, from `--allow-host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    name: String,
    port: Option<u16>,
}

/// Why an `--allow-host` or `--allow-origin` value was refused.
pub type AllowError = super::error::ServeError;

impl FromStr for AllowedHost {
    type Err = AllowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refused = || AllowError::AllowHost(s.to_string());
        let authority: Authority = s.parse().map_err(|_| refused())?;
        if authority.as_str().contains('@') || authority.host().is_empty() {
            return Err(refused());
        }
        Ok(AllowedHost {
            name: authority.host().to_ascii_lowercase(),
            port: authority.port_u16(),
        })
    }
}

/// An origin whose pages may call the service, from `--allow-origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigin(String);

impl FromStr for AllowedOrigin {
    type Err = AllowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refused = || AllowError::AllowOrigin(s.to_string());
        let trimmed = s.strip_suffix('/').unwrap_or(s);
        let uri: axum::http::Uri = trimmed.parse().map_err(|_| refused())?;
        let plain = matches!(uri.scheme_str(), Some("http" | "https"))
            && uri.authority().is_some_and(|a| !a.as_str().contains('@'))
            && matches!(uri.path(), "" | "/")
            && uri.query().is_none();
        if !plain {
            return Err(refused());
        }
        // Browsers send origins in lowercase, default ports left out.
        Ok(AllowedOrigin(trimmed.to_ascii_lowercase()))
    }
}

impl AllowedHost {
    /// Whether this names `host` (lowercase) on `port`.
    pub(super) fn admits(&self, host: &str, port: u16) -> bool {
        self.name == host && self.port.is_none_or(|p| p == port)
    }
}

impl AllowedOrigin {
    /// The origin, lowercase, as browsers send it.
    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}
