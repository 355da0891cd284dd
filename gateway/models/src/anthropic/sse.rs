//! An incremental decoder for the `text/event-stream` wire format.
//!
//! Network chunks split lines (and even `\r\n` pairs and UTF-8 sequences) anywhere, so the
//! decoder keeps the unfinished line and event between [`SseDecoder::feed`] calls. It follows
//! the WHATWG rules that matter to a client: lines end with `\n`, `\r\n` or `\r`; `:` starts a
//! comment; `field: value` loses one leading space; several `data:` lines join with `\n`; a
//! blank line dispatches the event; an unfinished event at end of stream is dropped. Lines and
//! events are bounded so a misbehaving server cannot make the gateway buffer without limit.
//!
//! Public because it is the gateway's one client-side SSE reader: `gateway sessions tail`
//! reads a gateway's own event stream with it too (gateway-managed-agents `client`).

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, or `message` when the event had none.
    pub event: String,
    pub data: String,
}

/// The server sent a line or an event larger than the decoder accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    pub limit: usize,
}

#[derive(Debug)]
pub struct SseDecoder {
    limit: usize,
    line: Vec<u8>,
    /// The previous byte was a `\r`, so a `\n` right after it ends nothing.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder that accepts lines and events of at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self { limit, line: Vec::new(), after_cr: false, event: String::new(), data: String::new(), has_data: false }
    }

    /// Decodes `bytes`, appending every event they complete to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), TooLarge> {
        while !bytes.is_empty() {
            if self.after_cr && bytes.first() == Some(&b'\n') {
                bytes = &bytes[1..];
                self.after_cr = false;
                continue;
            }
            self.after_cr = false;
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.push_line_bytes(&bytes[..end])?;
                    self.after_cr = bytes[end] == b'\r';
                    bytes = &bytes[end + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, out)?;
                }
                None => {
                    self.push_line_bytes(bytes)?;
                    bytes = &[];
                }
            }
        }
        Ok(())
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) -> Result<(), TooLarge> {
        if self.line.len() + bytes.len() > self.limit {
            return Err(TooLarge { limit: self.limit });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), TooLarge> {
        if line.is_empty() {
            if self.has_data {
                let event = if self.event.is_empty() { "message".to_owned() } else { std::mem::take(&mut self.event) };
                out.push(SseEvent { event, data: std::mem::take(&mut self.data) });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line.first() == Some(&b':') {
            return Ok(());
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                if self.data.len() + value.len() + 1 > self.limit {
                    return Err(TooLarge { limit: self.limit });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` only matter to reconnecting clients, and unknown fields are ignored.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &str, piece: usize) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new(1024);
        let mut out = Vec::new();
        for chunk in input.as_bytes().chunks(piece) {
            decoder.feed(chunk, &mut out).unwrap();
        }
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent { event: event.into(), data: data.into() }
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
    fn oversized_lines_and_events_are_refused() {
        let mut decoder = SseDecoder::new(16);
        let mut out = Vec::new();
        assert_eq!(decoder.feed(&[b'x'; 17], &mut out), Err(TooLarge { limit: 16 }));

        let mut decoder = SseDecoder::new(16);
        assert!(decoder.feed(b"data: 0123456789\n", &mut out).is_ok());
        assert_eq!(decoder.feed(b"data: 0123456789\n", &mut out), Err(TooLarge { limit: 16 }));
    }
}
