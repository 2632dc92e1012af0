//! Text from the code (doc comments, help, schema descriptions) made safe for
//! a Markdown table cell.

/// `text` on one line, for a table cell: lines joined, `|` escaped (also in
/// code spans, as tables need), and outside code spans `<`, `>` and `*` kept
/// literal rather than read as HTML or emphasis.
pub(crate) fn cell(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(joined.len());
    let mut in_code = false;
    for c in joined.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            '*' if !in_code => out.push_str("\\*"),
            _ => out.push(c),
        }
    }
    out
}

/// `text` as paragraphs: its blank-line-separated paragraphs each on one line,
/// escaped as [`cell`] does (a `|` escaped outside a table reads the same).
pub(crate) fn paragraphs(text: &str) -> String {
    text.split("\n\n")
        .map(cell)
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// `text` ending as a sentence does: clap drops the final period of a
/// one-paragraph help, which a table cell beside others needs back.
pub(crate) fn sentence(text: &str) -> String {
    let text = text.trim_end();
    match text.chars().last() {
        None => String::new(),
        Some('.' | '!' | '?' | ':') => text.to_string(),
        Some(_) => format!("{text}."),
    }
}

/// `value` as a code span.
pub(crate) fn code(value: &str) -> String {
    format!("`{}`", value.replace('|', "\\|"))
}

/// A Markdown table: the header row, its rule, then `rows`.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_html_and_pipes_literal_but_code_spans_as_written() {
        assert_eq!(
            cell("Bearer <token>\n  and `a|b <c>` *x*"),
            "Bearer &lt;token&gt; and `a\\|b <c>` \\*x\\*"
        );
    }

    #[test]
    fn paragraphs_stay_apart() {
        assert_eq!(paragraphs("one\ntwo\n\nthree"), "one two\n\nthree");
    }
}
