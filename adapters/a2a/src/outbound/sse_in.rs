//! Reading a remote's SSE stream: bytes in, the `data` of each complete event out.
//!
//! Works on bytes, not text: a chunk boundary may split a multi-byte character (or a CRLF),
//! so text is decoded once per complete event. Lines end at CRLF, LF or CR (the SSE rule); an
//! event ends at the first blank line after it, whatever the line endings around it. Each
//! byte is scanned once: a partial line is remembered, not rescanned, when more bytes arrive.
//! Comments and fields other than `data` are ignored; multi-line `data` is joined with `\n`.
//! An event (or a line still being read) larger than the cap is an error.

use futures::{Stream, StreamExt};

use super::client::CallError;

/// Incremental decoder state.
pub struct SseDecoder {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    /// Bytes from `start` already known to hold no line end.
    scanned: usize,
    /// The data lines of the event being read, joined with `\n`.
    data: Vec<u8>,
    has_data: bool,
    max: usize,
}

impl SseDecoder {
    pub fn new(max: usize) -> Self {
        Self { buf: Vec::new(), start: 0, scanned: 0, data: Vec::new(), has_data: false, max }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The data of the next complete event, or `None` until more bytes arrive.
    pub fn next_event(&mut self) -> Result<Option<String>, CallError> {
        loop {
            let Some(i) = self.buf[self.scanned..].iter().position(|b| *b == b'\n' || *b == b'\r') else {
                self.scanned = self.buf.len();
                if self.buf.len() - self.start + self.data.len() > self.max {
                    return Err(CallError::Invalid(format!(
                        "an event of the remote's stream exceeds {} bytes",
                        self.max
                    )));
                }
                return Ok(None);
            };
            let end = self.scanned + i;
            let terminator = match (self.buf[end], self.buf.get(end + 1)) {
                (b'\r', Some(b'\n')) => 2,
                // A CR at the end of what arrived may be the first half of a CRLF.
                (b'\r', None) => {
                    self.scanned = end;
                    return Ok(None);
                }
                _ => 1,
            };
            let (line_start, next) = (self.start, end + terminator);
            self.start = next;
            self.scanned = next;
            if end == line_start {
                // A blank line: the event (if it had data) is complete.
                if std::mem::take(&mut self.has_data) {
                    let data = std::mem::take(&mut self.data);
                    if !data.is_empty() {
                        return Ok(Some(String::from_utf8_lossy(&data).into_owned()));
                    }
                }
                continue;
            }
            let line = &self.buf[line_start..end];
            if line.first() == Some(&b':') {
                continue;
            }
            let (name, value) = match line.iter().position(|b| *b == b':') {
                Some(c) => (&line[..c], line[c + 1..].strip_prefix(b" ").unwrap_or(&line[c + 1..])),
                None => (line, &[][..]),
            };
            if name == b"data" {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
                if self.data.len() > self.max {
                    return Err(CallError::Invalid(format!(
                        "an event of the remote's stream exceeds {} bytes",
                        self.max
                    )));
                }
            }
        }
    }
}

/// Splits an SSE byte stream into the data of each event, bounded per event by `max`.
pub fn events<E: Into<CallError>>(
    bytes: impl Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
    max: usize,
) -> impl Stream<Item = Result<String, CallError>> + Send {
    let state = (Box::pin(bytes), SseDecoder::new(max), false);
    futures::stream::unfold(state, |(mut bytes, mut dec, done)| async move {
        if done {
            return None;
        }
        loop {
            match dec.next_event() {
                Ok(Some(data)) => return Some((Ok(data), (bytes, dec, false))),
                Ok(None) => {}
                Err(e) => return Some((Err(e), (bytes, dec, true))),
            }
            match bytes.next().await {
                Some(Ok(chunk)) => dec.push(&chunk),
                Some(Err(e)) => return Some((Err(e.into()), (bytes, dec, true))),
                // An event cut off by the end of the stream is not dispatched (the SSE rule).
                None => return None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<Result<String, String>> {
        let mut dec = SseDecoder::new(64);
        let mut out = Vec::new();
        for c in chunks {
            dec.push(c);
            loop {
                match dec.next_event() {
                    Ok(Some(d)) => out.push(Ok(d)),
                    Ok(None) => break,
                    Err(e) => {
                        out.push(Err(e.to_string()));
                        return out;
                    }
                }
            }
        }
        out
    }

    fn ok(v: &[&str]) -> Vec<Result<String, String>> {
        v.iter().map(|s| Ok((*s).to_owned())).collect()
    }

    #[test]
    fn frames_are_split_joined_and_comments_skipped() {
        let got = decode(&[b": ping\n\ndata: {\"a\":\ndata: 1}\n\nevent: x\r\ndata: 2\r\n\r\n", b"data: 3\n\n"]);
        assert_eq!(got, ok(&["{\"a\":\n1}", "2", "3"]));
    }

    #[test]
    fn a_character_split_across_chunks_is_decoded_whole() {
        let text = "data: {\"t\":\"h\u{e9}llo \u{1f600}\"}\n\n".as_bytes();
        // Split inside the two-byte é and inside the four-byte emoji.
        let e = text.iter().position(|b| *b == 0xc3).unwrap() + 1;
        let f = text.iter().position(|b| *b == 0xf0).unwrap() + 2;
        let got = decode(&[&text[..e], &text[e..f], &text[f..]]);
        assert_eq!(got, ok(&["{\"t\":\"h\u{e9}llo \u{1f600}\"}"]));
    }

    #[test]
    fn the_earliest_blank_line_ends_an_event_whatever_the_line_endings() {
        // CRLF event first, then an LF one: the CRLF boundary comes first and must win.
        assert_eq!(decode(&[b"data: a\r\n\r\ndata: b\n\n"]), ok(&["a", "b"]));
        // CR-only line endings, and a CRLF split between chunks.
        assert_eq!(decode(&[b"data: a\r\rdata: b\r", b"\n\r", b"\n"]), ok(&["a", "b"]));
        // Byte by byte.
        let all = b"data: x\r\n\r\n: c\n\ndata: y\n\n";
        let chunks: Vec<&[u8]> = all.chunks(1).collect();
        assert_eq!(decode(&chunks), ok(&["x", "y"]));
    }

    #[test]
    fn oversized_events_are_refused() {
        let got = decode(&[b"data: ", &[b'x'; 80]]);
        assert!(matches!(got.last(), Some(Err(e)) if e.contains("exceeds 64 bytes")), "{got:?}");
        let got =
            decode(&[b"data: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", b"data: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n"]);
        assert!(matches!(got.last(), Some(Err(_))), "{got:?}");
    }

    #[tokio::test]
    async fn the_stream_ends_without_dispatching_a_cut_off_event() {
        let chunks: Vec<Result<bytes::Bytes, CallError>> =
            vec![Ok(bytes::Bytes::from_static(b"data: 1\n\ndata: 2")), Ok(bytes::Bytes::from_static(b"\n"))];
        let got: Vec<String> = events(futures::stream::iter(chunks), 1024).map(|r| r.unwrap()).collect().await;
        assert_eq!(got, vec!["1"]);
    }
}
