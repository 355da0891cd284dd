//! `gateway sessions list | show | tail`: what sessions exist and what one of them is doing,
//! read from the configured database or, with `--url`, from a running gateway.
//!
//! The API key of a remote gateway comes from `GATEWAY_API_KEY`, else the one
//! `gateway login --url` stored, or is asked for on the terminal (without echo) when the
//! gateway refuses the request without one; it is never a
//! command-line argument, since argv is visible to every user of the host (`ps`).

pub mod render;
pub mod source;
mod tail;

use std::io::Write;
use std::time::SystemTime;

use anyhow::Context;
use clap::{Args, Subcommand};
use gateway_core::SessionId;
use gateway_core::session::{SessionStatus, SessionSummary};
use gateway_managed_agents::client::{Client, ClientError};

use self::render::Renderer;
use self::source::Source;
use crate::config::Config;
use crate::term::Paint;

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Read from this running gateway (e.g. http://127.0.0.1:8080) instead of the configured
    /// database. Its API key is read from $GATEWAY_API_KEY, else the one `gateway login --url` stored, or asked for when needed.
    #[arg(long, global = true, value_name = "URL", env = "GATEWAY_URL")]
    pub url: Option<String>,
    #[command(subcommand)]
    pub command: SessionsCommand,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// The newest sessions: id, status, agent, backend, environment state, age.
    List {
        /// Only sessions in this status (idle, running, rescheduling, terminated); repeatable.
        #[arg(long, value_parser = status)]
        status: Vec<SessionStatus>,
        /// Only sessions of this agent (its id, or its name).
        #[arg(long)]
        agent: Option<String>,
        /// How many sessions at most.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
        /// One JSON object per session, one per line, instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One session's details and its recent events.
    Show {
        id: String,
        /// How many recent events to show.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        events: u32,
    },
    /// Follow a session live: one line per event, until Ctrl-C. Resumes where it left off
    /// when the connection (or the database) comes back.
    Tail {
        id: String,
        /// How many past events to show before following.
        #[arg(short = 'n', long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1000))]
        lines: u32,
    },
    /// Give up the environment of a session whose host is gone (its turns fail with
    /// `environment_lost` until then): the old workspace is lost, recorded in the session's
    /// log, and the next turn starts in a fresh environment. Refused while the host is alive.
    ReleaseEnvironment { id: String },
}

fn status(s: &str) -> Result<SessionStatus, String> {
    SessionStatus::parse(s).ok_or_else(|| format!("{s:?} is not a status: idle, running, rescheduling or terminated"))
}

pub async fn run(config: &Config, args: SessionsArgs) -> anyhow::Result<()> {
    let mut source = match &args.url {
        None => Source::Store(crate::db::open_migrated(config).await?),
        Some(url) => Source::Remote(Client::new(url, crate::login::gateway_key(url))?),
    };
    let mut result = execute(&source, &args.command, config).await;
    if let (Some(url), Err(e)) = (&args.url, &result)
        && std::env::var_os(crate::login::GATEWAY_KEY_ENV).is_none()
        && matches!(e.downcast_ref::<ClientError>(), Some(ClientError::Refused { status: 401, .. }))
        && let Some(k) = prompt_key(url)?
    {
        source = Source::Remote(Client::new(url, Some(k))?);
        result = execute(&source, &args.command, config).await;
    }
    source.close().await;
    result
}

/// Asks for the key on the terminal; `None` when stdin is not a terminal (a script sets
/// `GATEWAY_API_KEY` or runs `gateway login --url`) or nothing was typed.
fn prompt_key(url: &str) -> anyhow::Result<Option<String>> {
    let prompt = format!("API key for {url} (or set {}): ", crate::login::GATEWAY_KEY_ENV);
    Ok(crate::login::read_secret(&prompt)?.map(|l| l.trim().to_owned()).filter(|k| !k.is_empty()))
}

async fn execute(source: &Source, command: &SessionsCommand, config: &Config) -> anyhow::Result<()> {
    let paint = Paint::for_stdout();
    match command {
        SessionsCommand::List { status, agent, limit, json } => {
            let sessions = source.list(status, agent.as_deref(), *limit).await?;
            let mut out = std::io::stdout().lock();
            if *json {
                for s in &sessions {
                    writeln!(out, "{}", serde_json::to_string(s)?)?;
                }
            } else {
                out.write_all(table(&sessions, SystemTime::now()).as_bytes())?;
            }
            out.flush()?;
        }
        SessionsCommand::Show { id, events } => {
            let id = session_id(id)?;
            let summary = source.summary(&id).await?;
            let recent = source.recent(&id, *events).await?;
            let mut out = std::io::stdout().lock();
            out.write_all(details(&summary, SystemTime::now()).as_bytes())?;
            writeln!(out, "\nrecent events:")?;
            let mut renderer = Renderer::new(paint);
            for e in &recent {
                if let Some(line) = renderer.line(&e.id, e.at, &e.payload) {
                    writeln!(out, "{line}")?;
                }
            }
            out.flush()?;
        }
        SessionsCommand::Tail { id, lines } => {
            let id = session_id(id)?;
            tail::tail(source, &id, *lines, Renderer::new(paint)).await?;
        }
        SessionsCommand::ReleaseEnvironment { id } => {
            let id = session_id(id)?;
            let after = source.release_environment(&id, config.workers.host_ttl).await?;
            println!(
                "released the environment of {id}: its workspace on the host that is gone is lost; the environment is {} \
                 and the next turn starts in a fresh one",
                after.environment_state.as_str()
            );
        }
    }
    Ok(())
}

fn session_id(raw: &str) -> anyhow::Result<SessionId> {
    SessionId::parse(raw).with_context(|| format!("{raw:?} is not a session id"))
}

/// How long ago `at` (ms since the epoch) was, for a person: `42s`, `5m`, `3h`, `2d`.
/// The local clock is right here: an age is read by the person at this terminal.
fn age(at_ms: i64, now: SystemTime) -> String {
    let now_ms = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let secs = (now_ms - at_ms).max(0) / 1000;
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn agent_label(s: &SessionSummary) -> String {
    if s.agent_name.is_empty() { s.agent_id.clone() } else { s.agent_name.clone() }
}

/// The `list` table: a header and one row per session, columns as wide as their widest cell.
fn table(sessions: &[SessionSummary], now: SystemTime) -> String {
    let mut rows = vec![["ID", "STATUS", "AGENT", "BACKEND", "ENVIRONMENT", "AGE"].map(str::to_owned)];
    for s in sessions {
        rows.push([
            s.id.to_string(),
            s.status.as_str().to_owned(),
            crate::term::one_line(&agent_label(s), 40),
            crate::term::one_line(&s.backend, 40),
            s.environment_state.as_str().to_owned(),
            age(s.created_at.millis(), now),
        ]);
    }
    let widths: Vec<usize> = (0..6).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn details(s: &SessionSummary, now: SystemTime) -> String {
    let title = s.title.as_deref().map(|t| crate::term::one_line(t, 200)).unwrap_or_else(|| "-".into());
    format!(
        "id           {}\nstatus       {}\nagent        {} ({})\nbackend      {}\nenvironment  {}\ntitle        {title}\ncreated      {} ({} ago)\nupdated      {} ({} ago)\n",
        s.id,
        s.status.as_str(),
        crate::term::one_line(&s.agent_name, 100),
        s.agent_id,
        crate::term::one_line(&s.backend, 100),
        s.environment_state.as_str(),
        s.created_at.to_rfc3339(),
        age(s.created_at.millis(), now),
        s.updated_at.to_rfc3339(),
        age(s.updated_at.millis(), now),
    )
}

#[cfg(test)]
mod tests {
    use gateway_core::Timestamp;
    use gateway_core::session::EnvironmentState;

    use super::*;

    #[test]
    fn the_list_is_a_table_with_ages() {
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let id = SessionId::new();
        let s = SessionSummary {
            id: id.clone(),
            status: SessionStatus::Running,
            agent_id: "agent_x".into(),
            agent_name: "coder".into(),
            backend: "acp:claude".into(),
            environment_state: EnvironmentState::Realized,
            title: None,
            created_at: Timestamp((1_000_000 - 300) * 1000),
            updated_at: Timestamp(1_000_000 * 1000),
        };
        let t = table(&[s], now);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        let w = id.to_string().len();
        assert_eq!(lines[0], format!("{:<w$}  STATUS   AGENT  BACKEND     ENVIRONMENT  AGE", "ID"));
        assert_eq!(lines[1], format!("{id}  running  coder  acp:claude  realized     5m"));
        assert_eq!(age(0, SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(3 * 86400)), "3d");
    }
}
