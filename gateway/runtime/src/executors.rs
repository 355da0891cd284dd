//! Self-hosted executors (DESIGN §5a, docs/adr/0013): what the gateway does about the compute
//! a user's application runs for a session. The store keeps the work queue and commits each
//! connection change with its event; this module decides when to ask, how long a turn waits,
//! and what a lost executor leaves behind.
//!
//! - **Asking.** A turn that needs the executor and finds none connected asks for one
//!   (`ConnectionRequested` is committed before it waits), then waits up to
//!   `connect_timeout`. On expiry it gives up atomically with the queue: if no executor took
//!   the work item by then, the item is stopped and the connection reported `failed`, so a
//!   late executor finds nothing to run; if one did, the turn goes on.
//! - **Losing.** An executor that stops or whose lease lapses leaves the session
//!   `disconnected`; in the same transaction the calls it was answering get an error result
//!   (never re-run: the command may have run), admitted like any client answer, so the turn
//!   resumes. This module only sweeps for lapsed leases. Nothing asks for a new executor by
//!   itself; the next call that needs one does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::content::ContentBlock;
use gateway_core::environment::EnvironmentConfig;
use gateway_core::{ApiKeyId, EnvironmentId, SessionId, WorkId};
use gateway_store::{ApiKey, Beat, Page, PageRequest, Poll, Pollers, Stop, Store, StoreError, WorkItem, WorkStats};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::{Result, RuntimeError};
use gateway_services::auth::generate_environment_key;

/// How executors are waited for and held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorSettings {
    /// How long a turn waits for an executor to connect before its input fails.
    pub connect_timeout: Duration,
    /// The lease a heartbeat (or an acknowledgement) grants; the official worker beats at
    /// half of it.
    pub heartbeat_ttl: Duration,
    /// A polled item not acknowledged within this is handed out again (the SDK's default).
    pub reclaim_after: Duration,
    /// Distinct workers (`Anthropic-Worker-ID`) one environment records within the polling
    /// window; polls from more are served, not counted ([`gateway_store::Pollers`]).
    pub max_polling_workers: u64,
    /// Bytes of an executor's result kept ([`Executors::cap_result`]): the output cap of the
    /// gateway's own built-in tools (`[environments] output_cap_bytes`).
    pub output_cap: usize,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(300),
            heartbeat_ttl: Duration::from_secs(30),
            reclaim_after: Duration::from_secs(5),
            max_polling_workers: 1000,
            output_cap: gateway_sandbox::Limits::default().output_cap,
        }
    }
}

/// The longest a poll may wait (the wire bound of `block_ms`).
pub const MAX_POLL_BLOCK: Duration = Duration::from_millis(999);
/// The shortest and longest lease a heartbeat may ask for (`desired_ttl_seconds`).
const MIN_TTL: Duration = Duration::from_secs(2);
const MAX_TTL: Duration = Duration::from_secs(600);
/// Work stats count the workers that polled within this (the reference's 30 s).
const POLLING_WINDOW: Duration = Duration::from_secs(30);
/// How often held leases are checked for lapses.
const EXPIRY_SWEEP: Duration = Duration::from_secs(1);
/// How often a waiting turn looks again without a wake-up.
const CONNECT_POLL: Duration = Duration::from_millis(200);

/// The process's view of self-hosted executors.
pub struct Executors {
    store: Arc<dyn Store>,
    settings: ExecutorSettings,
    /// Woken when this process queues work: polls waiting here look again at once.
    queued: Notify,
}

/// An executor's result as it is admitted (`events::send` of the Managed Agents adapter): held to the output cap the gateway's own
/// built-in tools obey, counted the same way ([`gateway_sandbox::capped_text`]: the JSON
/// form of the text a client receives), over the whole result. Text is cut at the cap; a
/// block that is not text and does not fit whole is dropped; a last text block says how
/// many bytes went, as a built-in tool's output does. Without it an executor's 30 MiB
/// result was stored, replayed to the model and streamed to every client.
pub fn cap_result(content: Vec<ContentBlock>, cap: usize) -> Vec<ContentBlock> {
    let (mut room, mut dropped) = (cap, 0usize);
    let mut kept = Vec::with_capacity(content.len());
    for block in content {
        match block {
            ContentBlock::Text { text } => {
                let (text, cut) = gateway_sandbox::capped_text(text.as_bytes(), room);
                room = room.saturating_sub(json_text_len(&text));
                dropped += cut;
                if !text.is_empty() {
                    kept.push(ContentBlock::Text { text });
                }
            }
            other => {
                let size = serde_json::to_string(&other).map_or(usize::MAX, |j| j.len());
                if size <= room {
                    room -= size;
                    kept.push(other);
                } else {
                    dropped = dropped.saturating_add(size);
                }
            }
        }
    }
    if dropped > 0 {
        kept.push(ContentBlock::text(format!(
            "[output truncated: {dropped} more bytes were dropped (the cap is {cap} bytes)]"
        )));
    }
    kept
}

/// The bytes `text` takes inside a JSON string (what [`gateway_sandbox::capped_text`] counts).
fn json_text_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(text.len(), |j| j.len().saturating_sub(2))
}

/// How a wait for an executor ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    Connected,
    /// Nobody came in time; the request was withdrawn and reported `failed`.
    TimedOut,
    /// The turn was interrupted or abandoned while waiting.
    Cancelled,
}

impl Executors {
    pub fn new(store: Arc<dyn Store>, settings: ExecutorSettings) -> Self {
        Self { store, settings, queued: Notify::new() }
    }

    pub fn settings(&self) -> &ExecutorSettings {
        &self.settings
    }

    /// An executor's result as it is admitted, held to the output cap ([`cap_result`]).
    pub fn cap_result(&self, content: Vec<ContentBlock>) -> Vec<ContentBlock> {
        cap_result(content, self.settings.output_cap)
    }

    /// How polls are recorded: within the window work stats count, up to the bound.
    fn pollers(&self) -> Pollers {
        Pollers { window: POLLING_WINDOW, max_per_environment: self.settings.max_polling_workers }
    }

    /// Makes sure an executor serves `session`, asking for one and waiting up to the connect
    /// timeout if none does. `stop` ends the wait early (an interrupt, a lost lease).
    pub async fn connect(
        &self,
        session: &SessionId,
        stop: &CancellationToken,
    ) -> std::result::Result<Connection, StoreError> {
        let item = self.store.request_connection(session).await?;
        if item.state.is_held() {
            return Ok(Connection::Connected);
        }
        self.queued.notify_waiters();
        info!(session = %session, work = %item.id, "waiting for a self-hosted executor");
        let deadline = tokio::time::Instant::now() + self.settings.connect_timeout;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Ok(Connection::Cancelled),
                _ = tokio::time::sleep_until(deadline) => break,
                _ = tokio::time::sleep(CONNECT_POLL) => {}
            }
            if self.store.live_work(session).await?.is_some_and(|w| w.state.is_held()) {
                return Ok(Connection::Connected);
            }
        }
        let error = format!(
            "no self-hosted executor connected within {}s; the input that needed it was not run",
            self.settings.connect_timeout.as_secs()
        );
        if self.store.give_up_connection(session, &error).await? {
            warn!(session = %session, "no self-hosted executor connected in time");
            Ok(Connection::TimedOut)
        } else {
            Ok(Connection::Connected)
        }
    }

    /// A poll: the oldest waiting item of `environment`, waiting up to `block` for one queued
    /// by this process. Items queued by other processes are found by the next poll.
    pub async fn poll(
        &self,
        environment: &EnvironmentId,
        worker: Option<&str>,
        block: Option<Duration>,
        reclaim_after: Option<Duration>,
    ) -> Result<Option<WorkItem>> {
        let reclaim = reclaim_after.unwrap_or(self.settings.reclaim_after);
        let deadline = tokio::time::Instant::now() + block.unwrap_or_default().min(MAX_POLL_BLOCK);
        loop {
            let woken = self.queued.notified();
            if let Some(item) = self
                .store
                .poll_work(environment, Poll { worker, reclaim_after: reclaim, pollers: self.pollers() })
                .await?
            {
                return Ok(Some(item));
            }
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(None),
            }
        }
    }

    /// Acknowledges a polled item: the executor now holds the session.
    pub async fn ack(&self, environment: &EnvironmentId, id: &WorkId) -> Result<WorkItem> {
        Ok(self.store.ack_work(environment, id, self.settings.heartbeat_ttl).await?)
    }

    /// Renews an item's lease (`desired_ttl`, bounded, else the configured lease).
    pub async fn heartbeat(
        &self,
        environment: &EnvironmentId,
        id: &WorkId,
        expected: &str,
        desired_ttl: Option<Duration>,
    ) -> Result<Beat> {
        let ttl = desired_ttl.map_or(self.settings.heartbeat_ttl, |t| t.clamp(MIN_TTL, MAX_TTL));
        Ok(self.store.heartbeat_work(environment, id, expected, ttl).await?)
    }

    /// Stops an item (a session it disconnects has its open calls failed, by the store).
    pub async fn stop(&self, environment: &EnvironmentId, id: &WorkId, force: bool) -> Result<Stop> {
        Ok(self.store.stop_work(environment, id, force).await?)
    }

    pub async fn get(&self, environment: &EnvironmentId, id: &WorkId) -> Result<WorkItem> {
        Ok(self.store.get_work(environment, id).await?)
    }

    pub async fn update_metadata(
        &self,
        environment: &EnvironmentId,
        id: &WorkId,
        patch: BTreeMap<String, Option<String>>,
    ) -> Result<WorkItem> {
        Ok(self.store.update_work_metadata(environment, id, patch).await?)
    }

    pub async fn list(&self, environment: &EnvironmentId, page: &PageRequest) -> Result<Page<WorkItem>> {
        Ok(self.store.list_work(environment, page).await?)
    }

    pub async fn stats(&self, environment: &EnvironmentId) -> Result<WorkStats> {
        Ok(self.store.work_stats(environment, POLLING_WINDOW).await?)
    }

    // ---- environment keys ----

    /// Creates a key for a self-hosted `environment`; the secret is returned once.
    pub async fn create_key(&self, environment: &EnvironmentId, name: &str) -> Result<(ApiKey, String)> {
        let env = self.store.get_environment(environment).await?;
        if !matches!(env.spec.config, EnvironmentConfig::SelfHosted) {
            return Err(RuntimeError::Invalid(format!(
                "environment {environment} is not self_hosted: only a self-hosted environment's executors use environment keys"
            )));
        }
        let key = generate_environment_key();
        let stored = self.store.create_environment_key(environment, name, &key.hash).await?;
        Ok((stored, key.secret))
    }

    pub async fn list_keys(&self, environment: &EnvironmentId) -> Result<Vec<ApiKey>> {
        self.store.get_environment(environment).await?;
        Ok(self.store.list_environment_keys(environment).await?)
    }

    pub async fn revoke_key(&self, environment: &EnvironmentId, id: &ApiKeyId) -> Result<bool> {
        Ok(self.store.revoke_environment_key(environment, id).await?)
    }

    /// Ends the holds whose executors stopped renewing them, until `stop`.
    pub async fn sweep(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(EXPIRY_SWEEP) => {}
            }
            let lapsed = match self.store.expire_work().await {
                Ok(l) => l,
                Err(e) => {
                    warn!(error = %e, "cannot check self-hosted work leases");
                    continue;
                }
            };
            for session in lapsed {
                info!(session = %session, "a self-hosted executor's lease lapsed; the session is disconnected");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> ContentBlock {
        ContentBlock::text(t)
    }

    #[test]
    fn executor_results_are_held_to_the_output_cap() {
        let note = |dropped: usize| {
            text(&format!("[output truncated: {dropped} more bytes were dropped (the cap is 10 bytes)]"))
        };
        let image = ContentBlock::Image {
            source: gateway_core::content::MediaSource::Url { url: "https://example.com/a.png".into() },
        };
        let image_len = serde_json::to_string(&image).unwrap().len();
        let cases: Vec<(&str, Vec<ContentBlock>, Vec<ContentBlock>)> = vec![
            ("under the cap: unchanged", vec![text("0123456789")], vec![text("0123456789")]),
            ("one text cut at the cap", vec![text("0123456789abc")], vec![text("0123456789"), note(3)]),
            ("the cap spans blocks", vec![text("012345"), text("6789ab")], vec![text("012345"), text("6789"), note(2)]),
            ("counted as JSON: a newline is two bytes", vec![text("\n\n\n\n\n\n")], vec![text("\n\n\n\n\n"), note(2)]),
            (
                "a block that does not fit whole is dropped",
                vec![text("01"), image.clone()],
                vec![text("01"), note(image_len)],
            ),
            ("nothing left for later blocks", vec![text("0123456789"), text("x")], vec![text("0123456789"), note(1)]),
            ("empty stays empty", vec![], vec![]),
        ];
        for (case, input, expected) in cases {
            assert_eq!(cap_result(input, 10), expected, "{case}");
        }
        let huge = cap_result(vec![text(&"x".repeat(30 << 20))], 100_000);
        assert_eq!(huge[0], text(&"x".repeat(100_000)), "a 30 MiB result keeps the cap");
    }
}
