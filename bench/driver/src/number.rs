//! Numbers as the report prints them: digits grouped by thousands. Its own
//! module so that the records, the profiles and the tables all use it
//! without depending on one another.

/// `v` with `decimals` places and its integer part grouped by commas
/// (`1,234,567.9`); a value that rounds to zero carries no minus sign.
pub fn fmt_num(v: f64, decimals: usize) -> String {
    let text = format!("{:.*}", decimals, v.abs());
    let (int, frac) = text
        .split_once('.')
        .map_or((text.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if v < 0.0 && text.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::fmt_num;

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(fmt_num(1_234_567.891, 1), "1,234,567.9");
        assert_eq!(fmt_num(-1234.0, 0), "-1,234");
        assert_eq!(fmt_num(0.5, 2), "0.50");
        assert_eq!(fmt_num(-0.001, 1), "0.0");
    }
}
