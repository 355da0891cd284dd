//! `gateway login` and `gateway logout`: the model credential a person stores for their own
//! gateway, the terminal sign-in an editor runs (ACP terminal auth, ADR 0026); with `--url`, the
//! API key of a remote gateway, which the editor relay `gateway acp --url` and
//! `gateway sessions --url` present (ADR 0030; `GATEWAY_API_KEY` still wins).
//!
//! An editor starts `gateway acp` with its own environment, which rarely holds
//! `ANTHROPIC_API_KEY`; the ACP registry's clients run `gateway login` in a terminal instead, and
//! the key is kept in the user's config directory (`$XDG_CONFIG_HOME/gateway/credentials.toml`,
//! else `~/.config/gateway/…`), readable by the user alone. The environment still wins: this
//! file is read only when neither `ANTHROPIC_API_KEY` nor `ANTHROPIC_AUTH_TOKEN` is set.
//! The key never reaches argv (it is read from the terminal or stdin) nor a log line.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::Value;

/// Longest key accepted (Anthropic keys are about 110 characters).
const MAX_KEY_CHARS: usize = 1024;

/// What `credentials.toml` holds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    #[serde(default)]
    anthropic_api_key: Option<String>,
    /// Remote gateways' API keys, by URL ([`gateway_url`]).
    #[serde(default)]
    gateways: BTreeMap<String, GatewayKey>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayKey {
    api_key: String,
}

/// The variable a remote gateway's API key is read from first.
pub const GATEWAY_KEY_ENV: &str = "GATEWAY_API_KEY";

/// A gateway URL as keys are stored by: checked to be one the relay can reach, without a
/// trailing `/`.
fn gateway_url(url: &str) -> anyhow::Result<String> {
    gateway_acp::relay::endpoint(url).map_err(anyhow::Error::msg)?;
    Ok(url.trim_end_matches('/').to_owned())
}

/// The API key for a remote gateway: `GATEWAY_API_KEY`, else the one `gateway login --url`
/// stored for that URL.
pub fn gateway_key(url: &str) -> Option<String> {
    let from_env = std::env::var(GATEWAY_KEY_ENV).ok().map(|k| k.trim().to_owned()).filter(|k| !k.is_empty());
    from_env.or_else(|| {
        let url = gateway_url(url).ok()?;
        let mut stored = read(&credentials_file()?).ok().flatten()?;
        stored.gateways.remove(&url).map(|g| g.api_key)
    })
}

/// What a key may be made of (API keys are letters, digits and a few marks).
fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.~+/=".contains(c)
}

/// Where the stored credential lives, if the user has a home.
pub fn credentials_file() -> Option<PathBuf> {
    Some(crate::config::Config::user_config_home()?.join("gateway").join("credentials.toml"))
}

/// The Anthropic API key `gateway login` stored, if there is one the user alone can read. A
/// file others may read is not used (the key may have leaked; `gateway login` writes it anew).
pub fn stored_anthropic_key() -> Option<String> {
    let path = credentials_file()?;
    read(&path).ok().flatten().and_then(|s| s.anthropic_api_key)
}

fn read(path: &Path) -> anyhow::Result<Option<Stored>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "the stored credential is readable by others and is not used; run `gateway login` again");
        return Ok(None);
    }
    use figment::providers::{Format, Toml};
    // Every key is checked to be of `key_char`s alone (a hand-edited file too), so it never
    // needs escaping when written back.
    let valid = |k: &str| !k.is_empty() && k.chars().count() <= MAX_KEY_CHARS && k.chars().all(key_char);
    let stored = figment::Figment::from(Toml::file_exact(path))
        .extract::<Stored>()
        .with_context(|| format!("{} is not a credentials file", path.display()))?;
    if !stored.anthropic_api_key.as_deref().is_none_or(valid) || !stored.gateways.values().all(|g| valid(&g.api_key)) {
        bail!("{} holds a key that is not an API key; run `gateway login` again", path.display());
    }
    Ok(Some(stored))
}

/// Writes `stored` with mode 0600 (a new file renamed over the old one, so a reader never sees
/// half a key and the mode is never wider, even for a moment).
fn write(path: &Path, stored: &Stored) -> anyhow::Result<()> {
    let dir = path.parent().context("the credentials file has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let partial = dir.join(format!(".credentials.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    // Keys are checked to be of `key_char`s alone, so they need no TOML escaping; URLs are
    // quoted as JSON strings, which are TOML basic strings (neither escapes `/`).
    let mut text = String::new();
    if let Some(key) = &stored.anthropic_api_key {
        text.push_str(&format!("anthropic_api_key = \"{key}\"\n"));
    }
    for (url, key) in &stored.gateways {
        text.push_str(&format!("\n[gateways.{}]\napi_key = \"{}\"\n", Value::from(url.as_str()), key.api_key));
    }
    let written = file.write_all(text.as_bytes()).and_then(|()| file.sync_all());
    if let Err(e) = written.and_then(|()| std::fs::rename(&partial, path)) {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}

/// `gateway login`: reads an Anthropic API key (with `url`, that gateway's API key) from the
/// terminal (not echoed) or from stdin, and stores it for this user beside the others.
pub fn login(url: Option<&str>) -> anyhow::Result<()> {
    let path = credentials_file().context("neither XDG_CONFIG_HOME nor HOME is set: nowhere to keep the key")?;
    let mut stored = read(&path)?.unwrap_or_default();
    match url {
        None => {
            stored.anthropic_api_key =
                Some(read_key("Anthropic API key (from console.anthropic.com; not shown as you type): ")?);
        }
        Some(url) => {
            let url = gateway_url(url)?;
            let api_key = read_key(&format!("API key for {url} (not shown as you type): "))?;
            stored.gateways.insert(url, GatewayKey { api_key });
        }
    }
    write(&path, &stored)?;
    eprintln!("The key is stored in {} (readable by you alone).", path.display());
    let wins = if url.is_some() { GATEWAY_KEY_ENV } else { "ANTHROPIC_API_KEY" };
    eprintln!("{wins} in the environment still takes precedence.");
    Ok(())
}

/// `gateway logout`: forgets the stored Anthropic key (with `url`, that gateway's key).
/// Returns whether there was one.
pub fn logout(url: Option<&str>) -> anyhow::Result<bool> {
    let Some(path) = credentials_file() else { return Ok(false) };
    let Some(mut stored) = read(&path)? else { return Ok(false) };
    let had = match url {
        None => stored.anthropic_api_key.take().is_some(),
        Some(url) => stored.gateways.remove(&gateway_url(url)?).is_some(),
    };
    if !had {
        return Ok(false);
    }
    if stored.anthropic_api_key.is_none() && stored.gateways.is_empty() {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
    } else {
        write(&path, &stored)?;
    }
    Ok(true)
}

/// A key typed at the terminal without echo, or one line of stdin.
fn read_key(prompt: &str) -> anyhow::Result<String> {
    let line = match read_secret(prompt)? {
        Some(line) => line,
        None => {
            let mut line = String::new();
            std::io::stdin().lock().take(MAX_KEY_CHARS as u64 + 2).read_line(&mut line)?;
            line
        }
    };
    let key = line.trim();
    if key.is_empty() {
        bail!("no key was given");
    }
    if key.chars().count() > MAX_KEY_CHARS || !key.chars().all(key_char) {
        bail!("that is not an API key (letters, digits and -_.~+/=, at most {MAX_KEY_CHARS} characters)");
    }
    Ok(key.to_owned())
}

/// Asks for a secret on the terminal, not echoed; `None` when stdin is not a terminal.
pub fn read_secret(prompt: &str) -> anyhow::Result<Option<String>> {
    let stdin = std::io::stdin();
    let line = if stdin.is_terminal() {
        eprint!("{prompt}");
        std::io::stderr().flush().ok();
        let _quiet = EchoOff::new(&stdin);
        let mut line = String::new();
        stdin.lock().take(MAX_KEY_CHARS as u64 + 2).read_line(&mut line)?;
        eprintln!();
        line
    } else {
        return Ok(None);
    };
    Ok(Some(line))
}

/// Terminal echo off while the key is typed, restored when dropped.
struct EchoOff {
    saved: Option<nix::sys::termios::Termios>,
}

impl EchoOff {
    fn new(stdin: &std::io::Stdin) -> Self {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        let Ok(saved) = tcgetattr(stdin) else { return Self { saved: None } };
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        let set = tcsetattr(stdin, SetArg::TCSANOW, &quiet).is_ok();
        Self { saved: set.then_some(saved) }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, saved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_written_for_its_user_alone_and_a_shared_file_is_not_read() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("gateway/credentials.toml");
        let mut stored = Stored { anthropic_api_key: Some("sk-ant-x".into()), ..Default::default() };
        stored.gateways.insert("https://gw.example/team".into(), GatewayKey { api_key: "gw_x".into() });
        write(&path, &stored).expect("written");
        let back = read(&path).expect("read").expect("stored");
        assert_eq!(back.gateways.get("https://gw.example/team").map(|g| g.api_key.as_str()), Some("gw_x"));
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&path).expect("read").and_then(|s| s.anthropic_api_key).as_deref(), Some("sk-ant-x"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(read(&path).expect("read").is_none(), "a file others can read is not used");
        assert!(std::fs::read_dir(dir.path().join("gateway")).expect("dir").count() == 1, "no partial file left");
    }
}
