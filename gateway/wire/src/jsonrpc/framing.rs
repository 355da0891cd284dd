//! Line framing with a size bound, shared by every transport (stdio, a child's pipes; the
//! WebSocket transport delivers whole frames and bounds them in the server).

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Largest message accepted: a prompt may embed resources, but not unbounded ones.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// One message as it came off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    Line(String),
    /// A message over the limit (its length so far); its bytes were discarded.
    TooLong(usize),
}

/// Reads the next `\n`-terminated line, keeping at most `max` bytes. `None` at EOF.
pub async fn next_line(reader: &mut (impl AsyncBufRead + Unpin), max: usize) -> std::io::Result<Option<Inbound>> {
    let mut line: Vec<u8> = Vec::new();
    let mut seen = 0usize;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(match seen {
                0 => None,
                n if n > max => Some(Inbound::TooLong(n)),
                _ => Some(Inbound::Line(String::from_utf8_lossy(&line).into_owned())),
            });
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        seen = seen.saturating_add(chunk.len());
        if seen <= max {
            line.extend_from_slice(chunk);
        } else {
            line = Vec::new();
        }
        let used = chunk.len() + usize::from(done);
        reader.consume(used);
        if done {
            if seen > max {
                return Ok(Some(Inbound::TooLong(seen)));
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some(Inbound::Line(String::from_utf8_lossy(&line).into_owned())));
        }
    }
}

/// Feeds the lines of `reader` into a channel until EOF or an error.
pub fn spawn_reader(reader: impl AsyncRead + Unpin + Send + 'static, max: usize) -> mpsc::Receiver<Inbound> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(64 * 1024, reader);
        loop {
            match next_line(&mut reader, max).await {
                Ok(Some(inbound)) => {
                    if tx.send(inbound).await.is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "read error; closing the connection");
                    return;
                }
            }
        }
    });
    rx
}

/// Most bytes gathered into one write from frames already queued.
const WRITE_BATCH: usize = 64 << 10;

/// Writes each frame as one line. Frames are serialized JSON, which never holds a raw
/// newline, so a frame is always exactly one line. Frames queued together (a turn's updates
/// and its answer) go out in one write, so the peer gets them in one wake-up. A frame's
/// budget is released once it is copied into that write (which holds at most one frame past
/// [`WRITE_BATCH`]).
pub fn spawn_writer(
    mut writer: impl AsyncWrite + Unpin + Send + 'static,
    mut frames: mpsc::Receiver<super::Frame>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut bytes = Vec::new();
        while let Some(frame) = frames.recv().await {
            bytes.clear();
            let mut next = Some(frame);
            while let Some(frame) = next.take() {
                bytes.extend_from_slice(frame.text().as_bytes());
                bytes.push(b'\n');
                drop(frame);
                if bytes.len() < WRITE_BATCH {
                    next = frames.try_recv().ok();
                }
            }
            if let Err(e) = writer.write_all(&bytes).await {
                tracing::debug!(error = %e, "write error; dropping the rest");
                return;
            }
            if let Err(e) = writer.flush().await {
                tracing::debug!(error = %e, "flush error; dropping the rest");
                return;
            }
            if bytes.capacity() > 2 * WRITE_BATCH {
                // One big frame (a prompt may embed resources) is not kept for the connection's life.
                bytes = Vec::new();
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Inbound> {
        let mut r = BufReader::with_capacity(3, input);
        let mut out = Vec::new();
        while let Some(l) = next_line(&mut r, max).await.expect("read") {
            out.push(l);
        }
        out
    }

    #[tokio::test]
    async fn lines_are_split_and_bounded() {
        let l = |s: &str| Inbound::Line(s.into());
        assert_eq!(lines(b"", 5).await, vec![]);
        assert_eq!(lines(b"a\r\nbb\n\nc", 5).await, vec![l("a"), l("bb"), l(""), l("c")]);
        assert_eq!(lines(b"123456789\nok\n", 5).await, vec![Inbound::TooLong(9), l("ok")]);
        assert_eq!(lines(b"123456", 5).await, vec![Inbound::TooLong(6)]);
    }
}
