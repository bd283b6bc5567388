//! Who a request acts for: bearer tokens and the tenants they stand for.
//!
//! The tokens file holds one `TENANT SHA256-HEX` per line (`#` comments and
//! blank lines allowed): the SHA-256 digest of each tenant's token, so the
//! file holds no usable secret. `AGENTRY_TOKEN` gives one more token, for the
//! tenant `default`. A presented token is hashed and compared with every
//! digest in constant time (all of them, whichever matches), so neither the
//! position of a difference nor which tenant matched shows in the time taken.
//! Tokens are never printed: not in errors, logs or `Debug`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::error::ServeError;

/// The tenant `AGENTRY_TOKEN` stands for.
pub const DEFAULT_TENANT: &str = "default";

/// Longest token taken from a request, in bytes: beyond it the request is
/// refused before hashing.
const MAX_TOKEN_BYTES: usize = 4096;

/// Who a request acts for: a tenant, or anyone (a service without tokens,
/// `--no-auth`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tenant(Option<Arc<str>>);

impl Tenant {
    /// The tenant named `name`.
    pub fn named(name: &str) -> Tenant {
        Tenant(Some(Arc::from(name)))
    }

    /// Anyone: the caller of a service without tokens.
    pub fn anyone() -> Tenant {
        Tenant(None)
    }

    /// The tenant's name; `None` without tokens.
    pub fn name(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

/// One tenant's token digest.
struct Entry {
    tenant: Tenant,
    digest: [u8; 32],
}

/// The tokens a service takes, by digest.
#[derive(Default, Clone)]
pub struct Tokens {
    entries: Arc<Vec<Entry>>,
}

impl fmt::Debug for Tokens {
    // Digests are no secret, but a log needs only the tenants.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| e.tenant.name().unwrap_or("")))
            .finish()
    }
}

impl Tokens {
    /// Reads a tokens file (see the module docs).
    pub fn load(path: &Path) -> Result<Tokens, ServeError> {
        let text = std::fs::read_to_string(path).map_err(|e| ServeError::Tokens {
            path: path.to_path_buf(),
            line: 0,
            message: e.to_string(),
        })?;
        Tokens::parse(&text).map_err(|bad| ServeError::Tokens {
            path: path.to_path_buf(),
            line: bad.line,
            message: bad.message,
        })
    }

    /// A tokens file's text.
    fn parse(text: &str) -> Result<Tokens, BadLine> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(tenant), Some(hex_digest), None) = (words.next(), words.next(), words.next())
            else {
                return Err(BadLine::new(i, "expected `TENANT SHA256-HEX`"));
            };
            if !valid_tenant(tenant) {
                return Err(BadLine::new(
                    i,
                    format!("tenant {tenant:?}: expected letters, digits, '-', '_' or '.'"),
                ));
            }
            let mut digest = [0u8; 32];
            hex::decode_to_slice(hex_digest, &mut digest).map_err(|_| {
                BadLine::new(
                    i,
                    "expected the token's SHA-256 digest as 64 hex digits (sha256sum of the token), not the token",
                )
            })?;
            entries.push(Entry {
                tenant: Tenant::named(tenant),
                digest,
            });
        }
        Ok(Tokens {
            entries: Arc::new(entries),
        })
    }

    /// `token` for the tenant `default` (`AGENTRY_TOKEN`), besides these.
    pub fn with_token(self, tenant: &str, token: &str) -> Result<Tokens, ServeError> {
        if token.trim().is_empty() {
            return Err(ServeError::TokenEnv("empty"));
        }
        if token.len() > MAX_TOKEN_BYTES {
            return Err(ServeError::TokenEnv("longer than 4096 bytes"));
        }
        let mut entries: Vec<Entry> = self
            .entries
            .iter()
            .map(|e| Entry {
                tenant: e.tenant.clone(),
                digest: e.digest,
            })
            .collect();
        entries.push(Entry {
            tenant: Tenant::named(tenant),
            digest: Sha256::digest(token.as_bytes()).into(),
        });
        Ok(Tokens {
            entries: Arc::new(entries),
        })
    }

    /// The tenants the tokens stand for, each once.
    pub fn tenant_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .entries
            .iter()
            .filter_map(|e| e.tenant.name().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tenant `token` stands for, if any. Every digest is compared, in
    /// constant time, whichever matches.
    pub fn tenant_of(&self, token: &[u8]) -> Option<Tenant> {
        if token.len() > MAX_TOKEN_BYTES {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, entry) in self.entries.iter().enumerate() {
            let matches = entry.digest.ct_eq(&digest);
            index.conditional_assign(&(i as u64), matches & !found);
            found |= matches;
        }
        bool::from(found)
            .then(|| self.entries.get(usize::try_from(index).ok()?))
            .flatten()
            .map(|e| e.tenant.clone())
    }
}

/// A tokens file line that does not parse.
#[derive(Debug)]
struct BadLine {
    /// 1-based.
    line: usize,
    message: String,
}

impl BadLine {
    /// The line at 0-based `index`.
    fn new(index: usize, message: impl Into<String>) -> BadLine {
        BadLine {
            line: index + 1,
            message: message.into(),
        }
    }
}

fn valid_tenant(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn digest(token: &str) -> String {
        hex::encode(Sha256::digest(token.as_bytes()))
    }

    #[test]
    fn a_token_stands_for_the_tenant_whose_digest_it_has() {
        let text = format!(
            "# tenants\nacme {}\n\nglobex {}\n",
            digest("acme-secret"),
            digest("globex-secret")
        );
        let tokens = Tokens::parse(&text)
            .unwrap()
            .with_token(DEFAULT_TENANT, "env-secret")
            .unwrap();
        assert_eq!(
            tokens.tenant_of(b"acme-secret"),
            Some(Tenant::named("acme"))
        );
        assert_eq!(
            tokens.tenant_of(b"globex-secret"),
            Some(Tenant::named("globex"))
        );
        assert_eq!(
            tokens.tenant_of(b"env-secret"),
            Some(Tenant::named("default"))
        );
        assert_eq!(tokens.tenant_of(b"acme-secreT"), None);
        assert_eq!(tokens.tenant_of(b""), None);
        // The Debug form names tenants only.
        let shown = format!("{tokens:?}");
        assert!(!shown.contains(&digest("acme-secret")), "{shown}");
    }

    #[test]
    fn a_line_that_is_not_a_tenant_and_a_digest_is_refused_by_number() {
        let e = Tokens::parse(&format!("acme {}\nglobex plain-token\n", digest("a")))
            .err()
            .unwrap();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("SHA-256"), "{}", e.message);
        assert_eq!(Tokens::parse("acme\n").err().unwrap().line, 1);
        assert_eq!(
            Tokens::parse(&format!("a/b {}\n", digest("a")))
                .err()
                .unwrap()
                .line,
            1
        );
    }
}
