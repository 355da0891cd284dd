//! Splitting a shell's output stream into "what the command printed" and the sentinel line
//! that ends it, with the output cap applied as bytes arrive.

use crate::text::capped_text;

/// Collects one command's output until the sentinel `\n<token>:<status>\n`.
///
/// Memory stays bounded: at most `cap` bytes are kept, plus a tail shorter than the sentinel
/// that might be its beginning; everything else is counted and dropped.
#[derive(Debug)]
pub struct Collector {
    marker: Vec<u8>,
    kept: Vec<u8>,
    dropped: usize,
    cap: usize,
    pending: Vec<u8>,
}

/// Longest status field after the marker; anything longer is not a sentinel we wrote.
const MAX_STATUS_LEN: usize = 12;

impl Collector {
    pub fn new(token: &str, cap: usize) -> Self {
        let mut marker = b"\n".to_vec();
        marker.extend_from_slice(token.as_bytes());
        marker.push(b':');
        Self { marker, kept: Vec::new(), dropped: 0, cap, pending: Vec::new() }
    }

    /// Takes the next chunk of the stream; `Some(status)` once the sentinel is complete.
    pub fn feed(&mut self, chunk: &[u8]) -> Option<i32> {
        self.pending.extend_from_slice(chunk);
        if let Some(at) = find(&self.pending, &self.marker) {
            let after = at + self.marker.len();
            let rest = &self.pending[after..];
            match rest.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    let status = std::str::from_utf8(&rest[..end]).ok().and_then(|s| s.parse().ok()).unwrap_or(-1);
                    let output = self.pending[..at].to_vec();
                    self.commit(&output);
                    self.pending.clear();
                    return Some(status);
                }
                None if rest.len() <= MAX_STATUS_LEN => return None,
                // Not our sentinel after all (cannot really happen with a random token).
                None => {}
            }
        }
        let keep = (self.marker.len() - 1).min(self.pending.len());
        let flush: Vec<u8> = self.pending.drain(..self.pending.len() - keep).collect();
        self.commit(&flush);
        None
    }

    /// The stream ended early (timeout, cancel, shell gone): keep the tail as output too.
    pub fn finish(&mut self) {
        let tail = std::mem::take(&mut self.pending);
        self.commit(&tail);
    }

    fn commit(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        let take = bytes.len().min(room);
        self.kept.extend_from_slice(&bytes[..take]);
        self.dropped += bytes.len() - take;
    }

    /// The kept output as text within the cap ([`capped_text`]) and how many bytes were
    /// dropped.
    pub fn into_parts(self) -> (String, usize) {
        let (text, cut) = capped_text(&self.kept, self.cap);
        (text, self.dropped + cut)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(c: &mut Collector, chunks: &[&[u8]]) -> Option<i32> {
        chunks.iter().find_map(|chunk| c.feed(chunk))
    }

    #[test]
    fn the_sentinel_ends_the_output_across_chunk_boundaries() {
        let stream = b"hello\nworld\nTOKEN:3\n";
        for split in 0..stream.len() {
            let mut c = Collector::new("TOKEN", 1000);
            let (a, b) = stream.split_at(split);
            let status = feed_all(&mut c, &[a, b]);
            assert_eq!(status, Some(3), "split at {split}");
            assert_eq!(c.into_parts(), ("hello\nworld".to_owned(), 0));
        }
    }

    #[test]
    fn output_without_a_trailing_newline_is_kept_exactly() {
        let mut c = Collector::new("T0K", 100);
        assert_eq!(c.feed(b"no newline"), None);
        assert_eq!(c.feed(b"\nT0K:0\n"), Some(0));
        assert_eq!(c.into_parts(), ("no newline".to_owned(), 0));
    }

    #[test]
    fn the_cap_drops_and_counts_the_excess() {
        let mut c = Collector::new("TK", 4);
        assert_eq!(c.feed(b"abcdefgh"), None);
        assert_eq!(c.feed(b"ij\nTK:1\n"), Some(1));
        assert_eq!(c.into_parts(), ("abcd".to_owned(), 6));
    }

    #[test]
    fn binary_output_is_capped_as_the_text_a_client_receives() {
        let mut c = Collector::new("TK", 1000);
        assert_eq!(c.feed(&[0x80; 1000]), None);
        assert_eq!(c.feed(b"\nTK:0\n"), Some(0));
        let (text, dropped) = c.into_parts();
        assert!(serde_json::to_string(&text).unwrap().len() <= 1002, "{} bytes as JSON", text.len());
        assert_eq!(dropped, 2001, "1000 bytes became 3000 of text; 333 characters (999 bytes) were kept");
    }

    #[test]
    fn an_unfinished_stream_keeps_its_tail() {
        let mut c = Collector::new("TOKEN", 100);
        assert_eq!(c.feed(b"partial\nTOK"), None);
        c.finish();
        assert_eq!(c.into_parts(), ("partial\nTOK".to_owned(), 0));
    }
}
