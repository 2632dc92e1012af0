use super::*;
use crate::key::DescriptorKey;
use crate::limit::{limit, Algorithm};
use crate::NANOS_PER_SEC;

fn compile(json: serde_json::Value) -> Result<RuleSet, RulesError> {
    let config: RulesConfig = serde_json::from_value(json)
        .map_err(|e| RulesError::from(RuleError::new(None, "-", e.to_string())))?;
    RuleSet::compile(&config)
}

fn request(path: &str, method: &str, headers: &[(&str, &str)]) -> RequestInfo {
    let headers = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    RequestInfo::new(path, method, headers)
}

fn set() -> RuleSet {
    let rules = compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "loose", "key": ["method"], "limit": {"requests": 1000, "per": "1s"}},
            {"name": "per-key", "match": {"path_prefix": "/v1/", "methods": ["get"], "headers": {"x-env": {"equals": "prod"}}},
             "key": [{"header": "x-api-key"}], "limit": {"requests": 10, "per": "1s", "burst": 20}},
            {"name": "plans", "key": [{"header": "x-customer"}],
             "plans": {"header": "x-plan", "default": "free", "limits": {
                 "free": {"requests": 1, "per": "1m"}, "pro": {"requests": 100, "per": "1m"}}}},
        ]
    }));
    match rules {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_set_knows_which_key_parts_it_uses() {
    let s = set();
    assert!(s.uses(&KeyPart::Method));
    assert!(!s.uses(&KeyPart::ClientIp));
    assert!(!s.uses(&KeyPart::Route));
}

#[test]
fn rules_are_ordered_strictest_first() {
    let s = set();
    let names: Vec<&str> = s.rules().iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["plans", "per-key", "loose"]);
}

#[test]
fn matching_checks_path_method_and_headers() {
    let s = set();
    let hit = request(
        "/v1/search?q=1",
        "GET",
        &[("x-env", "prod"), ("x-api-key", "k1")],
    );
    let names: Vec<String> = s
        .applicable(&hit)
        .unwrap()
        .iter()
        .map(|a| a.key.to_string())
        .collect();
    assert_eq!(names, ["per-key|k1", "loose|GET"]);
    for miss in [
        request(
            "/v2/search",
            "GET",
            &[("x-env", "prod"), ("x-api-key", "k1")],
        ),
        request(
            "/v1/search",
            "POST",
            &[("x-env", "prod"), ("x-api-key", "k1")],
        ),
        request(
            "/v1/search",
            "GET",
            &[("x-env", "dev"), ("x-api-key", "k1")],
        ),
        // The key cannot be formed: the rule does not apply.
        request("/v1/search", "GET", &[("x-env", "prod")]),
    ] {
        assert!(
            s.applicable(&miss)
                .unwrap()
                .iter()
                .all(|a| a.rule.name != "per-key"),
            "{miss:?}"
        );
    }
}

#[test]
fn plans_pick_their_limit_and_fall_back_to_the_default() {
    let s = set();
    let limit_of = |plan: Option<&str>| {
        let mut h = vec![("x-customer", "c1")];
        h.extend(plan.map(|p| ("x-plan", p)));
        let req = request("/", "GET", &h);
        let a = s
            .applicable(&req)
            .unwrap()
            .into_iter()
            .find(|a| a.rule.name == "plans")
            .map(|a| (a.limit.requests(), a.plan.map(str::to_string)));
        a.unwrap_or_default()
    };
    assert_eq!(limit_of(Some("pro")), (100, Some("pro".into())));
    assert_eq!(limit_of(Some("platinum")), (1, Some("free".into())));
    assert_eq!(limit_of(None), (1, Some("free".into())));
}

#[test]
fn defaults_apply_where_rules_are_silent() {
    let s = compile(serde_json::json!({
        "version": 1,
        "defaults": {"mode": "shadow", "on_failure": "open"},
        "rules": [
            {"name": "a", "key": ["client_ip"], "limit": {"requests": 1, "per": "1s"}},
            {"name": "b", "key": ["client_ip"], "limit": {"requests": 2, "per": "1s"}, "mode": "enforce", "accuracy": "exact"},
        ]
    }));
    let s = s.unwrap_or_else(|e| panic!("{e}"));
    let a = s.rule("a").unwrap_or_else(|| panic!("rule a"));
    let b = s.rule("b").unwrap_or_else(|| panic!("rule b"));
    assert_eq!(
        (a.mode, a.on_failure, a.accuracy, a.scope),
        (
            Mode::Shadow,
            FailurePolicy::Open,
            Accuracy::Fast,
            Scope::Region
        )
    );
    assert_eq!(
        (b.mode, b.on_failure, b.accuracy),
        (Mode::Enforce, FailurePolicy::Open, Accuracy::Exact)
    );
    assert_eq!(a.limits, Limits::Single(limit(1, NANOS_PER_SEC, 1)));
}

#[test]
fn the_version_is_a_content_hash() {
    assert_eq!(set().version(), set().version());
    let other = compile(
        serde_json::json!({"version": 1, "rules": [{"name": "x", "key": ["method"], "limit": {"requests": 1, "per": "1s"}}]}),
    );
    assert_ne!(
        other.map(|s| s.version().to_string()).unwrap_or_default(),
        set().version()
    );
}

#[test]
fn a_changes_block_is_written_back_only_when_it_says_something() {
    let rule =
        serde_json::json!({"name": "x", "key": ["method"], "limit": {"requests": 1, "per": "1s"}});
    let plain: RulesConfig =
        serde_json::from_value(serde_json::json!({"version": 1, "rules": [rule.clone()]})).unwrap();
    let written = serde_json::to_value(&plain).unwrap();
    assert!(written.get("changes").is_none(), "{written}");
    let guarded: RulesConfig = serde_json::from_value(serde_json::json!({
        "version": 1, "rules": [rule], "changes": {"max_tightening": 0.2}
    }))
    .unwrap();
    let written = serde_json::to_value(&guarded).unwrap();
    assert_eq!(written["changes"]["max_tightening"], 0.2, "{written}");
}

#[test]
fn periods() {
    assert_eq!(parse_period("250ms"), Ok(250_000_000));
    assert_eq!(parse_period("1m"), Ok(60 * NANOS_PER_SEC));
    assert_eq!(parse_period("2h"), Ok(7_200 * NANOS_PER_SEC));
    assert_eq!(parse_period("1d"), Ok(86_400 * NANOS_PER_SEC));
    for bad in [
        "",
        "1",
        "s",
        "1.5s",
        "-1s",
        "0s",
        "1w",
        "99999999999999999999d",
    ] {
        assert!(parse_period(bad).is_err(), "{bad}");
    }
}

mod claims;
#[cfg(feature = "yaml")]
mod fixtures;

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

fn keys(s: &RuleSet, req: &RequestInfo) -> Vec<String> {
    s.applicable(req)
        .unwrap()
        .iter()
        .map(|a| a.key.to_string())
        .collect()
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
fn bad_authority_patterns_and_query_names_name_their_field() {
    let err = compile(serde_json::json!({
        "version": 1,
        "rules": [{"name": "r", "match": {"authority": "api.example.com:80"},
                   "key": [{"query": ""}], "limit": {"requests": 1, "per": "1s"}}]
    }))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("match.authority") && err.contains("no port"),
        "{err}"
    );
    assert!(err.contains("key[0].query"), "{err}");
}

#[test]
fn a_key_part_map_names_exactly_one_known_part() {
    for part in [
        serde_json::json!({"claim": "sub", "header": "x-user"}),
        serde_json::json!({"header": "x-user", "query": "user"}),
        serde_json::json!({"cookie": "session"}),
    ] {
        let rules = serde_json::json!({"version": 1, "rules": [
            {"name": "r", "key": [part.clone()], "limit": {"requests": 1, "per": "1s"}}]});
        assert!(compile(rules).is_err(), "{part}");
    }
}

#[test]
fn a_rule_without_a_schedule_never_changes_its_limit() {
    let s = set();
    for r in s.rules() {
        assert_eq!(
            r.until_change_ns(1_000 * NANOS_PER_SEC),
            u64::MAX,
            "{}",
            r.name
        );
    }
}

#[test]
fn each_malformed_part_of_a_rule_is_refused_naming_its_field() {
    let rule = |extra: serde_json::Value| {
        let mut r = serde_json::json!({"name": "r", "key": [{"header": "x-api-key"}],
            "limit": {"requests": 1, "per": "1s"}});
        if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
            r.extend(extra.clone());
            r.retain(|_, v| !v.is_null());
        }
        serde_json::json!({"version": 1, "rules": [r]})
    };
    let free = serde_json::json!({"free": {"requests": 1, "per": "1s"}});
    let refused = [
        (
            serde_json::json!({"key": [{"header": "bad header"}]}),
            "key[0].header",
        ),
        (
            serde_json::json!({"key": [{"header": ""}]}),
            "key[0].header",
        ),
        (
            serde_json::json!({"match": {"path": "search"}}),
            "match.path",
        ),
        (
            serde_json::json!({"match": {"path_prefix": "v1/"}}),
            "match.path_prefix",
        ),
        (serde_json::json!({"name": "r".repeat(65)}), "name"),
        // A trial copy (the agent's; files may not use the suffix) of a name
        // at its longest compiles, one longer does not.
        (
            serde_json::json!({"name": format!("{}.trial", "r".repeat(65))}),
            "name",
        ),
        (
            serde_json::json!({"key": [{"query": "q".repeat(129)}]}),
            "key[0].query",
        ),
        (
            serde_json::json!({"key": [{"query": "a\u{7}"}]}),
            "key[0].query",
        ),
        (serde_json::json!({"owner": "o".repeat(129)}), "owner"),
        (serde_json::json!({"owner": ""}), "owner"),
        (
            serde_json::json!({"match": {"methods": ["G3T"]}}),
            "match.methods[0]",
        ),
        (
            serde_json::json!({"match": {"methods": [""]}}),
            "match.methods[0]",
        ),
        (
            serde_json::json!({"limit": null, "plans": {"metadata": {"filter": "", "path": ["plan"]},
                "default": "free", "limits": free}}),
            "plans.metadata",
        ),
    ];
    for (extra, field) in refused {
        let e = compile(rule(extra.clone())).unwrap_err();
        assert!(e.errors.iter().any(|e| e.field == field), "{extra}: {e}");
    }
    // At the bounds: accepted.
    let accepted = [
        serde_json::json!({"key": [{"query": "q".repeat(128)}]}),
        serde_json::json!({"owner": "o".repeat(128)}),
        serde_json::json!({"name": "r".repeat(64)}),
        serde_json::json!({"name": format!("{}.trial", "r".repeat(64))}),
        serde_json::json!({"match": {"methods": ["PURGE"]}}),
        serde_json::json!({"limit": null, "plans": {"metadata": {"filter": "my.filter", "path": ["plan"]},
            "default": "free", "limits": free}}),
    ];
    for extra in accepted {
        assert!(compile(rule(extra.clone())).is_ok(), "{extra}");
    }
}

#[test]
fn header_conditions_hold_for_any_value_sent() {
    let s = set();
    // `x-env: dev` beside `x-env: prod` does not hide the prod condition.
    let req = request(
        "/v1/search",
        "GET",
        &[("x-env", "dev"), ("x-env", "prod"), ("x-api-key", "k1")],
    );
    assert!(keys(&s, &req).contains(&"per-key|k1".to_string()));
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

/// The index against the linear scan: random rule sets (exact paths, prefixes
/// with and without a trailing slash, none; methods; a header condition; keys on
/// a header that may be sent twice) and random requests give the same rules, in
/// the same order, under the same keys, and the same errors.
mod index_vs_linear {
    use super::*;
    use proptest::prelude::*;

    /// Few segments, so paths, prefixes and neighbours (`/a`, `/ab`, `/a/b`) collide.
    fn path() -> impl Strategy<Value = String> {
        let segment = prop::sample::select(vec!["a", "ab", "b", "v1", "v10", "a.b", "%41", ""]);
        (prop::collection::vec(segment, 0..4), any::<bool>()).prop_map(|(segs, slash)| {
            let mut p = format!("/{}", segs.join("/"));
            if slash && !p.ends_with('/') {
                p.push('/');
            }
            p
        })
    }

    fn rule(i: usize) -> impl Strategy<Value = serde_json::Value> {
        let path_cond = prop_oneof![
            Just(None),
            path().prop_map(|p| Some(("path", p))),
            path().prop_map(|p| Some(("path_prefix", p))),
            // A prefix that ends mid-segment (`/x/v` covers `/x/v1` and `/x/v10`).
            (path(), prop::sample::select(vec!["a", "v", "v1"])).prop_map(|(p, tail)| Some((
                "path_prefix",
                format!("{}/{tail}", p.trim_end_matches('/'))
            ))),
        ];
        let methods = prop_oneof![
            Just(None),
            prop::sample::subsequence(vec!["GET", "POST", "PUT"], 1..3).prop_map(Some)
        ];
        let header = prop_oneof![
            Just(None),
            Just(Some(serde_json::json!({"x-env": {"equals": "prod"}}))),
            Just(Some(serde_json::json!({"x-env": {"present": true}}))),
            Just(Some(serde_json::json!({"x-env": {"present": false}}))),
        ];
        let key = prop::sample::select(vec!["method", "path", "header"]);
        (path_cond, methods, header, key, 1u32..4).prop_map(
            move |(path_cond, methods, header, key, requests)| {
                let mut m = serde_json::Map::new();
                if let Some((field, p)) = path_cond {
                    m.insert(field.into(), p.into());
                }
                if let Some(ms) = methods {
                    m.insert("methods".into(), ms.into());
                }
                if let Some(h) = header {
                    m.insert("headers".into(), h);
                }
                let key = match key {
                    "header" => serde_json::json!({"header": "x-api-key"}),
                    other => serde_json::json!(other),
                };
                serde_json::json!({
                    "name": format!("r{i}"),
                    "match": m,
                    "key": [key],
                    "limit": {"requests": requests, "per": "1s"},
                })
            },
        )
    }

    fn rule_set() -> impl Strategy<Value = RuleSet> {
        (1usize..40)
            .prop_flat_map(|n| (0..n).map(rule).collect::<Vec<_>>())
            .prop_map(|rules| {
                compile(serde_json::json!({"version": 1, "rules": rules}))
                    .unwrap_or_else(|e| panic!("{e}"))
            })
    }

    fn request_info() -> impl Strategy<Value = RequestInfo> {
        let raw_path = (
            path(),
            prop::sample::select(vec!["", "?q=1", "/", "//", "/..", ";x=1"]),
        )
            .prop_map(|(p, tail)| format!("{p}{tail}"));
        let method = prop::sample::select(vec!["GET", "POST", "PUT", "DELETE"]);
        let headers = prop::collection::vec(
            prop::sample::select(vec![
                ("x-env", "prod"),
                ("x-env", "dev"),
                ("X_Env", "prod"),
                ("x-api-key", "k1"),
                ("x_api_key", "k2"),
                ("host", "api"),
            ]),
            0..4,
        );
        (raw_path, method, headers).prop_map(|(p, m, h)| request(&p, m, &h))
    }

    type Answer = Result<Vec<(String, String, u32)>, RequestError>;

    fn answer(a: Result<Vec<Applicable<'_>>, RequestError>) -> Answer {
        a.map(|v| {
            v.iter()
                .map(|a| (a.rule.name.clone(), a.key.to_string(), a.limit.requests()))
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::testing::proptest_cases(2_000)))]

        #[test]
        fn index_answers_as_the_linear_scan(
            set in rule_set(),
            reqs in prop::collection::vec(request_info(), 1..16),
        ) {
            for req in &reqs {
                let (indexed, linear) = (set.applicable(req), set.applicable_linear(req));
                if let (Ok(a), Ok(b)) = (&indexed, &linear) {
                    let pos = |v: &Vec<Applicable<'_>>| v.iter().map(|a| a.index).collect::<Vec<_>>();
                    prop_assert_eq!(pos(a), pos(b));
                }
                prop_assert_eq!(answer(indexed), answer(linear), "{:?}", req);
            }
        }
    }
}

#[test]
fn rules_are_found_by_name() {
    let s = set();
    for (i, r) in s.rules().iter().enumerate() {
        assert!(s
            .rule(&r.name)
            .is_some_and(|f| std::ptr::eq(f, &s.rules()[i])));
    }
    assert!(s.rule("nope").is_none());
    assert!(s.rule("").is_none());
}

#[test]
fn applicable_gives_each_rule_its_position() {
    let s = set();
    let req = request(
        "/v1/search",
        "GET",
        &[("x-env", "prod"), ("x-api-key", "k1")],
    );
    for a in s.applicable(&req).unwrap() {
        assert!(std::ptr::eq(a.rule, &s.rules()[a.index]));
    }
}

#[test]
fn a_plan_rule_is_ordered_by_its_strictest_plan() {
    let s = compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "middle", "key": ["method"], "limit": {"requests": 100, "per": "1s"}},
            {"name": "plans", "key": [{"header": "x-customer"}],
             "plans": {"header": "x-plan", "default": "pro", "limits": {
                 "free": {"requests": 1, "per": "1s"}, "pro": {"requests": 1000, "per": "1s"}}}},
        ]
    }))
    .unwrap();
    let names: Vec<&str> = s.rules().iter().map(|r| r.name.as_str()).collect();
    // The free plan (1/s) is stricter than the 100/s rule, though the plan rule's
    // loosest (and default) plan is not.
    assert_eq!(names, ["plans", "middle"]);
    let plans = s.rule("plans").unwrap();
    assert_eq!(plans.limits.strictest().requests(), 1);
}

#[test]
fn one_rule_is_applied_by_name() {
    let s = set();
    let req = request(
        "/v1/search",
        "GET",
        &[("x-env", "prod"), ("x-api-key", "k1")],
    );
    let a = s.applicable_rule("per-key", &req).unwrap();
    assert_eq!(a.key, DescriptorKey::new("per-key", ["k1"]));
    assert_eq!(a.index, s.position("per-key").unwrap());
    // A rule that does not apply, and one that does not exist.
    assert!(s.applicable_rule("plans", &req).is_none());
    assert!(s.applicable_rule("nope", &req).is_none());
}

#[test]
fn the_caller_keys_rules_whatever_path_and_method_it_asks() {
    let s = set();
    // Asked on another path and method: `per-key`'s path and method conditions
    // are set aside, its header condition is not; `loose` keys on the method,
    // which depends on the request, so it is not listed.
    let caller = request(
        "/.well-known/ratelimit",
        "POST",
        &[("x-env", "prod"), ("x-api-key", "k1"), ("x-customer", "c1")],
    );
    let names: Vec<(String, String)> = s
        .keyed_by_caller(&caller)
        .unwrap()
        .into_iter()
        .map(|a| (a.rule.name.clone(), a.key.as_str().to_string()))
        .collect();
    let expect: Vec<(String, String)> = [("plans", ["c1"]), ("per-key", ["k1"])]
        .into_iter()
        .map(|(r, k)| (r.to_string(), DescriptorKey::new(r, k).as_str().to_string()))
        .collect();
    assert_eq!(names, expect);
    let staging = request("/", "GET", &[("x-env", "staging"), ("x-api-key", "k1")]);
    assert!(s.keyed_by_caller(&staging).unwrap().is_empty());
    let twice = request("/", "GET", &[("x-customer", "a"), ("x-customer", "b")]);
    assert!(s.keyed_by_caller(&twice).is_err());
}

mod schedule {
    use super::*;
    use crate::rules::expiry::parse_instant;

    // The fixtures are YAML, read with the `yaml` feature (not under WASI).
    #[cfg(feature = "yaml")]
    const RUSH: &str = include_str!("../../../tests/fixtures/rules/top-of-the-hour-rush.yaml");
    #[cfg(feature = "yaml")]
    const BROKEN: &str =
        include_str!("../../../tests/fixtures/rules/invalid/schedule-span-in-words.yaml");

    fn ns(t: &str) -> u64 {
        parse_instant(t).unwrap() * NANOS_PER_SEC
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn the_limit_in_force_follows_the_schedule() {
        let s = crate::rules::parse_rules("rush.yaml", RUSH).unwrap();
        let rule = s.rule("reports-per-api-key").unwrap();
        let in_force = |t: &str| {
            let f = rule.limit_in_force(None, ns(t));
            (f.window, f.limit.requests(), f.limit.burst())
        };
        // Tuesday: the first 30 s of the hour, then business hours, then none.
        assert_eq!(in_force("2026-12-01T10:00:00Z"), (Some(0), 100, 1000));
        assert_eq!(in_force("2026-12-01T10:00:29Z"), (Some(0), 100, 1000));
        assert_eq!(in_force("2026-12-01T10:00:30Z"), (Some(1), 200, 200));
        assert_eq!(in_force("2026-12-01T16:59:59Z"), (Some(1), 200, 200));
        assert_eq!(in_force("2026-12-01T17:00:30Z"), (None, 100, 100));
        // Saturday: the rush only.
        assert_eq!(in_force("2026-12-05T10:00:10Z"), (Some(0), 100, 1000));
        assert_eq!(in_force("2026-12-05T10:00:30Z"), (None, 100, 100));
        // A request is counted against the limit in force at its time.
        let mut req = request("/v1/reports/x", "GET", &[("x-api-key", "k")]);
        req.now_ns = ns("2026-12-05T10:00:10Z");
        let a = &s.applicable(&req).unwrap()[0];
        assert_eq!((a.window, a.limit.burst()), (Some(0), 1000));
        req.now_ns = ns("2026-12-05T10:00:40Z");
        let a = &s.applicable(&req).unwrap()[0];
        assert_eq!((a.window, a.limit.burst()), (None, 100));
    }

    #[test]
    fn a_window_writes_its_fields_over_the_rules_limit() {
        let s = compile(serde_json::json!({"version": 1, "rules": [
            {"name": "implicit", "key": ["method"], "limit": {"requests": 10, "per": "1s"},
             "schedule": [{"minutes": "00:00-60:00", "requests": 50}]},
            {"name": "explicit", "key": ["method"], "limit": {"requests": 10, "per": "1s", "burst": 20},
             "schedule": [{"hours": "00:00-24:00", "per": "1m"}]},
        ]}))
        .unwrap();
        let got = |name: &str| {
            let l = s
                .rule(name)
                .unwrap()
                .limit_in_force(None, ns("2026-12-01T10:00:00Z"))
                .limit;
            (l.requests(), l.per_ns() / NANOS_PER_SEC, l.burst())
        };
        // The burst still defaults to the requests when the rule wrote none.
        assert_eq!(got("implicit"), (50, 1, 50));
        assert_eq!(got("explicit"), (10, 60, 20));
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn a_broken_schedule_is_refused_naming_the_rule_and_field() {
        let e = crate::rules::parse_rules("s.yaml", BROKEN).unwrap_err();
        let lines: Vec<String> = e.errors.iter().map(ToString::to_string).collect();
        for want in [
            "s.yaml:5: rule reports-per-api-key: field schedule[0].minutes: `first 30 seconds` is not a span: write FROM-TO as `00:00-00:30` (MM:SS-MM:SS within every hour, up to 60:00)",
            "s.yaml:5: rule reports-per-api-key: field schedule[1].days[0]: `monday` is not a day: write mon, tue, wed, thu, fri, sat or sun",
            "s.yaml:14: rule by-plan: field schedule: a rule with `plans` cannot have a schedule: give it `limit`, or write the windowed limit as a rule of its own",
        ] {
            assert!(lines.iter().any(|l| l == want), "want {want}\ngot {lines:#?}");
        }
        assert_eq!(lines.len(), 3, "{lines:#?}");
        // Each window's limit is checked as a rule's is.
        for (window, field, message) in [
            (
                serde_json::json!({"minutes": "00:00-00:30"}),
                "schedule[0]",
                "a window changes nothing",
            ),
            (
                serde_json::json!({"burst": 5}),
                "schedule[0]",
                "a window needs `minutes",
            ),
            (
                serde_json::json!({"minutes": "00:00-00:30", "hours": "09:00-10:00", "burst": 5}),
                "schedule[0]",
                "not both",
            ),
            (
                serde_json::json!({"minutes": "00:00-00:30", "burst": 0}),
                "schedule[0].burst",
                "must be at least 1",
            ),
            (
                serde_json::json!({"minutes": "00:00-00:30", "per": "1 hour"}),
                "schedule[0].per",
                "is not a period",
            ),
            (
                serde_json::json!({"minutes": "00:00-00:30", "burst": 1}),
                "cost",
                "above the burst 1 of `schedule[0]`",
            ),
            (
                serde_json::json!({"minutes": "00:00-00:30", "days": [], "burst": 5}),
                "schedule[0].days",
                "opens on no day",
            ),
            (
                serde_json::json!({"minutes": "00:00-00:30", "name": "Top", "burst": 5}),
                "schedule[0].name",
                "[a-z0-9._-]",
            ),
        ] {
            let e = compile(serde_json::json!({"version": 1, "rules": [
                {"name": "r", "key": ["method"], "cost": 2, "limit": {"requests": 10, "per": "1s"},
                 "schedule": [window.clone()]},
            ]}))
            .unwrap_err();
            assert!(
                e.errors
                    .iter()
                    .any(|x| x.field == field && x.message.contains(message)),
                "{window}: want {field}: {message}, got {e:?}"
            );
        }
    }

    #[test]
    fn a_rule_has_at_most_32_windows() {
        let with = |n: usize| {
            let windows: Vec<_> = (0..n)
                .map(|i| serde_json::json!({"minutes": format!("{i:02}:00-{i:02}:30"), "requests": 50}))
                .collect();
            compile(serde_json::json!({"version": 1, "rules": [
                {"name": "many", "key": ["method"], "limit": {"requests": 10, "per": "1s"},
                 "schedule": windows},
            ]}))
        };
        let s = with(32).unwrap();
        assert_eq!(
            s.rule("many")
                .unwrap()
                .limit_in_force(None, ns("2026-12-01T10:31:10Z"))
                .window,
            Some(31)
        );
        let e = with(33).unwrap_err();
        assert_eq!(e.errors.len(), 1, "{e:?}");
        let x = &e.errors[0];
        assert_eq!(x.field, "schedule");
        assert_eq!(x.message, "33 windows; at most 32");
        assert_eq!(x.rule.as_deref(), Some("many"));
    }

    #[test]
    fn a_rule_without_a_schedule_keeps_its_version() {
        // `schedule` is left out of the normalised file when empty: files written
        // before schedules keep their versions.
        let s = compile(serde_json::json!({"version": 1, "rules": [
            {"name": "a", "key": ["method"], "limit": {"requests": 1, "per": "1s"}, "schedule": []},
        ]}))
        .unwrap();
        let t = compile(serde_json::json!({"version": 1, "rules": [
            {"name": "a", "key": ["method"], "limit": {"requests": 1, "per": "1s"}},
        ]}))
        .unwrap();
        assert_eq!(s.version(), t.version());
    }
}

#[test]
fn a_rule_or_the_defaults_choose_the_algorithm_and_a_window_refuses_a_burst() {
    let s = compile(serde_json::json!({
        "version": 1,
        "defaults": {"algorithm": "sliding_window"},
        "rules": [
            {"name": "bucket", "key": ["client_ip"], "algorithm": "token_bucket", "limit": {"requests": 1, "per": "1s", "burst": 3}},
            {"name": "sliding", "key": ["client_ip"], "limit": {"requests": 2, "per": "1s"}},
            {"name": "fixed", "key": ["client_ip"], "algorithm": "fixed_window",
             "plans": {"header": "x-plan", "default": "free", "limits": {"free": {"requests": 3, "per": "1m"}}}},
        ]
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let limit_of = |name: &str| {
        s.rule(name)
            .unwrap_or_else(|| panic!("rule {name}"))
            .limits
            .strictest()
    };
    assert_eq!(limit_of("bucket"), limit(1, NANOS_PER_SEC, 3));
    assert_eq!(
        limit_of("sliding"),
        limit(2, NANOS_PER_SEC, 2).with_algorithm(Algorithm::SlidingWindow)
    );
    assert_eq!(limit_of("fixed").algorithm(), Algorithm::FixedWindow);
    // Without an algorithm anywhere, a token bucket.
    let plain = compile(serde_json::json!({"version": 1, "rules": [
        {"name": "x", "key": ["method"], "limit": {"requests": 1, "per": "1s"}}]}))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        plain.rule("x").map(|r| r.limits.strictest().algorithm()),
        Some(Algorithm::TokenBucket)
    );
    // A burst on a window, written on the rule or reached through the defaults
    // or a plan, is refused naming the field.
    let refused = compile(serde_json::json!({
        "version": 1,
        "defaults": {"algorithm": "fixed_window"},
        "rules": [
            {"name": "a", "key": ["method"], "limit": {"requests": 5, "per": "1s", "burst": 9}},
            {"name": "b", "key": ["method"], "algorithm": "sliding_window",
             "plans": {"header": "x-plan", "default": "free", "limits": {"free": {"requests": 3, "per": "1m", "burst": 4}}}},
        ]
    }));
    let errors: Vec<String> = match refused {
        Ok(_) => panic!("a window with a burst was accepted"),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    };
    assert!(
        errors
            .iter()
            .any(|e| e
                .contains("rule a: field limit.burst: `burst: 9` applies to `token_bucket` only")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("rule b: field plans.limits.free.burst:")
                && e.contains("`sliding_window`")),
        "{errors:?}"
    );
}

#[test]
fn the_log_sample_comes_from_the_rule_then_the_defaults_and_is_a_share() {
    let rule = |extra: serde_json::Value| {
        let mut r = serde_json::json!({"name": "r", "key": ["method"], "limit": {"requests": 1, "per": "1s"}});
        r.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        r
    };
    let s =
        compile(serde_json::json!({"version": 1, "rules": [rule(serde_json::json!({}))]})).unwrap();
    assert_eq!(s.rules()[0].log_sample, DEFAULT_LOG_SAMPLE);
    assert_eq!(s.rules()[0].log_key, LogKey::Id);
    let s = compile(serde_json::json!({"version": 1, "defaults": {"log_sample": 0.5},
        "rules": [rule(serde_json::json!({})), {"name": "s", "key": ["method"], "limit": {"requests": 1, "per": "1s"}, "log_sample": 1, "log_key": "clear"}]}))
    .unwrap();
    assert_eq!(s.rule("r").unwrap().log_sample, 0.5);
    assert_eq!(s.rule("s").unwrap().log_sample, 1.0);
    assert_eq!(s.rule("s").unwrap().log_key, LogKey::Clear);
    let e = compile(
        serde_json::json!({"version": 1, "rules": [rule(serde_json::json!({"log_sample": 1.5}))]}),
    )
    .unwrap_err();
    assert_eq!(e.errors[0].rule.as_deref(), Some("r"));
    assert_eq!(e.errors[0].field, "log_sample");
    let e = compile(serde_json::json!({"version": 1, "defaults": {"log_sample": -0.1}, "rules": [rule(serde_json::json!({}))]})).unwrap_err();
    assert_eq!(e.errors[0].field, "defaults.log_sample");
}
