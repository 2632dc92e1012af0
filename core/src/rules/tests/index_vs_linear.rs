//! The rule index answers as the linear scan does (a property test).

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

/// A set with no path condition is matched without its path index: every
/// rule, in the set's order (strictest first), as the linear scan has it.
#[test]
fn a_set_without_paths_answers_as_the_linear_scan() {
    let set = compile(serde_json::json!({"version": 1, "rules": [
        {"name": "keyed", "key": [{"header": "x-api-key"}], "limit": {"requests": 5, "per": "1s"}},
        {"name": "posts", "match": {"methods": ["POST"]}, "key": ["method"],
         "limit": {"requests": 2, "per": "1s"}},
        {"name": "prod", "match": {"headers": {"x-env": {"equals": "prod"}}}, "key": ["path"],
         "limit": {"requests": 3, "per": "1s"}},
    ]}))
    .unwrap_or_else(|e| panic!("{e}"));
    let reqs = [
        request("/a", "GET", &[("x-api-key", "k1")]),
        request("/a/b", "POST", &[("x-env", "prod"), ("x-api-key", "k2")]),
        request("/", "POST", &[]),
        request("/", "GET", &[("x-api-key", "k1"), ("x_api_key", "k2")]),
    ];
    let named = |a: &Answer| -> Vec<String> {
        a.as_ref()
            .map_or(vec![], |v| v.iter().map(|r| r.0.clone()).collect())
    };
    let answers: Vec<Answer> = reqs.iter().map(|r| answer(set.applicable(r))).collect();
    for (req, indexed) in reqs.iter().zip(&answers) {
        assert_eq!(*indexed, answer(set.applicable_linear(req)), "{req:?}");
    }
    assert_eq!(named(&answers[0]), ["keyed"]);
    assert_eq!(named(&answers[1]), ["posts", "prod", "keyed"]);
    assert_eq!(named(&answers[2]), ["posts"]);
    assert!(answers[3].is_err(), "a key header sent twice");
}
