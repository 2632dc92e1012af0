//! Query parameters a rule keys on, read so that no spelling of a request mints
//! a fresh bucket:
//!
//! - the query is what follows the first `?` of `:path`, up to a `#`;
//! - parameters are separated by `&` and by `;` (some frameworks split on both:
//!   `?k=a;k=b` must not hide a second `k` from the limiter);
//! - names and values are percent-decoded and `+` is a space, as HTML forms
//!   encode them (`?k=%61` is `?k=a`, `?k=a+b` is `?k=a%20b`), so a name is
//!   found under any escaping; names are case-sensitive, as frameworks read them
//!   (`K` is not `k`);
//! - a key parameter sent twice, under any spelling, is an error, as a key
//!   header sent twice is: which value the backend reads is a guess;
//! - a malformed escape (`%zz`, a trailing `%`) in a parameter's name, or in the
//!   key parameter's value, is an error: backends decode it differently.

use std::borrow::Cow;

use crate::path::hex_value;

/// Why a query cannot be read for a key parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryError {
    /// The parameter is sent more than once.
    Repeated,
    /// A name, or the parameter's value, has an escape that is not `%` and two
    /// hex digits.
    Malformed,
}

/// The query of a raw `:path`: the bytes after the first `?`, up to a `#`
/// (empty when there is none).
pub fn of_path(raw: &[u8]) -> &[u8] {
    let end = raw.iter().position(|b| *b == b'#').unwrap_or(raw.len());
    let before_fragment = raw.get(..end).unwrap_or_default();
    match before_fragment.iter().position(|b| *b == b'?') {
        Some(q) => before_fragment.get(q + 1..).unwrap_or_default(),
        None => &[],
    }
}

/// The decoded value of parameter `name` in `query`: `Ok(None)` when absent
/// (a parameter without `=` has the empty value).
pub fn single<'q>(query: &'q [u8], name: &str) -> Result<Option<Cow<'q, [u8]>>, QueryError> {
    let mut found = None;
    for pair in query.split(|b| *b == b'&' || *b == b';') {
        let (raw_name, raw_value) = match pair.iter().position(|b| *b == b'=') {
            Some(eq) => (
                pair.get(..eq).unwrap_or_default(),
                pair.get(eq + 1..).unwrap_or_default(),
            ),
            None => (pair, &[][..]),
        };
        if raw_name.is_empty() {
            continue;
        }
        if decode(raw_name).ok_or(QueryError::Malformed)?.as_ref() != name.as_bytes() {
            continue;
        }
        if found.is_some() {
            return Err(QueryError::Repeated);
        }
        found = Some(decode(raw_value).ok_or(QueryError::Malformed)?);
    }
    Ok(found)
}

/// Form decoding: `+` is a space, `%XX` the byte XX. `None` for a `%` not
/// followed by two hex digits.
fn decode(raw: &[u8]) -> Option<Cow<'_, [u8]>> {
    if !raw.iter().any(|b| *b == b'%' || *b == b'+') {
        return Some(Cow::Borrowed(raw));
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        match b {
            b'%' => {
                let hi = hex_value(*raw.get(i + 1)?)?;
                let lo = hex_value(*raw.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(path: &str, name: &str) -> Result<Option<Vec<u8>>, QueryError> {
        single(of_path(path.as_bytes()), name).map(|v| v.map(Cow::into_owned))
    }

    #[test]
    fn the_query_is_after_the_first_question_mark_and_before_a_fragment() {
        assert_eq!(of_path(b"/a?k=1?x#f"), b"k=1?x");
        assert_eq!(of_path(b"/a#f?k=1"), b"");
        assert_eq!(of_path(b"/a"), b"");
        assert_eq!(of_path(b"/a?"), b"");
    }

    #[test]
    fn every_spelling_of_a_value_is_one_value() {
        for path in [
            "/s?k=a b",
            "/s?k=a+b",
            "/s?k=a%20b",
            "/s?%6B=a%20b",
            "/s?k=%61+%62",
            "/s?x=1&k=a+b&y",
            "/s?x=1;k=a+b",
            "/s?k=a+b#k=c",
        ] {
            assert_eq!(value(path, "k"), Ok(Some(b"a b".to_vec())), "{path}");
        }
        assert_eq!(value("/s?k=a%2Bb", "k"), Ok(Some(b"a+b".to_vec())));
        assert_eq!(value("/s?k", "k"), Ok(Some(Vec::new())));
        assert_eq!(value("/s?k=", "k"), Ok(Some(Vec::new())));
        assert_eq!(value("/s?k=a=b", "k"), Ok(Some(b"a=b".to_vec())));
        assert_eq!(value("/s?k=%ff", "k"), Ok(Some(vec![0xff])));
    }

    #[test]
    fn names_are_case_sensitive_and_absent_is_not_an_error() {
        assert_eq!(value("/s?K=a", "k"), Ok(None));
        assert_eq!(value("/s?kk=a&=b&&", "k"), Ok(None));
        assert_eq!(value("/s", "k"), Ok(None));
        assert_eq!(value("/s;k=a", "k"), Ok(None));
        assert_eq!(value("/s?user%20id=7", "user id"), Ok(Some(b"7".to_vec())));
    }

    #[test]
    fn a_key_parameter_sent_twice_under_any_spelling_is_refused() {
        for path in [
            "/s?k=a&k=b",
            "/s?k=a&k=a",
            "/s?k=a;k=b",
            "/s?k=a&%6B=b",
            "/s?k&k",
            "/s?k=a&x=1&k",
        ] {
            assert_eq!(value(path, "k"), Err(QueryError::Repeated), "{path}");
        }
        // Another parameter repeated is not this rule's concern.
        assert_eq!(value("/s?x=1&x=2&k=a", "k"), Ok(Some(b"a".to_vec())));
    }

    #[test]
    fn malformed_escapes_in_names_or_the_value_are_refused() {
        // A value of nothing but `%` is malformed too (not read as a literal).
        for path in [
            "/s?k=%zz",
            "/s?k=a%",
            "/s?k=%6",
            "/s?%zz=1&k=a",
            "/s?k%=1",
            "/s?k=%",
            "/s?k=%%",
        ] {
            assert_eq!(value(path, "k"), Err(QueryError::Malformed), "{path}");
        }
        // Another parameter's value is not read.
        assert_eq!(value("/s?x=100%&k=a", "k"), Ok(Some(b"a".to_vec())));
    }

    proptest::proptest! {
        /// Escaping any byte of a name or value (or writing a space as `+`)
        /// never changes what the limiter reads: no spelling mints a new key.
        #[test]
        fn escaping_never_changes_the_value(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
            escape in proptest::collection::vec(proptest::prelude::any::<bool>(), 12),
        ) {
            let mut plain = b"k=".to_vec();
            let mut spelled = b"%6b=".to_vec();
            for (i, b) in value.iter().enumerate() {
                let must = matches!(*b, b'&' | b';' | b'#' | b'%' | b'+' | b'=');
                if must || escape.get(i).copied().unwrap_or(false) {
                    plain.extend_from_slice(format!("%{b:02X}").as_bytes());
                    spelled.extend_from_slice(format!("%{b:02x}").as_bytes());
                } else {
                    plain.push(*b);
                    if *b == b' ' { spelled.push(b'+') } else { spelled.push(*b) }
                }
            }
            let a = single(&plain, "k").map(|v| v.map(Cow::into_owned));
            let b = single(&spelled, "k").map(|v| v.map(Cow::into_owned));
            proptest::prop_assert_eq!(&a, &Ok(Some(value.clone())));
            proptest::prop_assert_eq!(a, b);
        }
    }
}
