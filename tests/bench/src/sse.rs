//! Client side of Server-Sent Events: splits a byte stream into frames and yields each
//! frame's `data`. One rule for both targets: a frame ends at a blank line (`\n\n`, or
//! `\r\n\r\n`), `data:` lines of a frame join with `\n`, comments (`:`) carry no data.

use bytes::{Buf, BytesMut};

/// Largest frame kept while waiting for its end; a peer that never ends one is an error.
pub const MAX_FRAME: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
#[error("an SSE frame exceeds {MAX_FRAME} bytes")]
pub struct FrameTooLarge;

/// Accumulates bytes and hands out complete frames' data.
#[derive(Default)]
pub struct Frames {
    buf: BytesMut,
}

impl Frames {
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), FrameTooLarge> {
        if self.buf.len() + chunk.len() > MAX_FRAME {
            return Err(FrameTooLarge);
        }
        self.buf.extend_from_slice(chunk);
        Ok(())
    }

    /// The data of the next complete frame that has any (comments and keep-alives skipped).
    pub fn next_data(&mut self) -> Option<String> {
        loop {
            let (end, sep) = find_end(&self.buf)?;
            let frame = self.buf.split_to(end);
            self.buf.advance(sep);
            let text = String::from_utf8_lossy(&frame);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() {
                return Some(data.join("\n"));
            }
        }
    }
}

fn find_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The `type` of a frame's JSON data, if it has one.
pub fn event_type(data: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(data).ok()?.get("type")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_across_chunks_and_skip_comments() {
        let mut f = Frames::default();
        f.push(b": keep-alive\n\nid: 1\nevent: a\ndata: {\"type\":\"a\"}").unwrap();
        assert_eq!(f.next_data(), None);
        f.push(b"\n\ndata: x\r\n\r\n").unwrap();
        assert_eq!(f.next_data().as_deref(), Some("{\"type\":\"a\"}"));
        assert_eq!(f.next_data().as_deref(), Some("x"));
        assert_eq!(f.next_data(), None);
        assert_eq!(event_type("{\"type\":\"session.status_idle\"}").as_deref(), Some("session.status_idle"));
    }

    #[test]
    fn an_endless_frame_is_refused() {
        let mut f = Frames::default();
        assert!(f.push(&vec![b'x'; MAX_FRAME + 1]).is_err());
    }
}
