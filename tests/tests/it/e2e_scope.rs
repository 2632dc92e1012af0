//! End to end, as an attacker tries it: rules keyed on a query parameter or on
//! the request's host, and rules scoped to a host, through real Envoy (the root
//! bootstrap), the real filter and the real agent. Requests go out as raw
//! HTTP/1.1, byte for byte as written here: no client library re-spells them.
//! Each test prints what it saw, for the closing notes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use meshlimit_tests::{AgentOptions, Stack};

const RULES: &str = r#"
version: 1
rules:
  - name: by-param
    match: { path: /search }
    key: [{ query: api_key }]
    limit: { requests: 2, per: 1h }
    accuracy: exact
  - name: api-host
    match: { authority: api.example.com, path_prefix: /host/ }
    key: [authority]
    limit: { requests: 2, per: 1h }
    accuracy: exact
  - name: tenants
    match: { authority: "*.tenants.example.com", path_prefix: /tenant/ }
    key: [authority]
    limit: { requests: 1, per: 1h }
    accuracy: exact
"#;

/// `GET target` with this `Host` header, as raw bytes; the status code.
fn status(port: u16, target: &str, host: &str) -> u16 {
    let req = format!("GET {target} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    meshlimit_tests::raw_status(port, req.as_bytes())
}

fn stack() -> Stack {
    Stack::start_with(AgentOptions::new(RULES), |c| c)
}

#[test]
fn no_spelling_of_a_query_key_walks_around_its_rule() {
    let stack = stack();
    let port = stack.envoy.port();
    let get = |target: &str| status(port, target, "x");
    assert_eq!(get("/search?api_key=victim"), 200);
    assert_eq!(get("/search?api_key=victim"), 200);
    // The used-up key under other spellings: still that key.
    let same: Vec<(&str, u16)> = [
        "/search?api_key=victim",
        "/search?api_key=%76ictim",
        "/search?api%5Fkey=victim",
        "/search?%61pi_key=vic%74im",
        "/search?x=1&api_key=victim",
        "/search?x=1;api_key=victim",
        "/search/?api_key=victim",
    ]
    .into_iter()
    .map(|t| (t, get(t)))
    .collect();
    // The used-up key beside a fresh one, under any separator or escaping,
    // and a malformed escape: refused as ambiguous.
    let ambiguous: Vec<(&str, u16)> = [
        "/search?api_key=fresh&api_key=victim",
        "/search?api_key=victim;api_key=fresh",
        "/search?api_key=victim&%61pi_key=fresh",
        "/search?api_key=victim&api_key",
        "/search?api_key=%zzvictim",
    ]
    .into_iter()
    .map(|t| (t, get(t)))
    .collect();
    // A fragment is no part of a request target: Envoy refuses it.
    let fragment = get("/search?api_key=victim#api_key=fresh");
    // `+` and `%20` are one value: its second request is over the limit.
    let plus = [
        get("/search?api_key=a+b"),
        get("/search?api_key=a%20b"),
        get("/search?api_key=a b"),
    ];
    // Names are case-sensitive, as backends read them, and `;api_key` in the
    // path is a path parameter: no key, so the rule does not apply.
    let other = [get("/search?API_KEY=victim"), get("/search;api_key=victim")];
    println!(
        "same key: {same:?}\nambiguous: {ambiguous:?}\nfragment: {fragment}\n\
         +/%20: {plus:?}\nnot the key: {other:?}"
    );
    for (target, status) in &same {
        assert_eq!(*status, 429, "{target}");
    }
    for (target, status) in &ambiguous {
        assert_eq!(*status, 400, "{target}");
    }
    assert_eq!(fragment, 400);
    assert_eq!(plus[..2], [200, 200]);
    // A raw space is no valid request line: Envoy refuses it before the filter.
    assert_eq!(plus[2], 400);
    assert_eq!(other, [200, 200]);
}

#[test]
fn no_spelling_of_a_host_walks_around_its_rule() {
    let stack = stack();
    let port = stack.envoy.port();
    assert_eq!(status(port, "/host/a", "api.example.com"), 200);
    assert_eq!(status(port, "/host/a", "api.example.com"), 200);
    let spellings: Vec<(&str, u16)> = [
        "api.example.com",
        "API.EXAMPLE.COM",
        "api.example.com:80",
        "api.example.com.",
        "Api.Example.Com.:8080",
    ]
    .into_iter()
    .map(|h| (h, status(port, "/host/a", h)))
    .collect();
    // Other hosts are out of the rule's scope.
    let others: Vec<(&str, u16)> = [
        "www.example.com",
        "api.example.com.evil",
        "xapi.example.com",
    ]
    .into_iter()
    .map(|h| (h, status(port, "/host/a", h)))
    .collect();
    println!("api.example.com spellings: {spellings:?}\nother hosts: {others:?}");
    for (host, status) in &spellings {
        assert_eq!(*status, 429, "{host}");
    }
    for (host, status) in &others {
        assert_eq!(*status, 200, "{host}");
    }
    // `*.tenants.example.com`: one bucket per tenant host, every spelling of it
    // the same bucket; the bare suffix is not under it.
    let tenants = [
        status(port, "/tenant/x", "a.tenants.example.com"),
        status(port, "/tenant/x", "A.Tenants.Example.Com:443"),
        status(port, "/tenant/x", "b.tenants.example.com"),
        status(port, "/tenant/x", "b.tenants.example.com."),
        status(port, "/tenant/x", "tenants.example.com"),
        status(port, "/tenant/x", "tenants.example.com"),
    ];
    println!("tenants: {tenants:?}");
    assert_eq!(tenants, [200, 429, 200, 429, 200, 200]);
}
