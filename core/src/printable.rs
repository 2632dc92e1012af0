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
pub fn hidden(c: char) -> bool {
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
pub fn one_line(text: &str) -> Cow<'_, str> {
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

/// A JSON text with each hidden character in its strings written as a
/// `\uXXXX` escape (a UTF-16 pair above U+FFFF): the same JSON value, every
/// byte of it printable ASCII or a printing character. `serde_json` escapes
/// only what JSON requires (below U+0020, `"` and `\`). A text of ASCII
/// without DEL is returned as it is, allocating nothing.
pub fn json_escaped(json: Vec<u8>) -> Vec<u8> {
    if !json.iter().any(|b| *b >= 0x7F) {
        return json;
    }
    // serde_json writes UTF-8; a lossy reading only guards the type.
    let text = String::from_utf8(json)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out.into_bytes()
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

    #[test]
    fn json_keeps_its_value_and_loses_its_hidden_characters() {
        let value = serde_json::json!({"k": "x\u{2028}y\u{202e}z\u{7f}\u{e0041}é"});
        let escaped = json_escaped(serde_json::to_vec(&value).unwrap());
        let text = String::from_utf8(escaped).unwrap();
        assert!(!text.chars().any(hidden), "{text}");
        assert!(
            text.contains("\\u2028") && text.contains("\\udb40\\udc41"),
            "{text}"
        );
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
        let plain = br#"{"k":"v"}"#.to_vec();
        let ptr = plain.as_ptr();
        let same = json_escaped(plain);
        assert_eq!(same.as_ptr(), ptr);
    }
}
