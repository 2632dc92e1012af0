//! Text that others sent, written where people and tools read it (a rules
//! file's comments, a decision log line, a terminal): every character that
//! does not print as itself is escaped, so the text cannot start a line, hide
//! or reorder what follows it, or change what a reader sees.
//!
//! Escaped: control characters (C0, DEL, C1: newline and carriage return
//! among them), the line and paragraph separators (U+2028, U+2029), the
//! bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E,
//! U+2066–U+2069), the zero-width and invisible format characters
//! (U+200B–U+200D, U+2060–U+2064), the byte-order mark (U+FEFF), the
//! interlinear annotation marks (U+FFF9–U+FFFB) and the tag characters
//! (U+E0000–U+E007F).

use std::borrow::Cow;

/// Whether `c` is written escaped: it does not print as itself.
pub(crate) fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// `text` on one line, for a comment or a message: each hidden character as
/// `\u{XXXX}`, and a backslash doubled so an escape in the original is told
/// from one added here.
pub(crate) fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| hidden(c) || c == '\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if hidden(c) => out.push_str(&format!("\\u{{{:04x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hidden_character_is_escaped_and_nothing_else() {
        let text = "a\nb\rc\u{2028}d\u{2029}e\u{202E}f\u{2066}g\u{7f}h\u{85}i\u{feff}j\u{200b}k";
        let got = one_line(text);
        assert!(!got.chars().any(hidden), "{got}");
        assert_eq!(
            got,
            "a\\u{000a}b\\u{000d}c\\u{2028}d\\u{2029}e\\u{202e}f\\u{2066}g\\u{007f}h\\u{0085}i\
             \\u{feff}j\\u{200b}k"
        );
        assert_eq!(one_line("a\\u{000a}"), "a\\\\u{000a}");
        assert!(matches!(one_line("café `x` 日本"), Cow::Borrowed(_)));
    }
}
