//! A command's output bytes as text within the output cap.

/// `bytes` as text whose JSON form (how it travels in an event) takes at most `cap` bytes,
/// cut at a character boundary; and how many bytes of that form were cut.
///
/// The cap counts what a client receives, not what the command printed: an invalid UTF-8
/// byte becomes U+FFFD (three bytes) and a control character becomes a six-byte `\u00XX`
/// escape, so capping the raw bytes let 100 KB of binary output become an event of 600 KB.
/// Public because a self-hosted executor's results obey the same rule when they are admitted
/// (`gateway_runtime::executors`).
pub fn capped_text(bytes: &[u8], cap: usize) -> (String, usize) {
    let text = String::from_utf8_lossy(bytes);
    let mut size = 0;
    for (at, c) in text.char_indices() {
        let encoded = json_len(c);
        if size + encoded > cap {
            return (text[..at].to_owned(), text[at..].chars().map(json_len).sum());
        }
        size += encoded;
    }
    (text.into_owned(), 0)
}

/// The bytes `c` takes inside a JSON string.
fn json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{08}' | '\u{0c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_counts_the_json_form_of_the_text() {
        assert_eq!(capped_text(b"plain", 10), ("plain".to_owned(), 0));
        assert_eq!(capped_text(b"abcdef", 4), ("abcd".to_owned(), 2));
        let binary = vec![0xffu8; 100];
        let (text, cut) = capped_text(&binary, 30);
        assert_eq!(text, "\u{fffd}".repeat(10), "three bytes per replaced byte");
        assert_eq!(cut, 270);
        let controls = vec![0x01u8; 100];
        let (text, cut) = capped_text(&controls, 30);
        assert_eq!(text.len(), 5, "six bytes per escaped control character");
        assert_eq!(cut, 570);
        assert!(serde_json::to_string(&text).unwrap().len() <= 32);
        let (text, _) = capped_text("é".repeat(10).as_bytes(), 5);
        assert_eq!(text, "éé", "never a split character");
    }
}
