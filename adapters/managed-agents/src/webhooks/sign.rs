//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): what the `standardwebhooks`
//! package and the SDK's `client.beta.webhooks.unwrap` verify.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` and the standard base64 of 32 random bytes (the verifier
/// decodes the standard alphabet only).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    // Same reasoning as ids: a failing OS random source is unrecoverable.
    getrandom::fill(&mut bytes).expect("operating system random source unavailable");
    format!("{PREFIX}{}", STANDARD.encode(bytes))
}

/// Whether `secret` is one a verifier can use: `whsec_` and base64 of at least 16 bytes.
pub fn is_valid_secret(secret: &str) -> bool {
    secret.strip_prefix(PREFIX).and_then(|b| STANDARD.decode(b).ok()).is_some_and(|k| k.len() >= 16)
}

/// The `webhook-signature` value for a message: `v1,` and the base64 HMAC-SHA256 of
/// `{id}.{timestamp}.{body}` under the secret's key. `None` for a malformed secret.
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &str) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(PREFIX)?).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    Some(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        // The example of the Standard Webhooks specification and its libraries' tests.
        let sig = signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(sig.as_deref(), Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
        assert_eq!(signature("nope", "a", 1, "b"), None);
    }

    #[test]
    fn new_secrets_are_valid_and_distinct() {
        let (a, b) = (new_secret(), new_secret());
        assert!(is_valid_secret(&a) && is_valid_secret(&b) && a != b);
        assert!(!is_valid_secret("whsec_"));
        assert!(!is_valid_secret("secret"));
    }
}
