//! `read`: a text file with `cat -n` numbering, streamed so memory stays bounded by the output
//! cap whatever the file's size.

use std::io::{BufRead, BufReader, Read};

use super::{FileResult, Workspace};

/// Longest line shown whole; the rest of a longer line is skipped and marked.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024;
/// How much of the start of a file is checked for NUL bytes before anything is shown.
const SNIFF_BYTES: usize = 8 * 1024;

/// `range`: 1-based inclusive `(start, end)`, `end == None` meaning the last line.
pub fn read(ws: &Workspace, raw: &str, range: Option<(u64, Option<u64>)>) -> FileResult {
    let at = ws.resolve(raw)?;
    let file = ws.open_regular(raw, &at, false)?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let binary = || format!("{raw} is a binary file (it contains NUL bytes); read shows text files only");
    if looks_binary(&mut reader) {
        return Err(binary());
    }
    let (start, end) = range.unwrap_or((1, None));
    let cap = ws.output_cap();
    let mut out = String::new();
    let mut line = Vec::new();
    let mut number: u64 = 0;
    let mut truncated = false;
    while let Some(long) = next_line(&mut reader, &mut line, MAX_LINE_BYTES).map_err(|e| super::describe(raw, &e))? {
        number += 1;
        if line.contains(&0) {
            return Err(binary());
        }
        if number < start {
            continue;
        }
        if end.is_some_and(|end| number > end) {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let entry = format!("{number:>6}\t{text}{}\n", if long { " [… line truncated]" } else { "" });
        if out.len() + entry.len() > cap {
            truncated = true;
            break;
        }
        out.push_str(&entry);
    }
    if number == 0 {
        return Ok(format!("({raw} is empty)"));
    }
    if number < start {
        return Err(format!("view_range starts at line {start} but {raw} has {number} lines"));
    }
    if truncated {
        out.push_str(&format!("[output truncated at {cap} bytes: use view_range to read further]\n"));
    }
    Ok(out)
}

/// Reads the next line into `line` (without its `\n`), keeping at most `max` bytes of it.
/// `None` at the end of the file, else `Some(whether the line was cut)`.
pub(crate) fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>, max: usize) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut seen_any = false;
    let mut cut = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(seen_any.then_some(cut));
        }
        seen_any = true;
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let room = max.saturating_sub(line.len());
        if chunk.len() > room {
            cut = true;
        }
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(cut));
        }
    }
}

/// Whether a reader's first bytes look binary (contain NUL).
pub(crate) fn looks_binary(reader: &mut impl BufRead) -> bool {
    match reader.fill_buf() {
        Ok(head) => head[..head.len().min(SNIFF_BYTES)].contains(&0),
        Err(_) => true,
    }
}

/// Reads at most `max` bytes; `Err` names the limit when the source is longer.
pub(crate) fn read_bounded(source: impl Read, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    source.take(max as u64 + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() <= max).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<(String, bool)> {
        let mut r = BufReader::with_capacity(4, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        while let Some(cut) = next_line(&mut r, &mut line, max).expect("read") {
            out.push((String::from_utf8_lossy(&line).into_owned(), cut));
        }
        out
    }

    #[test]
    fn lines_are_split_and_bounded() {
        assert_eq!(lines(b"", 10), vec![]);
        assert_eq!(lines(b"a\nbb", 10), vec![("a".into(), false), ("bb".into(), false)]);
        assert_eq!(lines(b"a\n\n", 10), vec![("a".into(), false), ("".into(), false)]);
        assert_eq!(lines(b"abcdefghij\nk\n", 3), vec![("abc".into(), true), ("k".into(), false)]);
    }

    #[test]
    fn bounded_reads_say_when_the_source_is_longer() {
        assert_eq!(read_bounded(&b"abc"[..], 3).expect("read"), Some(b"abc".to_vec()));
        assert_eq!(read_bounded(&b"abcd"[..], 3).expect("read"), None);
    }
}
