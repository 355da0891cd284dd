//! Property tests (issue 13) of what a JSON-RPC peer reads from the network: the line framer and the
//! JSON-RPC envelope. Seeded and reproducible: [`SEED`] unless `PROPTEST_RNG_SEED` is set;
//! `PROPTEST_CASES=5000 cargo nextest run -p gateway-wire wire_props` for a longer run.
#![allow(clippy::unwrap_used)]

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use gateway_wire::jsonrpc::framing::{Inbound, next_line};
use gateway_wire::jsonrpc::{Frame, Handler, Peer, PeerOptions, Reply};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, contextualize_config};
use serde_json::Value;
use tokio::io::{AsyncRead, BufReader, ReadBuf};
use tokio::sync::mpsc;

const SEED: u64 = 0x6163_7077_6972_6513;

fn config(cases: u32) -> Config {
    contextualize_config(Config {
        cases,
        rng_seed: RngSeed::Fixed(SEED),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Hands out its bytes in the given chunk sizes, one chunk per read: a network that splits
/// messages anywhere.
struct Chunked {
    bytes: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
    next: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let size = self.sizes.get(self.next % self.sizes.len().max(1)).copied().unwrap_or(1).max(1);
        self.next += 1;
        let end = (self.at + size).min(self.bytes.len()).min(self.at + buf.remaining());
        let at = self.at;
        buf.put_slice(&self.bytes[at..end]);
        self.at = end;
        Poll::Ready(Ok(()))
    }
}

/// What the framer yields for `bytes`, read in chunks of `sizes` through a buffer of `cap`.
fn frame_all(bytes: &[u8], sizes: Vec<usize>, cap: usize, max: usize) -> Vec<Inbound> {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let mut r = BufReader::with_capacity(cap, Chunked { bytes: bytes.to_vec(), at: 0, sizes, next: 0 });
        let mut out = Vec::new();
        while let Some(l) = next_line(&mut r, max).await.unwrap() {
            out.push(l);
        }
        out
    })
}

/// The framing rule, stated on the whole input at once: a message is what lies between two
/// `\n` (the last one may end at EOF; nothing after a final `\n` is a message); one `\r`
/// before its `\n` is dropped; invalid UTF-8 becomes U+FFFD; a message of more than `max`
/// bytes (its `\r` counted) is `TooLong` with its length.
fn reference(bytes: &[u8], max: usize) -> Vec<Inbound> {
    let mut parts: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let last = parts.pop().unwrap_or_default();
    let mut out: Vec<Inbound> = parts
        .into_iter()
        .map(|p| match p.len() {
            n if n > max => Inbound::TooLong(n),
            _ => Inbound::Line(String::from_utf8_lossy(p.strip_suffix(b"\r").unwrap_or(p)).into_owned()),
        })
        .collect();
    match last.len() {
        0 => {}
        n if n > max => out.push(Inbound::TooLong(n)),
        _ => out.push(Inbound::Line(String::from_utf8_lossy(last).into_owned())),
    }
    out
}

/// Bytes rich in what breaks framers: newlines, carriage returns, NULs, invalid UTF-8.
fn hostile_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        3 => any::<u8>(),
        2 => Just(b'\n'),
        1 => Just(b'\r'),
        1 => Just(0u8),
        1 => Just(0xFFu8),
        1 => Just(0xC3u8),
    ];
    prop::collection::vec(byte, 0..300)
}

proptest! {
    #![proptest_config(config(1024))]

    /// Any bytes, split anywhere, read through any buffer size: the framer never panics and
    /// yields exactly what the rule says (so a line over the bound is `TooLong`, never cut).
    #[test]
    fn the_framer_follows_the_rule_however_the_bytes_are_split(
        bytes in hostile_bytes(),
        sizes in prop::collection::vec(1..40usize, 1..20),
        cap in 1..64usize,
        max in 0..80usize,
    ) {
        prop_assert_eq!(frame_all(&bytes, sizes, cap, max), reference(&bytes, max));
    }

    /// Messages (any text without a newline, within the bound) written one per line, `\n` or
    /// `\r\n`, and split anywhere come back as themselves, in order.
    #[test]
    fn messages_split_anywhere_decode_to_themselves(
        messages in prop::collection::vec("[^\n]{0,40}".prop_map(|s| s.trim_end_matches('\r').to_owned()), 0..12),
        crlf in any::<bool>(),
        sizes in prop::collection::vec(1..40usize, 1..20),
        cap in 1..64usize,
    ) {
        let end = if crlf { "\r\n" } else { "\n" };
        let wire: String = messages.iter().map(|m| format!("{m}{end}")).collect();
        let lines = frame_all(wire.as_bytes(), sizes, cap, 200);
        let expected: Vec<Inbound> = messages.into_iter().map(Inbound::Line).collect();
        prop_assert_eq!(lines, expected);
    }
}

/// Echoes each request's params.
struct Echo;

impl Handler for Echo {
    fn request(&self, _: &Peer, _: &str, params: Value) -> Reply {
        Box::pin(async move { Ok(params) })
    }
    fn notification(&self, _: &Peer, _: &str, _: Value) {}
}

/// Sends `lines` to a fresh peer and returns the `answers` frames it answers, as text, and
/// whether it sent anything more.
fn exchange(lines: Vec<String>, answers: usize) -> (Vec<String>, bool) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (tx, incoming) = mpsc::channel(lines.len().max(1));
        let (_peer, mut out, _task) = Peer::start("props", incoming, Arc::new(Echo), PeerOptions::default());
        for l in lines {
            tx.send(Inbound::Line(l)).await.unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..answers {
            let frame: Frame = tokio::time::timeout(Duration::from_secs(5), out.recv()).await.unwrap().unwrap();
            got.push(frame.text().to_owned());
        }
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        (got, out.try_recv().is_ok())
    })
}

/// The raw text of the `id` member of a JSON object line.
fn raw_id(line: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Id<'a> {
        #[serde(borrow)]
        id: &'a serde_json::value::RawValue,
    }
    serde_json::from_str::<Id>(line).unwrap().id.get().to_owned()
}

/// A JSON-RPC id: an integer of any size or any string.
fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        "-?[1-9][0-9]{19,60}",
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
    ]
}

proptest! {
    #![proptest_config(config(1024))]

    /// A request's id comes back in its answer exactly as it was sent.
    #[test]
    fn ids_round_trip_exactly(id in id(), params in any::<String>()) {
        let params = serde_json::to_string(&params).unwrap();
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":{params}}}"#);
        let answer = exchange(vec![line], 1).0.remove(0);
        prop_assert_eq!(raw_id(&answer), id, "answer {}", answer);
        let v: Value = serde_json::from_str(&answer).unwrap();
        prop_assert_eq!(v["result"].clone(), serde_json::from_str::<Value>(&params).unwrap());
    }

    /// Any line: the peer never panics, answers each non-blank line that is not a notification
    /// or a response with exactly one frame, and that frame is a JSON-RPC error or result on one line.
    #[test]
    fn any_line_gets_one_well_formed_answer(line in prop_oneof![
        any::<String>(),
        "\\{\"jsonrpc\":\"2.0\",(\"id\":(null|1|\"x\"|\\{\\}|\\[\\]|1.5|true),)?(\"method\":(\"echo\"|1|null),)?(\"params\":(1|\\[\\]|\\{\\}),)?(\"result\":1)?\\}",
    ]) {
        let line = line.replace('\n', " ");
        let v: Option<Value> = serde_json::from_str(&line).ok();
        // Unanswered: a notification, or a response (to no request of ours). `"id": null` is
        // an id: a request carrying it is answered.
        let silent = line.trim().is_empty() || v.as_ref().is_some_and(|v| {
            let id = v.get("id");
            let valid_id = id.is_none_or(|i| i.is_null() || i.is_string() || i.is_number());
            let message = match v.get("method") {
                Some(method) => method.is_string() && id.is_none(),
                None => id.is_some() && (v.get("error").is_some_and(|e| !e.is_null()) || v.get("result").is_some()),
            };
            valid_id && v.get("jsonrpc").and_then(Value::as_str) == Some("2.0") && message
        });
        // A probe after the line: the peer is still serving, and the answers are counted.
        let probe = r#"{"jsonrpc":"2.0","id":"probe","method":"echo"}"#.to_owned();
        let (frames, more) = exchange(vec![line.clone(), probe], if silent { 1 } else { 2 });
        prop_assert!(!more, "line {:?} got more than one answer", line);
        for f in &frames {
            prop_assert!(!f.contains('\n'));
            let v: Value = serde_json::from_str(f).unwrap();
            prop_assert_eq!(&v["jsonrpc"], "2.0");
            prop_assert!(v.get("result").is_some() != v.get("error").is_some(), "{}", f);
        }
        // The documented errors: -32700 for what is not JSON, -32600 for JSON that is not a message.
        let code = match &v {
            None if !line.trim().is_empty() => Some(-32700),
            Some(v) if !v.is_object() => Some(-32600),
            _ => None,
        };
        if let Some(code) = code {
            let answer: Value = serde_json::from_str(frames.iter().find(|f| raw_id(f) == "null").unwrap()).unwrap();
            prop_assert_eq!(&answer["error"]["code"], &Value::from(code), "line {:?}", line);
        }
        let probes = frames.iter().filter(|f| raw_id(f) == "\"probe\"").count();
        prop_assert_eq!(probes, 1, "line {:?} answered {:?}", line, frames);
    }
}
