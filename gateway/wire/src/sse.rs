//! Server-sent events (`text/event-stream`): the one decoder every client reads a stream
//! with, and the encoder rules every server writes one with.
//!
//! Decoding follows the WHATWG rules that matter to a client: lines end with `\n`, `\r\n` or
//! `\r`; `:` starts a comment; `field: value` loses one leading space; several `data:` lines
//! join with `\n`; a blank line dispatches an event that had a `data` field; an event cut off
//! by the end of the stream is dropped. Network chunks split lines (and `\r\n` pairs and UTF-8
//! sequences) anywhere, so the decoder works on bytes and keeps the unfinished line and event
//! between [`Decoder::feed`] calls, scanning each byte once. One bound covers the line being
//! read plus the data gathered so far, so a server cannot make a client buffer without limit,
//! whether it sends one endless line or endless `data:` lines.

use std::collections::VecDeque;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Serialize;

/// The media type of an event stream (`Content-Type`, and what a client `Accept`s).
pub const MEDIA_TYPE: &str = "text/event-stream";

/// A comment frame a server sends on an idle stream so that proxies and clients do not take
/// the silence for a dead connection; decoders skip it.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field, or `message` when the event had none.
    pub event: String,
    pub data: String,
}

/// The stream held a line, or an event, larger than the decoder accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event of the stream exceeds {limit} bytes")]
pub struct TooLarge {
    pub limit: usize,
}

/// An incremental decoder. After it returns [`TooLarge`] its state is unspecified: the
/// caller stops reading the stream.
#[derive(Debug)]
pub struct Decoder {
    limit: usize,
    /// The unfinished line.
    line: Vec<u8>,
    /// The previous byte was a `\r`, so a `\n` right after it ends nothing.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl Decoder {
    /// A decoder that holds at most `limit` bytes of one event (its data plus the line being
    /// read).
    pub fn new(limit: usize) -> Self {
        Self { limit, line: Vec::new(), after_cr: false, event: String::new(), data: String::new(), has_data: false }
    }

    /// Decodes `bytes`, appending every event they complete to `out`. Events completed before
    /// the bound is passed are in `out` when the error is returned.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<Event>) -> Result<(), TooLarge> {
        while !bytes.is_empty() {
            if std::mem::take(&mut self.after_cr) && bytes[0] == b'\n' {
                bytes = &bytes[1..];
                continue;
            }
            let end = bytes.iter().position(|&b| b == b'\n' || b == b'\r');
            let part = &bytes[..end.unwrap_or(bytes.len())];
            if self.line.len() + part.len() + self.data.len() > self.limit {
                return Err(TooLarge { limit: self.limit });
            }
            self.line.extend_from_slice(part);
            let Some(end) = end else { break };
            self.after_cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            let line = std::mem::take(&mut self.line);
            self.line_ended(&line, out);
            // Keep the line's allocation for the next one.
            self.line = line;
            self.line.clear();
        }
        Ok(())
    }

    fn line_ended(&mut self, line: &[u8], out: &mut Vec<Event>) {
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                let event = if self.event.is_empty() { "message".to_owned() } else { std::mem::take(&mut self.event) };
                out.push(Event { event, data: std::mem::take(&mut self.data) });
            }
            self.event.clear();
            self.data.clear();
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => (&line[..c], line[c + 1..].strip_prefix(b" ").unwrap_or(&line[c + 1..])),
            None => (line, &[][..]),
        };
        match field {
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            b"data" => {
                if std::mem::replace(&mut self.has_data, true) {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(value));
            }
            // `id` and `retry` only matter to reconnecting clients, and unknown fields are ignored.
            _ => {}
        }
    }
}

/// Why a decoded stream ended early.
#[derive(Debug, thiserror::Error)]
pub enum Error<E> {
    /// The byte stream failed.
    #[error(transparent)]
    Transport(E),
    #[error(transparent)]
    TooLarge(TooLarge),
}

/// The events of a byte stream, each bounded by `limit`. The stream ends at the first error
/// (after the events decoded before it), or when the bytes end.
pub fn decode<B, E>(
    chunks: impl Stream<Item = Result<B, E>> + Send + 'static,
    limit: usize,
) -> impl Stream<Item = Result<Event, Error<E>>> + Send
where
    B: AsRef<[u8]>,
    E: Send,
{
    struct State<S, E> {
        chunks: std::pin::Pin<Box<S>>,
        decoder: Decoder,
        ready: VecDeque<Result<Event, Error<E>>>,
        batch: Vec<Event>,
        done: bool,
    }
    let state = State {
        chunks: Box::pin(chunks),
        decoder: Decoder::new(limit),
        ready: VecDeque::new(),
        batch: Vec::new(),
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.ready.pop_front() {
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            match st.chunks.next().await {
                None => return None,
                Some(Err(e)) => {
                    st.ready.push_back(Err(Error::Transport(e)));
                    st.done = true;
                }
                Some(Ok(chunk)) => {
                    let fed = st.decoder.feed(chunk.as_ref(), &mut st.batch);
                    st.ready.extend(st.batch.drain(..).map(Ok));
                    if let Err(too) = fed {
                        st.ready.push_back(Err(Error::TooLarge(too)));
                        st.done = true;
                    }
                }
            }
        }
    })
}

/// The `id:` and `event:` lines a frame starts with (names of ours, which must hold no line
/// break).
fn head(buf: &mut Vec<u8>, id: Option<&str>, event: Option<&str>, data_len: usize) {
    debug_assert!(!event.is_some_and(|e| e.contains(['\r', '\n'])) && !id.is_some_and(|i| i.contains(['\r', '\n'])));
    buf.reserve(data_len + 64);
    if let Some(id) = id {
        buf.extend_from_slice(b"id: ");
        buf.extend_from_slice(id.as_bytes());
        buf.push(b'\n');
    }
    if let Some(event) = event {
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(event.as_bytes());
        buf.push(b'\n');
    }
}

/// One frame: an optional `id` and `event` and `data`, one `data:` line per line of it, so no
/// payload can end the frame early.
pub fn frame(id: Option<&str>, event: Option<&str>, data: &str) -> Bytes {
    let mut buf = Vec::new();
    head(&mut buf, id, event, data.len());
    let mut rest = data.as_bytes();
    loop {
        let end = rest.iter().position(|&b| b == b'\r' || b == b'\n');
        buf.extend_from_slice(b"data: ");
        buf.extend_from_slice(&rest[..end.unwrap_or(rest.len())]);
        buf.push(b'\n');
        let Some(end) = end else { break };
        let skip = if rest[end..].starts_with(b"\r\n") { 2 } else { 1 };
        rest = &rest[end + skip..];
    }
    buf.push(b'\n');
    Bytes::from(buf)
}

/// A frame whose data is `value` as compact JSON. Compact JSON escapes every CR and LF inside
/// strings and has no whitespace between tokens, so it is always one `data:` line: it is
/// written straight into the frame, with no second pass over it (a stream's frames are its
/// hottest path).
pub fn json_frame(id: Option<&str>, event: Option<&str>, value: &impl Serialize) -> Bytes {
    let mut buf = Vec::new();
    head(&mut buf, id, event, 128);
    buf.extend_from_slice(b"data: ");
    let start = buf.len();
    // Serializing fails only for maps with non-string keys, which no caller has; such a
    // value is sent as `null` rather than breaking the stream.
    if serde_json::to_writer(&mut buf, value).is_err() {
        buf.truncate(start);
        buf.extend_from_slice(b"null");
    }
    debug_assert!(!buf[start..].contains(&b'\n') && !buf[start..].contains(&b'\r'));
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &str, piece: usize) -> Vec<Event> {
        let mut decoder = Decoder::new(1024);
        let mut out = Vec::new();
        for chunk in input.as_bytes().chunks(piece) {
            decoder.feed(chunk, &mut out).expect("within the bound");
        }
        out
    }

    fn ev(event: &str, data: &str) -> Event {
        Event { event: event.into(), data: data.into() }
    }

    #[test]
    fn events_survive_any_chunking_and_line_ending() {
        let input =
            "event: a\ndata: 1\n\n: comment\r\nevent:b\r\ndata:x\r\ndata: y\r\n\r\ndata: é🌍\r\revent: c\rdata\r\r";
        let expected = vec![ev("a", "1"), ev("b", "x\ny"), ev("message", "é🌍"), ev("c", "")];
        for piece in 1..input.len() {
            assert_eq!(decode_in_pieces(input, piece), expected, "piece size {piece}");
        }
    }

    #[test]
    fn the_earliest_blank_line_ends_an_event_whatever_the_line_endings() {
        assert_eq!(decode_in_pieces("data: a\r\n\r\ndata: b\n\n", 64), vec![ev("message", "a"), ev("message", "b")]);
        assert_eq!(decode_in_pieces("data: a\r\rdata: b\r\n\r\n", 1), vec![ev("message", "a"), ev("message", "b")]);
    }

    #[test]
    fn blank_lines_without_data_dispatch_nothing_and_reset_the_event_name() {
        assert_eq!(decode_in_pieces("event: ping\n\ndata: z\n\n", 4), vec![ev("message", "z")]);
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        assert_eq!(decode_in_pieces("event: a\ndata: 1\n", 3), vec![]);
    }

    #[test]
    fn only_one_leading_space_is_stripped_and_unknown_fields_ignored() {
        assert_eq!(decode_in_pieces("id: 7\nretry: 10\nfoo: bar\ndata:  two\n\n", 5), vec![ev("message", " two")]);
    }

    #[test]
    fn one_bound_covers_the_line_and_the_data_and_earlier_events_come_first() {
        let mut out = Vec::new();
        assert_eq!(Decoder::new(16).feed(&[b'x'; 17], &mut out), Err(TooLarge { limit: 16 }));

        let mut decoder = Decoder::new(16);
        assert!(decoder.feed(b"data: 0123456789\n", &mut out).is_ok());
        assert_eq!(decoder.feed(b"data: 0123456789\n", &mut out), Err(TooLarge { limit: 16 }));

        let mut decoder = Decoder::new(16);
        let mut out = Vec::new();
        assert_eq!(decoder.feed(b"data: 1\n\ndata: 0123456789abcdef\n", &mut out), Err(TooLarge { limit: 16 }));
        assert_eq!(out, vec![ev("message", "1")]);
    }

    fn ok(s: &'static str) -> Result<&'static [u8], &'static str> {
        Ok(s.as_bytes())
    }

    #[tokio::test]
    async fn a_stream_yields_its_events_then_its_error_and_drops_a_cut_off_event() {
        let chunks = vec![ok("data: 1\n\ndata: 2"), ok("\n")];
        let got: Vec<_> = decode(futures::stream::iter(chunks), 64).collect().await;
        assert_eq!(
            got.into_iter().map(|r| r.map_err(|e| e.to_string())).collect::<Vec<_>>(),
            vec![Ok(ev("message", "1"))]
        );

        let chunks = vec![ok("data: 1\n\ndata: 0123456789abcdef"), ok("data: 3\n\n")];
        let got: Vec<_> =
            decode(futures::stream::iter(chunks), 16).map(|r| r.map_err(|e| e.to_string())).collect().await;
        assert_eq!(got, vec![Ok(ev("message", "1")), Err("an event of the stream exceeds 16 bytes".to_owned())]);

        let chunks = vec![ok("data: 1\n\n"), Err("reset"), ok("data: 2\n\n")];
        let got: Vec<_> =
            decode(futures::stream::iter(chunks), 16).map(|r| r.map_err(|e| e.to_string())).collect().await;
        assert_eq!(got, vec![Ok(ev("message", "1")), Err("reset".to_owned())]);
    }

    #[test]
    fn frames_are_written_one_data_line_per_line() {
        assert_eq!(&frame(None, None, "{}")[..], b"data: {}\n\n");
        assert_eq!(
            &frame(Some("e1"), Some("x.y"), "a\nb\r\nc\rd")[..],
            b"id: e1\nevent: x.y\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
        );
        assert_eq!(
            &json_frame(None, Some("t"), &serde_json::json!({"s": "a\nb"}))[..],
            b"event: t\ndata: {\"s\":\"a\\nb\"}\n\n"
        );
    }
}
