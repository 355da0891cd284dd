//! Secrets at rest: a [`SecretBox`] seals the credentials the gateway must keep (A2A push
//! tokens and credentials; later webhook secrets and repository tokens) before they are
//! stored, and opens them only where they are used.
//!
//! Why: the database holds every transcript, and whoever may read it (a backup, a replica, a
//! `SELECT` by another operator) must not also get credentials for other systems. A sealed
//! value is text, `sealed:v1:<base64(nonce || ciphertext)>`, so it sits in JSON documents
//! and outbox headers like the plaintext did. The cipher is XChaCha20-Poly1305 (RustCrypto):
//! its 192-bit random nonces cannot repeat in practice, so no counter has to be kept, and
//! the tag makes a changed or foreign value fail to open instead of yielding garbage.
//!
//! The key is 32 bytes from `GATEWAY_SECRET_KEY` (base64) or a key file (base64 text;
//! default `<data_dir>/secret.key`, created at first start with mode 0600). Every process
//! sharing a database must use the same key: [`SecretBox::verify_for`] records which key
//! sealed a database's values and refuses a process that holds another one, before it seals
//! anything with it.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use gateway_core::session::Secret;
use gateway_store::{Documents, StoreError};
use sha2::{Digest, Sha256};

/// How every sealed value starts; the version names the cipher and layout.
pub const SEALED_PREFIX: &str = "sealed:v1:";
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const KEY_LEN: usize = 32;
/// Authenticated with every value, so a v1 value cannot be mistaken for another format's.
const AAD: &[u8] = b"gateway sealed:v1";
/// Where the database records which key sealed its values.
const CHECK_NAMESPACE: &str = "gateway.secrets";
const CHECK_KEY: &str = "key";
const CHECK_PLAINTEXT: &str = "gateway secret key check v1";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("the value is not sealed (it does not start with {SEALED_PREFIX})")]
    NotSealed,
    #[error("the sealed value is malformed: {0}")]
    Malformed(&'static str),
    #[error(
        "a sealed value cannot be opened with this gateway's secret key {key_id}: it was sealed with another key (GATEWAY_SECRET_KEY or secret_key_file changed?) or altered"
    )]
    WrongKey { key_id: String },
    #[error(
        "secret key from {origin} is not usable: {problem} (expected base64 of 32 bytes, e.g. `openssl rand -base64 32`)"
    )]
    BadKey { origin: String, problem: String },
    #[error("secret key file {path}: {error}")]
    KeyFile { path: PathBuf, error: String },
    #[error(
        "this database's secrets were sealed with key {stored}, but this process has key {ours}: give every process that shares the database the same GATEWAY_SECRET_KEY or secret_key_file"
    )]
    KeyMismatch { stored: String, ours: String },
    #[error("cannot check the secret key against the database: {0}")]
    Store(String),
}

/// Seals and opens secrets with one key. Cheap to clone (the cipher is shared); `Debug`
/// shows only the key id, a short hash that says which key without revealing it.
#[derive(Clone)]
pub struct SecretBox {
    cipher: Arc<XChaCha20Poly1305>,
    key_id: String,
}

impl fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretBox").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

/// Where a key came from, for the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOrigin {
    Environment,
    File(PathBuf),
    /// The key file did not exist and was made now.
    Created(PathBuf),
}

impl SecretBox {
    pub fn from_key(key: [u8; KEY_LEN]) -> Self {
        let digest = Sha256::new().chain_update(b"gateway secret key id").chain_update(key).finalize();
        let key_id = hex::encode(&digest[..4]);
        Self { cipher: Arc::new(XChaCha20Poly1305::new(&Key::from(key))), key_id }
    }

    /// A key given as base64 text (`origin` names where it came from in errors).
    pub fn from_base64(text: &str, origin: &str) -> Result<Self, SecretError> {
        let bad = |problem: String| SecretError::BadKey { origin: origin.to_owned(), problem };
        let bytes = B64.decode(text.trim()).map_err(|e| bad(format!("not base64: {e}")))?;
        let key: [u8; KEY_LEN] =
            bytes.try_into().map_err(|b: Vec<u8>| bad(format!("{} bytes instead of {KEY_LEN}", b.len())))?;
        Ok(Self::from_key(key))
    }

    /// A fresh random key that lives only in this process (tests, tools).
    pub fn generate() -> Self {
        Self::from_key(random_key())
    }

    /// The key from `env` (the value of `GATEWAY_SECRET_KEY`) if set, else from `file`,
    /// which is created with a new random key (mode 0600) when missing.
    pub fn load(env: Option<&str>, file: &Path) -> Result<(Self, KeyOrigin), SecretError> {
        if let Some(text) = env.filter(|t| !t.trim().is_empty()) {
            return Ok((Self::from_base64(text, "GATEWAY_SECRET_KEY")?, KeyOrigin::Environment));
        }
        let created = create_key_file(file)?;
        let text = std::fs::read_to_string(file).map_err(|e| key_file_error(file, e))?;
        if let Ok(meta) = std::fs::metadata(file)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                path = %file.display(),
                mode = format!("{:o}", meta.permissions().mode() & 0o777),
                "the secret key file is readable by other users; make it 0600"
            );
        }
        let origin = if created { KeyOrigin::Created(file.to_owned()) } else { KeyOrigin::File(file.to_owned()) };
        Ok((Self::from_base64(&text, &file.display().to_string())?, origin))
    }

    /// A short hash naming the key (safe to log).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Whether `text` is a sealed value (of any key).
    pub fn is_sealed(text: &str) -> bool {
        text.starts_with(SEALED_PREFIX)
    }

    /// Seals `plaintext` with a fresh random nonce.
    pub fn seal(&self, plaintext: &str) -> String {
        let nonce = XNonce::from(random_nonce());
        let sealed = self
            .cipher
            .encrypt(&nonce, Payload { msg: plaintext.as_bytes(), aad: AAD })
            // XChaCha20-Poly1305 fails only past 256 GiB of plaintext.
            .unwrap_or_else(|_| unreachable!("XChaCha20-Poly1305 cannot fail on a string in memory"));
        let mut bytes = Vec::with_capacity(NONCE_LEN + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        format!("{SEALED_PREFIX}{}", B64.encode(bytes))
    }

    /// Opens a value [`SecretBox::seal`] made with this key.
    pub fn open(&self, sealed: &str) -> Result<Secret, SecretError> {
        let body = sealed.strip_prefix(SEALED_PREFIX).ok_or(SecretError::NotSealed)?;
        let bytes = B64.decode(body).map_err(|_| SecretError::Malformed("not base64"))?;
        if bytes.len() < NONCE_LEN + TAG_LEN {
            return Err(SecretError::Malformed("too short"));
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce = XNonce::try_from(nonce).map_err(|_| SecretError::Malformed("bad nonce"))?;
        let plain = self
            .cipher
            .decrypt(&nonce, Payload { msg: ciphertext, aad: AAD })
            .map_err(|_| SecretError::WrongKey { key_id: self.key_id.clone() })?;
        String::from_utf8(plain).map(Secret).map_err(|_| SecretError::Malformed("not UTF-8"))
    }

    /// Records this key in `docs` if no key is recorded yet, else checks that it is the
    /// recorded one. Run at start-up, before anything is sealed: a process with another key
    /// (a second host that generated its own key file) is refused instead of sealing values
    /// the other processes cannot open.
    pub async fn verify_for(&self, docs: &dyn Documents) -> Result<(), SecretError> {
        let store = |e: StoreError| SecretError::Store(e.to_string());
        for _ in 0..3 {
            if let Some(doc) = docs.get_document(CHECK_NAMESPACE, CHECK_KEY).await.map_err(store)? {
                let stored = doc.body.get("key_id").and_then(|v| v.as_str()).unwrap_or("(unknown)").to_owned();
                let probe = doc.body.get("probe").and_then(|v| v.as_str()).unwrap_or_default();
                return match self.open(probe) {
                    Ok(p) if p.0 == CHECK_PLAINTEXT => Ok(()),
                    _ => Err(SecretError::KeyMismatch { stored, ours: self.key_id.clone() }),
                };
            }
            let body = serde_json::json!({"key_id": self.key_id, "probe": self.seal(CHECK_PLAINTEXT)});
            match docs.put_document(CHECK_NAMESPACE, CHECK_KEY, &body, None).await {
                Ok(_) => return Ok(()),
                // Another process recorded its key first: check against that one.
                Err(StoreError::Guard(gateway_store::Guard::DocumentConflict { .. })) => continue,
                Err(e) => return Err(store(e)),
            }
        }
        Err(SecretError::Store("the recorded key kept changing".into()))
    }
}

fn random_key() -> [u8; KEY_LEN] {
    let mut key = [0u8; KEY_LEN];
    // Same reasoning as ids: a failing OS random source is unrecoverable.
    getrandom::fill(&mut key).expect("operating system random source unavailable");
    key
}

fn random_nonce() -> [u8; NONCE_LEN] {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).expect("operating system random source unavailable");
    nonce
}

fn key_file_error(path: &Path, e: impl fmt::Display) -> SecretError {
    SecretError::KeyFile { path: path.to_owned(), error: e.to_string() }
}

/// Creates `path` with a new random key unless it exists; says whether it did. The key is
/// written to a private temporary file and linked into place, so a concurrent start never
/// reads a half-written key and two starts never end up with different keys.
fn create_key_file(path: &Path) -> Result<bool, SecretError> {
    if path.exists() {
        return Ok(false);
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| key_file_error(dir, e))?;
    let tmp = dir.join(format!(".secret.key.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(format!("{}\n", B64.encode(random_key())).as_bytes())?;
        f.sync_all()
    })();
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(key_file_error(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_with_their_key_only() {
        let a = SecretBox::generate();
        let sealed = a.seal("push-secret");
        assert!(SecretBox::is_sealed(&sealed) && !sealed.contains("push-secret"), "{sealed}");
        assert_ne!(a.seal("push-secret"), sealed, "a fresh nonce every time");
        assert_eq!(a.open(&sealed).map(|s| s.0), Ok("push-secret".to_owned()));
        let b = SecretBox::generate();
        assert_eq!(b.open(&sealed), Err(SecretError::WrongKey { key_id: b.key_id().to_owned() }));
        assert_eq!(a.open("push-secret"), Err(SecretError::NotSealed));
        assert_eq!(a.open("sealed:v1:!!"), Err(SecretError::Malformed("not base64")));
        assert_eq!(a.open("sealed:v1:AAAA"), Err(SecretError::Malformed("too short")));
        let mut altered = sealed.into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap_or_default();
        assert!(matches!(a.open(&altered), Err(SecretError::WrongKey { .. })), "the tag catches a change");
        assert!(!format!("{a:?}").contains("cipher"), "Debug shows the key id only");
    }

    #[test]
    fn keys_come_from_base64_of_32_bytes() {
        let key = B64.encode([7u8; 32]);
        let a = SecretBox::from_base64(&format!(" {key}\n"), "test").expect("valid");
        assert_eq!(a.key_id(), SecretBox::from_key([7u8; 32]).key_id());
        let short = SecretBox::from_base64(&B64.encode([7u8; 16]), "test").unwrap_err().to_string();
        assert!(short.contains("16 bytes instead of 32"), "{short}");
        assert!(SecretBox::from_base64("not base64!", "GATEWAY_SECRET_KEY").is_err());
    }

    #[test]
    fn the_key_file_is_created_private_once_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state/secret.key");
        let (a, origin) = SecretBox::load(None, &path).expect("created");
        assert_eq!(origin, KeyOrigin::Created(path.clone()));
        let meta = std::fs::metadata(&path).expect("exists");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(dir.path().join("state")).expect("dir").permissions().mode() & 0o777, 0o700);
        let (b, origin) = SecretBox::load(None, &path).expect("read");
        assert_eq!(origin, KeyOrigin::File(path.clone()));
        assert_eq!(a.key_id(), b.key_id(), "the same key on the next start");
        assert_eq!(b.open(&a.seal("x")).map(|s| s.0), Ok("x".to_owned()));
        let env = B64.encode([1u8; 32]);
        let (c, origin) = SecretBox::load(Some(&env), &path).expect("env wins");
        assert_eq!((origin, c.key_id()), (KeyOrigin::Environment, SecretBox::from_key([1u8; 32]).key_id()));
    }

    #[tokio::test]
    async fn a_database_keeps_the_key_that_sealed_it() {
        use gateway_store::conformance::Harness;
        let harness = gateway_store::conformance::harness::SqliteHarness::new(false);
        let store = harness.fresh().await;
        let a = SecretBox::generate();
        a.verify_for(store.as_ref()).await.expect("the first key is recorded");
        a.verify_for(store.as_ref()).await.expect("and accepted on the next start");
        let b = SecretBox::generate();
        let refused = b.verify_for(store.as_ref()).await.unwrap_err();
        assert_eq!(refused, SecretError::KeyMismatch { stored: a.key_id().to_owned(), ours: b.key_id().to_owned() });
        assert!(refused.to_string().contains("same GATEWAY_SECRET_KEY"), "{refused}");
    }
}
