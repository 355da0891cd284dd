//! Property tests (issue 13) of the SSE encoder: whatever an event holds (newlines, `\r`,
//! NULs, any unicode), a client parsing by the WHATWG rules gets back exactly the frames sent.
//! Seeded: `PROPTEST_RNG_SEED` overrides the fixed seed; `PROPTEST_CASES=5000 cargo nextest
//! run -p gateway-managed-agents props` for a longer run.
#![allow(clippy::unwrap_used)]

use gateway_core::EventId;
use gateway_runtime::Preview;
use proptest::prelude::*;
use serde_json::Value;

use super::{frame, preview_frame};

const SEED: u64 = 0x7373_655f_7072_6f70;

fn config() -> proptest::test_runner::Config {
    crate::props::config(SEED, 512)
}

/// One dispatched SSE event as a browser's `EventSource` sees it.
#[derive(Debug, Clone, PartialEq)]
struct Dispatched {
    event: String,
    data: String,
    last_event_id: String,
}

/// A stream parser written from the WHATWG "interpret an event stream" rules: lines end at
/// CRLF, LF or CR; a blank line dispatches; `:` starts a comment; one space after the colon is
/// dropped; `data` lines are joined with LF; an event with no data is not dispatched.
fn parse(stream: &str) -> Vec<Dispatched> {
    let mut out = Vec::new();
    let (mut event, mut data, mut last_id) = (String::new(), String::new(), String::new());
    let mut lines = Vec::new();
    let mut rest = stream;
    while let Some(i) = rest.find(['\r', '\n']) {
        lines.push(&rest[..i]);
        let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[i + skip..];
    }
    // What follows the last line end is an incomplete line, ignored.
    for line in lines {
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                let event = if event.is_empty() { "message".to_owned() } else { std::mem::take(&mut event) };
                out.push(Dispatched { event, data: std::mem::take(&mut data), last_event_id: last_id.clone() });
            }
            event.clear();
            data.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "event" => event = value.to_owned(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "id" if !value.contains('\0') => last_id = value.to_owned(),
            _ => {}
        }
    }
    out
}

/// Text rich in what breaks framing.
fn hostile_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => any::<char>(),
            2 => Just('\n'),
            2 => Just('\r'),
            1 => Just('\0'),
            1 => Just('\u{2028}'),
            1 => Just(':'),
        ],
        0..60,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

fn json() -> impl Strategy<Value = Value> {
    crate::props::json(hostile_text, 48, 6)
}

/// An event type as the projection names them: dotted lowercase words.
fn event_type() -> impl Strategy<Value = String> {
    "[a-z_]{1,12}(\\.[a-z_]{1,16})?"
}

proptest! {
    #![proptest_config(config())]

    /// A stream of frames and keep-alives parses back to the events sent, in order, each with
    /// its type, its id (a frame without one keeps the last) and its data equal to the value.
    #[test]
    fn frames_round_trip_through_a_whatwg_parser(
        frames in prop::collection::vec((event_type(), any::<bool>(), json()), 1..6),
        keep_alive_after in prop::collection::vec(any::<bool>(), 6),
    ) {
        let mut stream = String::new();
        let mut expected = Vec::new();
        let mut last_id = String::new();
        for (i, (t, with_id, data)) in frames.iter().enumerate() {
            let id = with_id.then(|| EventId::new().as_str().to_owned());
            if let Some(id) = &id {
                last_id = id.clone();
            }
            stream.push_str(std::str::from_utf8(&frame(t, id.as_deref(), data)).unwrap());
            if keep_alive_after[i] {
                stream.push_str(": keep-alive\n\n");
            }
            expected.push((t.clone(), last_id.clone(), data.clone()));
        }
        let got = parse(&stream);
        prop_assert_eq!(got.len(), expected.len(), "stream {:?}", stream);
        for (d, (t, id, data)) in got.into_iter().zip(expected) {
            prop_assert_eq!(d.event, t);
            prop_assert_eq!(d.last_event_id, id);
            prop_assert!(!d.data.contains('\n'), "one data line per frame");
            prop_assert_eq!(serde_json::from_str::<Value>(&d.data).unwrap(), data);
        }
    }

    /// A text preview carries any text exactly.
    #[test]
    fn text_deltas_round_trip(text in hostile_text(), index in 0..1000usize) {
        let p = Preview::TextDelta { event_id: EventId::new(), index, text: text.clone() };
        let bytes = preview_frame(&p, &["agent.message"]).unwrap();
        let got = parse(std::str::from_utf8(&bytes).unwrap());
        prop_assert_eq!(got.len(), 1);
        prop_assert_eq!(&got[0].event, "event_delta");
        let v: Value = serde_json::from_str(&got[0].data).unwrap();
        prop_assert_eq!(&v["delta"]["content"]["text"], &Value::String(text));
        prop_assert_eq!(&v["delta"]["index"], &Value::from(index));
    }
}
