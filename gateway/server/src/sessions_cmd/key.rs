//! The API key of a remote gateway: from `GATEWAY_API_KEY`, or typed at the terminal without
//! echo. Never an argument (argv is world-readable through `/proc`), never printed.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::process::{Command, Stdio};

/// The variable the key is read from.
pub const ENV: &str = "GATEWAY_API_KEY";
/// The longest key read from the terminal.
const MAX_KEY: u64 = 4096;

pub fn from_env() -> Option<String> {
    std::env::var(ENV).ok().map(|k| k.trim().to_owned()).filter(|k| !k.is_empty())
}

/// Asks for the key on the terminal; `None` when stdin is not a terminal (a script must set
/// `GATEWAY_API_KEY`) or nothing was typed.
pub fn prompt(url: &str) -> anyhow::Result<Option<String>> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Ok(None);
    }
    eprint!("API key for {url} (or set {ENV}): ");
    std::io::stderr().flush()?;
    let _echo = EchoOff::new();
    let mut line = String::new();
    stdin.lock().take(MAX_KEY).read_line(&mut line)?;
    eprintln!();
    Ok(Some(line.trim().to_owned()).filter(|k| !k.is_empty()))
}

/// Turns the terminal's echo off (with `stty`, on the terminal stdin is) until dropped.
struct EchoOff {
    off: bool,
}

impl EchoOff {
    fn new() -> Self {
        Self { off: stty("-echo") }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        if self.off {
            stty("echo");
        }
    }
}

fn stty(arg: &str) -> bool {
    Command::new("stty")
        .arg(arg)
        .stdin(Stdio::inherit())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
