//! `sessions tail`: print a session's recent events, then follow it until Ctrl-C.
//!
//! The resume rule: the follower remembers the last event it printed (its seq when reading the
//! store, its id when reading the API) and, whenever the source fails (the gateway restarts,
//! the connection breaks, the database is briefly unavailable), reconnects after a short
//! backoff asking for the events after that one. The source replays them in order, so no
//! line is printed twice and none is lost. A session with no event yet has nothing to resume
//! after; its first reconnect reads the log from the start, which is the same thing.

use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use gateway_core::SessionId;
use gateway_core::event::EventKind;

use super::render::Renderer;
use super::source::{Cursor, Seen, Source, transient};

/// The first wait before reconnecting; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Why following stopped.
enum End {
    /// Ctrl-C, a deleted session, or stdout closed (`| head`).
    Done,
    /// The source failed; reconnect.
    Lost(anyhow::Error),
}

pub async fn tail(source: &Source, id: &SessionId, lines: u32, mut renderer: Renderer) -> anyhow::Result<()> {
    source.summary(id).await?;
    let recent = source.recent(id, lines).await?;
    let mut cursor = Cursor::default();
    let shown = recent.len().saturating_sub(lines as usize);
    for (i, e) in recent.iter().enumerate() {
        if i >= shown && !print(&mut renderer, e) {
            return Ok(());
        }
        cursor.advance(e);
    }
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut backoff = BACKOFF_MIN;
    loop {
        let followed = tokio::select! {
            end = follow(source, id, &mut cursor, &mut renderer, &mut backoff) => end,
            _ = &mut interrupted => End::Done,
        };
        match followed {
            End::Done => return Ok(()),
            End::Lost(e) if !transient(&e) => return Err(e),
            End::Lost(e) => {
                eprintln!("gateway: {e:#}; reconnecting in {backoff:?}");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = &mut interrupted => return Ok(()),
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// Follows from `cursor` until the source fails or the session is deleted; every event
/// printed advances the cursor, and any event read resets the backoff.
async fn follow(
    source: &Source,
    id: &SessionId,
    cursor: &mut Cursor,
    renderer: &mut Renderer,
    backoff: &mut Duration,
) -> End {
    let mut events = match source.follow(id, cursor).await {
        Ok(s) => s,
        Err(e) => return End::Lost(e),
    };
    loop {
        match events.next().await {
            None => return End::Lost(anyhow::anyhow!("the event stream ended")),
            Some(Err(e)) => return End::Lost(e),
            Some(Ok(e)) => {
                *backoff = BACKOFF_MIN;
                cursor.advance(&e);
                if !print(renderer, &e) || e.payload.kind() == EventKind::SessionDeleted {
                    return End::Done;
                }
            }
        }
    }
}

/// Prints the event's line (if it has one) and flushes, so a pipe sees it at once; false
/// when stdout is closed.
fn print(renderer: &mut Renderer, e: &Seen) -> bool {
    let Some(line) = renderer.line(&e.id, e.at, &e.payload) else { return true };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}
