//! Every spelling of a path, header, query parameter and host is one condition and one key.

use super::*;
use crate::header_list::HeaderList;

fn login_set() -> RuleSet {
    compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "login", "match": {"path": "/login", "methods": ["POST"]},
             "key": [{"header": "x-api-key"}], "limit": {"requests": 2, "per": "1h"}},
            {"name": "dir", "match": {"path_prefix": "/v1/"}, "key": ["path"],
             "limit": {"requests": 5, "per": "1s"}},
            {"name": "by-host", "key": [{"header": "host"}], "limit": {"requests": 5, "per": "1s"}},
        ]
    }))
    .unwrap()
}

#[test]
fn every_spelling_of_a_path_matches_its_rule() {
    let s = login_set();
    for path in [
        "/login",
        "/login/",
        "//login",
        "/%6Cogin",
        "/./login",
        "/login;x=1",
    ] {
        let req = request(path, "POST", &[("x-api-key", "k")]);
        assert!(keys(&s, &req).contains(&"login|k".to_string()), "{path}");
    }
    // A prefix with a trailing slash covers the directory, not its neighbours;
    // `path` key parts count the normalised path.
    assert_eq!(keys(&s, &request("/v1", "GET", &[])), ["dir|/v1"]);
    assert_eq!(keys(&s, &request("//v1/./a/", "GET", &[])), ["dir|/v1/a"]);
    assert!(keys(&s, &request("/v1x", "GET", &[])).is_empty());
}

#[test]
fn header_spellings_do_not_skip_a_rule_or_mint_a_key() {
    let s = login_set();
    // `x_api_key` is the same header as `x-api-key`, and so is `X-API-KEY`.
    for name in ["x_api_key", "X-Api-Key"] {
        let req = request("/login", "POST", &[(name, "k")]);
        assert_eq!(keys(&s, &req), ["login|k"], "{name}");
    }
    // Sent twice, under any spelling: refused, never counted under one value.
    for second in ["x-api-key", "x_api_key"] {
        let req = request(
            "/login",
            "POST",
            &[("x-api-key", "used-up"), (second, "fresh")],
        );
        assert_eq!(
            s.applicable(&req).map(|a| a.len()),
            Err(RequestError::RepeatedHeader("x-api-key".into())),
            "{second}"
        );
    }
    // A rule on `host` keys on Envoy's `:authority`.
    let req = request("/", "GET", &[(":authority", "api.example.com")]);
    assert_eq!(keys(&s, &req), ["by-host|api.example.com"]);
}

fn scoped_set() -> RuleSet {
    compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "by-param", "match": {"path": "/search"}, "key": [{"query": "api_key"}, "authority"],
             "limit": {"requests": 2, "per": "1h"}},
            {"name": "api-host", "match": {"authority": "API.example.com."}, "key": ["method"],
             "limit": {"requests": 5, "per": "1s"}},
            {"name": "tenants", "match": {"authority": "*.tenants.example.com"}, "key": ["authority"],
             "limit": {"requests": 50, "per": "1s"}},
        ]
    }))
    .unwrap()
}

#[test]
fn a_query_parameter_key_is_the_same_under_every_spelling() {
    let s = scoped_set();
    for path in [
        "/search?api_key=k+1",
        "/search?api_key=k%201",
        "/search?%61pi_key=%6B+1",
        "/search?x=1&api_key=k 1",
        "/search?x=1;api_key=k+1",
        "/search/?api_key=k+1#api_key=other",
    ] {
        let req = request(path, "GET", &[(":authority", "Other.example.com:80")]);
        assert_eq!(keys(&s, &req), ["by-param|k 1|other.example.com"], "{path}");
    }
    // Names are case-sensitive, and path parameters are not query parameters:
    // the rule does not apply, as when a key header is absent.
    for path in ["/search?API_KEY=k", "/search;api_key=k", "/search"] {
        let req = request(path, "GET", &[(":authority", "other.example.com")]);
        assert!(keys(&s, &req).is_empty(), "{path}");
    }
}

#[test]
fn a_key_parameter_sent_twice_or_malformed_is_refused() {
    let s = scoped_set();
    for path in [
        "/search?api_key=a&api_key=b",
        "/search?api_key=a;api_key=b",
        "/search?api_key=a&api%5Fkey=b",
        "/search?api_key=a&api_key",
    ] {
        let req = request(path, "GET", &[(":authority", "x.example.com")]);
        assert_eq!(
            s.applicable(&req).map(|a| a.len()),
            Err(RequestError::RepeatedQuery("api_key".into())),
            "{path}"
        );
    }
    let req = request("/search?api_key=%zz", "GET", &[]);
    assert_eq!(
        s.applicable(&req).map(|a| a.len()),
        Err(RequestError::MalformedQuery("api_key".into()))
    );
    // Elsewhere the query is not read: a repeated parameter is no error.
    let req = request("/other?api_key=a&api_key=b", "GET", &[]);
    assert_eq!(s.applicable(&req).map(|a| a.len()), Ok(0));
}

#[test]
fn a_host_condition_and_key_see_one_spelling_of_the_host() {
    let s = scoped_set();
    for host in [
        "api.example.com",
        "API.Example.Com",
        "api.example.com:8443",
        "api.example.com.",
    ] {
        for name in [":authority", "host", "Host"] {
            let req = request("/", "GET", &[(name, host)]);
            assert_eq!(keys(&s, &req), ["api-host|GET"], "{name}: {host}");
        }
    }
    for host in ["a.tenants.example.com", "A.B.Tenants.Example.com.:443"] {
        let req = request("/", "GET", &[(":authority", host)]);
        assert_eq!(
            keys(&s, &req),
            [format!(
                "tenants|{}",
                host.to_ascii_lowercase()
                    .trim_end_matches(":443")
                    .trim_end_matches('.')
            )],
            "{host}"
        );
    }
    for host in [
        "tenants.example.com",
        "example.com",
        "xapi.example.com",
        "api.example.com.evil",
    ] {
        let req = request("/", "GET", &[(":authority", host)]);
        assert!(keys(&s, &req).is_empty(), "{host}");
    }
    assert!(keys(&s, &request("/", "GET", &[])).is_empty());
    // A host key sent twice is ambiguous, like any key header.
    let req = request(
        "/",
        "GET",
        &[
            (":authority", "a.tenants.example.com"),
            ("host", "b.tenants.example.com"),
        ],
    );
    assert_eq!(
        s.applicable(&req).map(|a| a.len()),
        Err(RequestError::RepeatedHeader("host".into()))
    );
}

#[test]
fn raw_bytes_and_their_escaped_text_are_two_keys() {
    let s = set();
    let req = |v: &[u8]| {
        RequestInfo::new(
            "/v1/x",
            "GET",
            vec![
                ("x-env".to_string(), b"prod".to_vec()),
                ("x-api-key".to_string(), v.to_vec()),
            ],
        )
    };
    assert_ne!(keys(&s, &req(b"\xc3")), keys(&s, &req(b"%C3")));
}

proptest::proptest! {
    /// The filter builds a request from Envoy's header list, `:path` and
    /// `:method` in it; every other caller from the three apart. Both must
    /// see one request.
    #[test]
    fn a_request_from_its_header_list_is_the_one_built_from_its_parts(
        path in "[/a-zA-Z0-9%.;?=&_-]{0,24}",
        method in "[a-zA-Z]{0,7}",
        extra in proptest::collection::vec(("[a-z-]{1,8}", "[ -~]{0,8}"), 0..4),
    ) {
        let mut headers: Vec<(String, Vec<u8>)> = vec![
            (":path".into(), path.clone().into_bytes()),
            (":method".into(), method.clone().into_bytes()),
        ];
        headers.extend(extra.into_iter().map(|(n, v)| (n, v.into_bytes())));
        let listed = RequestInfo::from_headers(HeaderList::from_pairs(headers.clone()));
        let parts = RequestInfo::new(&path, &method, headers);
        proptest::prop_assert_eq!(format!("{listed:?}"), format!("{parts:?}"));
    }
}

#[test]
fn a_header_list_without_a_path_or_method_is_the_empty_ones() {
    let info = RequestInfo::from_headers(HeaderList::from_pairs([("x-api-key", "k")]));
    let parts = RequestInfo::new("", "", vec![("x-api-key".to_string(), b"k".to_vec())]);
    assert_eq!(format!("{info:?}"), format!("{parts:?}"));
}
