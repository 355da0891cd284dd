//! `gateway login` and `gateway logout`: the model credential a person stores for their own
//! gateway, the terminal sign-in an editor runs (ACP terminal auth, ADR 0026).
//!
//! An editor starts `gateway acp` with its own environment, which rarely holds
//! `ANTHROPIC_API_KEY`; the ACP registry's clients run `gateway login` in a terminal instead, and
//! the key is kept in the user's config directory (`$XDG_CONFIG_HOME/gateway/credentials.toml`,
//! else `~/.config/gateway/…`), readable by the user alone. The environment still wins: this
//! file is read only when neither `ANTHROPIC_API_KEY` nor `ANTHROPIC_AUTH_TOKEN` is set.
//! The key never reaches argv (it is read from the terminal or stdin) nor a log line.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

/// Longest key accepted (Anthropic keys are about 110 characters).
const MAX_KEY_CHARS: usize = 1024;

/// What `credentials.toml` holds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    #[serde(default)]
    anthropic_api_key: Option<String>,
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
    let stored = figment::Figment::from(Toml::file_exact(path))
        .extract::<Stored>()
        .with_context(|| format!("{} is not a credentials file", path.display()))?;
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
    // Keys are checked to be of `KEY_CHARS` alone, so they need no TOML escaping.
    let text = match &stored.anthropic_api_key {
        Some(key) => format!("anthropic_api_key = \"{key}\"\n"),
        None => String::new(),
    };
    let written = file.write_all(text.as_bytes()).and_then(|()| file.sync_all());
    if let Err(e) = written.and_then(|()| std::fs::rename(&partial, path)) {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}

/// `gateway login`: reads an Anthropic API key from the terminal (not echoed) or from stdin,
/// and stores it for this user.
pub fn login() -> anyhow::Result<()> {
    let path = credentials_file().context("neither XDG_CONFIG_HOME nor HOME is set: nowhere to keep the key")?;
    let key = read_key()?;
    write(&path, &Stored { anthropic_api_key: Some(key) })?;
    eprintln!("The key is stored in {} (readable by you alone).", path.display());
    eprintln!("ANTHROPIC_API_KEY in the gateway's environment still takes precedence.");
    Ok(())
}

/// `gateway logout`: forgets the stored key. Returns whether there was one.
pub fn logout() -> anyhow::Result<bool> {
    let Some(path) = credentials_file() else { return Ok(false) };
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

fn read_key() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    let line = if stdin.is_terminal() {
        eprint!("Anthropic API key (from console.anthropic.com; not shown as you type): ");
        std::io::stderr().flush().ok();
        let _quiet = EchoOff::new(&stdin);
        let mut line = String::new();
        stdin.lock().read_line(&mut line)?;
        eprintln!();
        line
    } else {
        let mut line = String::new();
        stdin.lock().take(MAX_KEY_CHARS as u64 + 2).read_line(&mut line)?;
        line
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
        write(&path, &Stored { anthropic_api_key: Some("sk-ant-x".into()) }).expect("written");
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&path).expect("read").and_then(|s| s.anthropic_api_key).as_deref(), Some("sk-ant-x"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(read(&path).expect("read").is_none(), "a file others can read is not used");
        assert!(std::fs::read_dir(dir.path().join("gateway")).expect("dir").count() == 1, "no partial file left");
    }
}
