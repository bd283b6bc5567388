//! Standard Webhooks signatures: `v1,` and the base64 of HMAC-SHA256 over
//! `{webhook-id}.{webhook-timestamp}.{body}`, keyed by the secret's bytes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::error::WebhookError;

/// The prefix a Standard Webhooks secret is written with.
const SECRET_PREFIX: &str = "whsec_";

/// A signing secret: `whsec_` and base64 (the prefix is optional, as in the
/// reference implementations).
#[derive(Clone)]
pub struct Secret {
    key: ring::hmac::Key,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// Parses `whsec_<base64>` (or the base64 alone); an empty key or one that
    /// is not base64 is [`WebhookError::Secret`] (its value never shown).
    pub fn parse(text: &str) -> Result<Secret, WebhookError> {
        let encoded = text
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .unwrap_or(text.trim());
        let bytes = STANDARD.decode(encoded).map_err(|_| WebhookError::Secret {
            reason: "not base64 after the optional whsec_ prefix",
        })?;
        if bytes.len() < 16 {
            return Err(WebhookError::Secret {
                reason: "shorter than 16 bytes",
            });
        }
        Ok(Secret {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes),
        })
    }

    /// The `webhook-signature` header's value for one attempt.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut context = ring::hmac::Context::with_key(&self.key);
        context.update(id.as_bytes());
        context.update(b".");
        context.update(timestamp.to_string().as_bytes());
        context.update(b".");
        context.update(body);
        format!("v1,{}", STANDARD.encode(context.sign().as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's published test vector.
    #[test]
    fn signatures_match_the_standard_webhooks_test_vector() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("a secret");
        assert_eq!(
            secret.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let bare = Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("a secret");
        assert_eq!(
            bare.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_secret_that_is_not_base64_or_too_short_is_refused() {
        assert!(matches!(
            Secret::parse("whsec_not base64!"),
            Err(WebhookError::Secret { .. })
        ));
        assert!(matches!(
            Secret::parse("whsec_c2hvcnQ="),
            Err(WebhookError::Secret { .. })
        ));
    }
}
