//! (f) Previews across processes, PostgreSQL only: two `gateway serve` processes, A and B, on
//! one database and one data directory (one host, so neither refuses to start). Each trial
//! creates a session, opens a stream asking for `agent.message` previews on A and one on B,
//! and sends the message to B, whose admission then runs the turn: B's subscriber gets the
//! deltas from B's own memory, A's through PostgreSQL `NOTIFY`. What crossing processes adds
//! is A's arrival time minus B's, delta by delta. The fake model's `drip:<ms> <words>` answers
//! one word per chunk, so each delta is a distinct word and deltas match by their text.
//!
//! Trials run one after another: the figure is the latency the relay adds, not what happens
//! under load. A process announces its subscribers' interest when they subscribe; a trial
//! waits [`INTEREST_SETTLE`] after both streams' headers so the announcement has arrived
//! before the turn starts (otherwise early deltas could be missed for a reason this measure is
//! not about).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::info;

use super::Ctx;
use crate::driver::clients::OpError;
use crate::driver::clients::ma::{self, EventStream, Frame, MaClient};
use crate::driver::engine::{Database, Engine};
use crate::driver::error::Result;
use crate::driver::results::PreviewResults;
use crate::driver::stats::Latencies;
use crate::driver::targets::{self, Publish};

/// Between both streams' headers and the message: time for A's interest to reach B.
const INTEREST_SETTLE: Duration = Duration::from_millis(50);
/// Trials run before measuring (connection pools, listeners and caches warm up).
const WARMUP_TRIALS: usize = 2;
/// Longest one trial may take; a turn of the plan's words and pauses is well under a second.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// What one subscriber saw of a turn, with arrival times.
#[derive(Debug, Default)]
pub struct Arrivals {
    /// `(event id, text, arrival)` of each delta, in order.
    pub deltas: Vec<(String, String, Instant)>,
    /// `(event id, arrival)` of the first committed `agent.message`.
    pub message: Option<(String, Instant)>,
}

/// One trial's figures.
#[derive(Debug, Default, PartialEq)]
pub struct Matched {
    /// Arrival at A minus arrival at B, per delta both received (zero when A's came first).
    pub added: Vec<Duration>,
    /// Deltas B received, and how many of them A received too.
    pub local: u64,
    pub relayed: u64,
    /// How long before the committed message A's first delta of it came; `None` when it did
    /// not come first (or not at all).
    pub lead: Option<Duration>,
}

/// Matches A's deltas to B's by event id and text: the k-th delta with a given text in an
/// event at A is the k-th such delta at B. A delta A missed then leaves the others matched,
/// which matching by position alone would not.
pub fn match_arrivals(relayed: &Arrivals, local: &Arrivals) -> Matched {
    let mut at_b: BTreeMap<(&str, &str), Vec<Instant>> = BTreeMap::new();
    for (event, text, at) in &local.deltas {
        at_b.entry((event, text)).or_default().push(*at);
    }
    let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut m = Matched { local: local.deltas.len() as u64, ..Matched::default() };
    for (event, text, at) in &relayed.deltas {
        let k = seen.entry((event, text)).or_default();
        if let Some(b) = at_b.get(&(event.as_str(), text.as_str())).and_then(|v| v.get(*k)) {
            m.added.push(at.saturating_duration_since(*b));
            m.relayed += 1;
        }
        *k += 1;
    }
    m.lead = relayed.message.as_ref().and_then(|(id, committed)| {
        let first = relayed.deltas.iter().find(|(event, ..)| event == id)?.2;
        (first < *committed).then(|| *committed - first)
    });
    m
}

/// The fake model's command for `words` deltas `pause` apart: `drip:20 w1 w2 …`.
fn drip_text(pause: Duration, words: usize) -> String {
    let said: Vec<String> = (1..=words).map(|i| format!("w{i}")).collect();
    format!("drip:{} {}", pause.as_millis(), said.join(" "))
}

/// Reads `stream` to `session.status_idle`, timing each delta and the committed message.
async fn watch(mut stream: EventStream) -> Result<Arrivals, OpError> {
    let mut seen = Arrivals::default();
    loop {
        let frame = stream.next_frame().await?;
        let at = Instant::now();
        match frame {
            Frame::Delta { event_id, text } => seen.deltas.push((event_id, text, at)),
            Frame::Start { .. } => {}
            Frame::Event { kind, id } => match kind.as_str() {
                "agent.message" => {
                    seen.message.get_or_insert((id, at));
                }
                "session.status_idle" => return Ok(seen),
                "session.error" | "session.status_terminated" | "error" => {
                    return Err(OpError::answered(kind, id));
                }
                _ => {}
            },
        }
    }
}

/// `e` with the subscriber it happened to in its label (`A: stream silent`).
fn at(side: &str, e: OpError) -> OpError {
    match e {
        OpError::Answered { label, detail } => OpError::Answered { label: format!("{side}: {label}"), detail },
        OpError::Transport { label, detail } => OpError::Transport { label: format!("{side}: {label}"), detail },
    }
}

/// One turn: a fresh session, a previews stream on each process, the message to B.
async fn trial(a: &MaClient, b: &MaClient, text: &str) -> Result<Matched, OpError> {
    let session = b.create_session().await?;
    let (on_a, on_b) = tokio::try_join!(async { a.open_previews(&session).await.map_err(|e| at("A", e)) }, async {
        b.open_previews(&session).await.map_err(|e| at("B", e))
    },)?;
    tokio::time::sleep(INTEREST_SETTLE).await;
    // A task per subscriber, so neither reader's arrival times wait on the other's work;
    // dropping the set (an error below) aborts both.
    let mut watchers = JoinSet::new();
    for (side, stream) in [("A", on_a), ("B", on_b)] {
        watchers.spawn(async move { (side, watch(stream).await.map_err(|e| at(side, e))) });
    }
    b.send(&session, text).await?;
    let (mut relayed, mut local) = (None, None);
    while let Some(joined) = watchers.join_next().await {
        let (side, seen) = joined.map_err(|e| OpError::transport("watcher failed", e))?;
        if side == "A" {
            relayed = Some(seen?);
        } else {
            local = Some(seen?);
        }
    }
    match (relayed, local) {
        (Some(relayed), Some(local)) => Ok(match_arrivals(&relayed, &local)),
        _ => Err(OpError::transport("watcher failed", "a subscriber's reader did not report")),
    }
}

pub async fn run(ctx: &Ctx) -> Result<PreviewResults> {
    let dir = ctx.dir(Engine::Postgres, "previews")?;
    let db = Database::fresh(Engine::Postgres, &dir, &ctx.pg_url).await?;
    let result = run_on(ctx, &dir, &db).await;
    db.drop().await;
    result
}

async fn run_on(ctx: &Ctx, dir: &Path, db: &Database) -> Result<PreviewResults> {
    let plan = &ctx.plan;
    let data = dir.join("data");
    let publish = Publish::default();
    let a = targets::gateway_serve_with_data_dir(&ctx.bins, &ctx.http, &dir.join("a"), db, &publish, &data).await?;
    let b = targets::gateway_serve_with_data_dir(&ctx.bins, &ctx.http, &dir.join("b"), db, &publish, &data).await?;
    let client_a = MaClient::setup(ctx.http.clone(), &a.base, &ma::echo_agent()).await?;
    let client_b = client_a.on(&b.base);
    let text = drip_text(plan.preview_drip, plan.preview_words);
    let mut r = PreviewResults {
        engine: Some(Engine::Postgres),
        trials_wanted: plan.preview_trials as u64,
        words: plan.preview_words as u64,
        drip_ms: plan.preview_drip.as_millis() as u64,
        ..PreviewResults::default()
    };
    let (mut added, mut lead) = (Latencies::default(), Latencies::default());
    info!(trials = plan.preview_trials, text, "(f) turns run by B, streamed on A and B");
    for i in 0..WARMUP_TRIALS + plan.preview_trials {
        let outcome = tokio::time::timeout(TRIAL_TIMEOUT, trial(&client_a, &client_b, &text))
            .await
            .unwrap_or_else(|_| Err(OpError::transport("timeout", format!("a trial took over {TRIAL_TIMEOUT:?}"))));
        if i < WARMUP_TRIALS {
            continue;
        }
        match outcome {
            Ok(m) => {
                r.trials += 1;
                r.deltas_local += m.local;
                r.deltas_relayed += m.relayed;
                for d in m.added {
                    added.record(d);
                }
                if let Some(l) = m.lead {
                    lead.record(l);
                    r.early_trials += 1;
                }
            }
            Err(e) => {
                let n = r.errors.entry(e.label().to_owned()).or_default();
                if *n == 0 {
                    r.notes.push(format!("first trial that failed with {e}"));
                }
                *n += 1;
            }
        }
    }
    r.added = added.summary();
    r.lead = lead.summary();
    info!(
        trials = r.trials,
        added_p50_ms = format!("{:.2}", r.added.p50_ms),
        added_p99_ms = format!("{:.2}", r.added.p99_ms),
        relayed = r.deltas_relayed,
        local = r.deltas_local,
        lead_p50_ms = format!("{:.1}", r.lead.p50_ms),
        "(f) previews"
    );
    a.stop().await;
    b.stop().await;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrivals(t0: Instant, deltas: &[(&str, &str, u64)], message: Option<(&str, u64)>) -> Arrivals {
        let ms = Duration::from_millis;
        Arrivals {
            deltas: deltas.iter().map(|(e, t, at)| ((*e).to_owned(), (*t).to_owned(), t0 + ms(*at))).collect(),
            message: message.map(|(e, at)| (e.to_owned(), t0 + ms(at))),
        }
    }

    #[test]
    fn deltas_match_by_event_and_text() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let local = arrivals(t0, &[("e1", "a", 10), ("e1", " b", 30), ("e1", " b", 50), ("e1", " c", 70)], None);
        let want =
            |added: Vec<Duration>, relayed: u64, lead: Option<Duration>| Matched { added, local: 4, relayed, lead };
        // A's deltas and committed message → what they match to.
        type Row<'a> = (&'a [(&'a str, &'a str, u64)], Option<(&'a str, u64)>, Matched);
        let rows: [Row; 5] = [
            // Every delta, 2 ms later; the message 100 ms after the first.
            (
                &[("e1", "a", 12), ("e1", " b", 32), ("e1", " b", 52), ("e1", " c", 72)],
                Some(("e1", 112)),
                want(vec![ms(2); 4], 4, Some(ms(100))),
            ),
            // The first delta missed: the others still match theirs.
            (
                &[("e1", " b", 33), ("e1", " b", 53), ("e1", " c", 73)],
                Some(("e1", 90)),
                want(vec![ms(3); 3], 3, Some(ms(57))),
            ),
            // A delta at A before B's counts as nothing added.
            (&[("e1", "a", 8)], None, want(vec![ms(0)], 1, None)),
            // Another event's deltas match nothing, and a first delta after the message is no lead.
            (&[("e2", "a", 12), ("e1", "a", 40)], Some(("e1", 30)), want(vec![ms(30)], 1, None)),
            // Nothing relayed.
            (&[], Some(("e1", 90)), want(vec![], 0, None)),
        ];
        for (relayed, message, expected) in rows {
            assert_eq!(match_arrivals(&arrivals(t0, relayed, message), &local), expected, "{relayed:?}");
        }
    }

    #[test]
    fn the_drip_command_names_each_word() {
        assert_eq!(drip_text(Duration::from_millis(20), 3), "drip:20 w1 w2 w3");
    }
}
