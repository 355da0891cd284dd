//! A Managed Agents write workload for fault tests: concurrent clients that create sessions
//! and send each a user message, recording what the gateway acknowledged and how it refused.
//! A fault test then checks that every acknowledged write survived, and that no refusal was
//! one the protocol does not allow.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

/// The agent and environment the workload's sessions use (created once per database).
#[derive(Clone)]
pub struct Workload {
    pub agent: String,
    pub environment: String,
}

/// What the clients saw.
#[derive(Debug, Default)]
pub struct Record {
    /// Sessions created with a 2xx answer.
    pub sessions: Vec<String>,
    /// Events (`(session, event id)`) accepted with a 2xx answer.
    pub events: Vec<(String, String)>,
    /// Allowed refusals by status: 503 with `retry-after`, 529 (busy).
    pub refusals: BTreeMap<u16, usize>,
    /// Requests without an answer: the connection failed (a killed gateway).
    pub unanswered: usize,
    /// Requests still unanswered after the client's timeout: a hang.
    pub timeouts: usize,
    /// Answers the protocol does not allow here (a 500, a 503 without `retry-after`, ...).
    pub violations: Vec<String>,
}

impl Record {
    pub fn acknowledged(&self) -> usize {
        self.sessions.len() + self.events.len()
    }

    pub fn merge(&mut self, other: Record) {
        self.sessions.extend(other.sessions);
        self.events.extend(other.events);
        for (status, n) in other.refusals {
            *self.refusals.entry(status).or_default() += n;
        }
        self.unanswered += other.unanswered;
        self.timeouts += other.timeouts;
        self.violations.extend(other.violations);
    }

    /// The acknowledged writes missing from what the database holds.
    pub fn missing(
        &self,
        sessions: &std::collections::HashSet<String>,
        events: &std::collections::HashSet<String>,
    ) -> Vec<String> {
        let lost_sessions = self.sessions.iter().filter(|s| !sessions.contains(*s)).map(|s| format!("session {s}"));
        let lost_events =
            self.events.iter().filter(|(_, e)| !events.contains(e)).map(|(s, e)| format!("event {e} of {s}"));
        lost_sessions.chain(lost_events).collect()
    }
}

/// How one request ended.
pub enum Outcome {
    Acked(Value),
    Refused(u16),
    Unanswered,
    TimedOut,
    Violation(String),
}

/// Sends `request` and classifies its answer: 2xx acknowledged; 503 with `retry-after` and
/// 529 are the refusals a client is told to retry; anything else 5xx is a violation.
pub async fn classify(request: reqwest::RequestBuilder, what: &str) -> Outcome {
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Outcome::TimedOut,
        Err(_) => return Outcome::Unanswered,
    };
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = match response.bytes().await {
        Ok(b) => b,
        Err(e) if e.is_timeout() => return Outcome::TimedOut,
        Err(_) => return Outcome::Unanswered,
    };
    match status {
        200..=299 => match serde_json::from_slice(&body) {
            Ok(v) => Outcome::Acked(v),
            Err(e) => Outcome::Violation(format!("{what}: {status} with a body that is not JSON: {e}")),
        },
        503 | 529 if retry_after.as_deref().and_then(|s| s.parse::<u64>().ok()).is_some() => Outcome::Refused(status),
        _ => Outcome::Violation(format!(
            "{what}: {status} (retry-after {retry_after:?}): {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )),
    }
}

impl Workload {
    /// Creates the agent and environment through the API.
    pub async fn setup(http: &reqwest::Client, base: &str) -> Self {
        let create = |path: &'static str, body: Value| async move {
            let r = http.post(format!("{base}{path}")).json(&body).send().await.expect("create");
            assert_eq!(r.status().as_u16(), 200, "{path}");
            r.json::<Value>().await.expect("json")["id"].as_str().expect("id").to_owned()
        };
        let agent = create("/v1/agents", json!({"name": "faults", "model": "claude-sonnet-4-6"})).await;
        let environment = create("/v1/environments", json!({"name": "faults", "config": {"type": "cloud"}})).await;
        Self { agent, environment }
    }

    /// One client step: create a session, then send it a user message; both recorded.
    pub async fn step(&self, http: &reqwest::Client, base: &str, timeout: Duration, record: &mut Record) {
        let create = http
            .post(format!("{base}/v1/sessions"))
            .timeout(timeout)
            .json(&json!({"agent": self.agent, "environment_id": self.environment}));
        let Some(session) =
            note(classify(create, "create session").await, record).and_then(|v| v["id"].as_str().map(str::to_owned))
        else {
            return;
        };
        record.sessions.push(session.clone());
        let message = json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": "hello"}]}]});
        let send = http.post(format!("{base}/v1/sessions/{session}/events")).timeout(timeout).json(&message);
        if let Some(v) = note(classify(send, "send event").await, record) {
            for e in v["data"].as_array().into_iter().flatten() {
                if let Some(id) = e["id"].as_str() {
                    record.events.push((session.clone(), id.to_owned()));
                }
            }
        }
    }
}

/// Records a non-acknowledgement; the body of an acknowledgement.
fn note(outcome: Outcome, record: &mut Record) -> Option<Value> {
    match outcome {
        Outcome::Acked(v) => return Some(v),
        Outcome::Refused(status) => *record.refusals.entry(status).or_default() += 1,
        Outcome::Unanswered => record.unanswered += 1,
        Outcome::TimedOut => record.timeouts += 1,
        Outcome::Violation(v) => record.violations.push(v),
    }
    None
}

/// Clients running the workload against one gateway until stopped.
pub struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    clients: Vec<tokio::task::JoinHandle<Record>>,
}

impl Load {
    /// Starts `clients` clients against `base` (`http://host:port`); each request may take
    /// up to `timeout` before it counts as a hang.
    pub fn start(workload: &Workload, base: &str, clients: usize, timeout: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let http = reqwest::Client::new();
        let clients = (0..clients)
            .map(|_| {
                let (w, http, base, stop, acked) =
                    (workload.clone(), http.clone(), base.to_owned(), stop.clone(), acked.clone());
                tokio::spawn(async move {
                    let mut record = Record::default();
                    while !stop.load(Ordering::Relaxed) {
                        let before = record.acknowledged();
                        w.step(&http, &base, timeout, &mut record).await;
                        acked.fetch_add(record.acknowledged() - before, Ordering::Relaxed);
                        if record.acknowledged() == before {
                            // Refused or unanswered: do not spin on a dead or refusing gateway.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    record
                })
            })
            .collect();
        Self { stop, acked, clients }
    }

    /// Writes acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::Relaxed)
    }

    /// Stops the clients after their current request; what they saw.
    pub async fn stop(self) -> Record {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Record::default();
        for c in self.clients {
            all.merge(c.await.expect("client task"));
        }
        all
    }
}
