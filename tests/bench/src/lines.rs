//! Newline-delimited JSON-RPC framing with a size bound, shared by the ACP stub and the
//! driver's ACP client: a peer that never sends `\n` must not make us buffer without end.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Largest line accepted (a prompt may embed resources, but not unbounded ones).
pub const MAX_LINE: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("reading the stream: {0}")]
    Io(#[from] std::io::Error),
    #[error("a line of {0} bytes exceeds the {MAX_LINE}-byte limit")]
    TooLong(usize),
}

/// The next line without its terminator (`\r\n` or `\n`), or `None` at end of stream.
pub async fn next_line(reader: &mut (impl AsyncBufRead + Unpin), max: usize) -> Result<Option<String>, LineError> {
    let mut line: Vec<u8> = Vec::new();
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then(|| String::from_utf8_lossy(&line).into_owned()));
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        if line.len() + chunk.len() > max {
            return Err(LineError::TooLong(line.len() + chunk.len()));
        }
        line.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(done);
        reader.consume(used);
        if done {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_bounded() {
        let mut r = tokio::io::BufReader::new(&b"one\r\ntwo\nthree"[..]);
        assert_eq!(next_line(&mut r, 10).await.unwrap().as_deref(), Some("one"));
        assert_eq!(next_line(&mut r, 10).await.unwrap().as_deref(), Some("two"));
        assert_eq!(next_line(&mut r, 10).await.unwrap().as_deref(), Some("three"));
        assert!(next_line(&mut r, 10).await.unwrap().is_none());
        let mut long = tokio::io::BufReader::new(&b"0123456789abc\n"[..]);
        assert!(matches!(next_line(&mut long, 10).await, Err(LineError::TooLong(_))));
    }
}
