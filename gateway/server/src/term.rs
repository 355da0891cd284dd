//! What the commands print to a terminal: colour only when stdout is a terminal and `NO_COLOR`
//! is unset (<https://no-color.org>), and text cleaned of control characters, because what
//! they print (an agent's text, a tool's output) comes from a model and must not be able to
//! move the cursor, retitle the window or hide lines in the operator's terminal.

use std::io::IsTerminal;

/// Whether to colour stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paint {
    pub colour: bool,
}

impl Paint {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset or empty.
    pub fn for_stdout() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self { colour: !no_color && std::io::stdout().is_terminal() }
    }

    /// `text` in the SGR style `code` (e.g. `"1;31"`), or plain.
    pub fn paint(self, code: &str, text: &str) -> String {
        if self.colour { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }
}

/// `s` on one line, at most `max` characters: line breaks become ` ⏎ `, tabs a space, other
/// control characters (ESC above all) U+FFFD; a longer text ends with `…`.
pub fn one_line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 4));
    for (chars, c) in s.trim_end().chars().enumerate() {
        if chars >= max {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push_str(" ⏎ "),
            '\r' => {}
            '\t' => out.push(' '),
            c if c.is_control() || ('\u{2028}'..='\u{2029}').contains(&c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_text_stays_on_one_line_and_cannot_drive_the_terminal() {
        let cases = [
            ("hi\n", 10, "hi"),
            ("a\nb", 10, "a ⏎ b"),
            ("a\r\nb\tc", 10, "a ⏎ b c"),
            ("\x1b]0;pwned\x07x", 20, "\u{fffd}]0;pwned\u{fffd}x"),
            ("\x1b[2J", 10, "\u{fffd}[2J"),
            ("abcdef", 3, "abc…"),
            ("ééé", 2, "éé…"),
        ];
        for (input, max, want) in cases {
            assert_eq!(one_line(input, max), want, "{input:?}");
        }
        assert_eq!(Paint { colour: false }.paint("31", "x"), "x");
        assert_eq!(Paint { colour: true }.paint("31", "x"), "\x1b[31mx\x1b[0m");
    }
}
