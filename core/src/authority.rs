//! The host a request is for, from `:authority` (HTTP/1's `Host`), in one
//! spelling, so that a rule scoped to a host, or keyed on it, sees the same
//! host however the client wrote it: ASCII lower case, the port dropped
//! (`api.example.com:8443` is `api.example.com`), and one trailing dot dropped
//! (`api.example.com.` names the same host). IPv6 literals keep their brackets
//! (`[::1]:80` is `[::1]`).

/// The normal form of an authority (or of a host written in a rule).
pub fn normalize(raw: &[u8]) -> String {
    // Userinfo is not part of the host (HTTP forbids it; Envoy refuses it).
    let raw = match raw.iter().rposition(|b| *b == b'@') {
        Some(at) => raw.get(at + 1..).unwrap_or_default(),
        None => raw,
    };
    let host = match raw.iter().rposition(|b| *b == b':') {
        // A colon after the last `]` (or in a name without brackets) starts a port.
        Some(colon)
            if !raw.contains(&b']') || raw.iter().rposition(|b| *b == b']') < Some(colon) =>
        {
            raw.get(..colon).unwrap_or_default()
        }
        _ => raw,
    };
    let host = host.strip_suffix(b".").unwrap_or(host);
    let mut out = String::with_capacity(host.len());
    for chunk in host.utf8_chunks() {
        out.push_str(&chunk.valid().to_ascii_lowercase());
        for b in chunk.invalid() {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A host pattern a rule cannot use: the pattern as written. It borrows the
/// text, so refusing one allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a host or `*.suffix` (letters, digits, `-` and `.`; no port, no other `*`)")]
pub struct HostPatternError<'a>(pub &'a str);

/// A rule's host condition: a host, or `*.suffix` (any host ending in
/// `.suffix`, at any depth, not `suffix` itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// The suffix with its leading dot: `.example.com`.
    Suffix(String),
}

impl HostPattern {
    /// The pattern a rule writes; `Err` says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, HostPatternError<'_>> {
        let (wild, host) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.');
        let ipv6 = host.starts_with('[')
            && host.ends_with(']')
            && host.get(1..host.len().saturating_sub(1)).is_some_and(|a| {
                !a.is_empty()
                    && a.chars()
                        .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'))
            });
        let name = host.trim_end_matches('.');
        let ok = ipv6 && !wild
            || (!name.is_empty()
                && name.chars().all(valid)
                && !name.split('.').any(str::is_empty)
                && host.len() - name.len() <= 1);
        if !ok {
            return Err(HostPatternError(text));
        }
        let host = normalize(host.as_bytes());
        Ok(if wild {
            Self::Suffix(format!(".{host}"))
        } else {
            Self::Exact(host)
        })
    }

    /// Whether `host` (a normal form) is one this pattern names.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            Self::Exact(h) => host == h,
            Self::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_host_is_one_host() {
        for spelling in [
            "api.example.com",
            "API.Example.COM",
            "api.example.com:8443",
            "api.example.com.",
            "Api.Example.Com.:80",
            "user@api.example.com",
            "api.example.com:",
        ] {
            assert_eq!(
                normalize(spelling.as_bytes()),
                "api.example.com",
                "{spelling}"
            );
        }
        assert_eq!(normalize(b"[::1]:8080"), "[::1]");
        assert_eq!(normalize(b"[::1]"), "[::1]");
        assert_eq!(normalize(b"10.0.0.1:80"), "10.0.0.1");
        assert_eq!(normalize(b"caf\xc3\xa9"), "caf\u{e9}");
        assert_eq!(normalize(b"a\xffb"), "a%FFb");
    }

    #[test]
    fn a_suffix_pattern_names_the_hosts_below_it_only() {
        let p = HostPattern::parse("*.Example.com").unwrap();
        assert_eq!(p, HostPattern::Suffix(".example.com".into()));
        assert!(p.matches("api.example.com"));
        assert!(p.matches("a.b.example.com"));
        assert!(!p.matches("example.com"));
        assert!(!p.matches("badexample.com"));
        assert!(!p.matches(".example.com"));
        let e = HostPattern::parse("api.example.com.").unwrap();
        assert!(e.matches("api.example.com"));
        assert!(!e.matches("x.api.example.com"));
        assert!(HostPattern::parse("[::1]").unwrap().matches("[::1]"));
    }

    #[test]
    fn a_pattern_with_a_port_or_an_inner_star_is_refused() {
        for bad in [
            "",
            "*",
            "*.",
            "api.example.com:80",
            "a.*.com",
            "*example.com",
            "a..b",
            // One trailing dot is the same host; two are not a host.
            "example.com..",
            "a b",
            "*.[::1]",
            ".",
            "x/y",
            "[::1",
            "::1]",
            "[]",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }
}
