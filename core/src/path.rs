//! One path, however it is spelled. Rules match, and `path` key parts count, the
//! normalised path, computed here in the filter itself, so a host without Envoy's
//! own normalisation settings is still safe:
//!
//! - the query string and fragment are cut off;
//! - percent-escapes of unreserved characters (`A-Z a-z 0-9 - . _ ~`) are decoded
//!   (`/%6Cogin` is `/login`), escaped slashes and backslashes (`%2F`, `%5C`, `\`)
//!   are separators, every other escape is kept with upper-case hex, and bytes that
//!   are not printable ASCII are escaped;
//! - path parameters are dropped (`/login;jsessionid=1` is `/login`), as servlet
//!   containers and most frameworks do before routing;
//! - repeated slashes are merged, `.` and `..` segments resolved (never above the
//!   root), and a trailing slash dropped (`/login/` is `/login`).
//!
//! The trade-off: a backend that tells `/a/` from `/a`, or `/a%2Fb` from `/a/b`,
//! sees two resources where the limiter sees one, so the limiter errs on the side
//! of counting them together. Paths stay case-sensitive, as HTTP says they are.

/// The normalised form of a request's `:path` (or of a rule's path).
pub fn normalize(raw: &[u8]) -> String {
    let raw = without_query(raw);
    match already_normal(raw) {
        // Most requests: one copy, where resolving takes three allocations
        // (a property test holds the two to the same answer).
        Some(normal) => normal.to_owned(),
        None => resolve(raw),
    }
}

/// The path without its query string and fragment.
fn without_query(raw: &[u8]) -> &[u8] {
    let end = raw
        .iter()
        .position(|b| *b == b'?' || *b == b'#')
        .unwrap_or(raw.len());
    &raw[..end]
}

/// The general case: decode, then resolve the segments.
fn resolve(raw: &[u8]) -> String {
    let decoded = decode(raw);
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        let segment = segment.split(';').next().unwrap_or_default();
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(decoded.len() + 1);
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// `raw` as it is, when normalising would leave it unchanged: it starts with
/// `/`, every byte stays as it is (no escape to decode or make, no backslash, no
/// path parameter), and no segment is empty (repeated or trailing slash), `.`
/// or `..`. `None` says nothing of the path: the general case decides.
fn already_normal(raw: &[u8]) -> Option<&str> {
    let rest = raw.strip_prefix(b"/")?;
    if rest.is_empty() {
        return crate::text::utf8(raw);
    }
    let kept = |b: &u8| b.is_ascii_graphic() && !matches!(b, b'%' | b'\\' | b';');
    if !rest.iter().all(kept) {
        return None;
    }
    let plain = |segment: &[u8]| !matches!(segment, b"" | b"." | b"..");
    if !rest.split(|b| *b == b'/').all(plain) {
        return None;
    }
    crate::text::utf8(raw)
}

/// Decodes what must be decoded and escapes what must be escaped, in one pass;
/// `/` in the result is always a separator.
fn decode(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        let escaped = (b == b'%')
            .then(|| Some((hex_value(*raw.get(i + 1)?)?, hex_value(*raw.get(i + 2)?)?)))
            .flatten();
        let (byte, was_escaped) = match escaped {
            Some((hi, lo)) => {
                i += 3;
                (hi << 4 | lo, true)
            }
            None => {
                i += 1;
                (b, false)
            }
        };
        match byte {
            b'/' | b'\\' => out.push('/'),
            b if is_unreserved(b) => out.push(char::from(b)),
            // Reserved and sub-delimiter characters keep their meaning when sent
            // as they are, and stay escaped when sent escaped.
            b if !was_escaped && b != b'%' && b.is_ascii_graphic() => out.push(char::from(b)),
            b => crate::digits::push_percent(&mut out, b),
        }
    }
    out
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

pub(crate) fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> String {
        normalize(s.as_bytes())
    }

    #[test]
    fn every_spelling_of_login_is_login() {
        for spelling in [
            "/login",
            "/login/",
            "//login",
            "/./login",
            "/%6Cogin",
            "/%6cogin",
            "/login;x=1",
            "/login;jsessionid=abc/",
            "/x/../login",
            "/../login",
            "/login?next=/admin",
            "/login#frag",
            "%2Flogin",
            "/\\login",
            "/%2E/login",
            "/%2e%2e/login",
            "login",
        ] {
            assert_eq!(n(spelling), "/login", "{spelling}");
        }
    }

    #[test]
    fn reserved_escapes_stay_escaped_and_odd_bytes_are_escaped() {
        assert_eq!(n("/a%3Fb"), "/a%3Fb");
        assert_eq!(n("/a%3fb"), "/a%3Fb");
        assert_eq!(n("/a:b@c"), "/a:b@c");
        assert_eq!(n("/100%"), "/100%25");
        assert_eq!(n("/%zz"), "/%25zz");
        assert_eq!(n("/%25"), "/%25");
        assert_eq!(normalize(b"/caf\xc3\xa9 x"), "/caf%C3%A9%20x");
        assert_eq!(n("/"), "/");
        assert_eq!(n(""), "/");
        assert_eq!(n("/Login"), "/Login");
    }

    #[test]
    fn the_shortcut_takes_only_paths_the_general_case_leaves_unchanged() {
        for normal in [
            "/",
            "/login",
            "/v1/search",
            "/a:b@c",
            "/a.b/c-d_e~f",
            "/.well-known/x",
        ] {
            assert_eq!(already_normal(normal.as_bytes()), Some(normal), "{normal}");
        }
        for other in [
            "",
            "login",
            "//a",
            "/a/",
            "/a//b",
            "/./a",
            "/a/..",
            "/a;b",
            "/%41",
            "/a\\b",
            "/a b",
            "/caf\u{e9}",
        ] {
            assert_eq!(already_normal(other.as_bytes()), None, "{other:?}");
        }
    }

    proptest::proptest! {
        /// The shortcut and the general case agree on every path: the
        /// shortcut's answer is the general case's.
        #[test]
        fn the_shortcut_agrees_with_the_general_case(raw in proptest::collection::vec(
            proptest::sample::select(b"/.;%2fF6cC?a\\xe\xc3:@~- ".to_vec()), 0..24)) {
            let path = without_query(&raw);
            if let Some(normal) = already_normal(path) {
                proptest::prop_assert_eq!(resolve(path), normal);
            }
            proptest::prop_assert_eq!(normalize(&raw), resolve(path));
        }

        /// The same over paths built from segments, most of which the
        /// shortcut takes: it must still refuse each odd one.
        #[test]
        fn the_shortcut_agrees_with_the_general_case_on_segmented_paths(
            segments in proptest::collection::vec(proptest::sample::select(
                vec!["a", "b.c", ":@!", "~-_", "", ".", "..", "...", ".a", "a;b", "%41", "a b"]), 0..6),
            lead in proptest::bool::weighted(0.9)) {
            let raw = format!("{}{}", if lead { "/" } else { "" }, segments.join("/"));
            let raw = raw.as_bytes();
            if let Some(normal) = already_normal(raw) {
                proptest::prop_assert_eq!(resolve(raw), normal);
            }
            proptest::prop_assert_eq!(normalize(raw), resolve(raw));
        }

        #[test]
        fn normal_forms_are_fixed_points(raw in proptest::collection::vec(
            proptest::sample::select(b"/.;%2fF6cC?a\\xe\xc3".to_vec()), 0..24)) {
            let once = normalize(&raw);
            proptest::prop_assert_eq!(normalize(once.as_bytes()), once.clone());
            proptest::prop_assert!(once.starts_with('/'));
            proptest::prop_assert!(!once.contains("//"));
            proptest::prop_assert!(once == "/" || !once.ends_with('/'));
            proptest::prop_assert!(!once.split('/').any(|s| s == "." || s == ".."));
        }
    }
}
