//! Periods, and malformed parts of a rule refused naming their field.

use super::*;

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
fn cold_start_admit_is_refused_where_a_request_must_be_checked_first() {
    for (extra, why) in [
        (serde_json::json!({"accuracy": "exact"}), "accuracy: exact"),
        (
            serde_json::json!({"on_failure": "closed"}),
            "on_failure: closed",
        ),
    ] {
        let mut rule = serde_json::json!({"name": "r", "key": ["method"],
            "limit": {"requests": 1, "per": "1s"}, "cold_start": "admit"});
        for (k, v) in extra.as_object().unwrap() {
            rule[k] = v.clone();
        }
        let err = compile(serde_json::json!({"version": 1, "rules": [rule]}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cold_start") && err.contains(why), "{err}");
    }
    // From the defaults too, and `wait` goes with anything.
    let set = compile(serde_json::json!({"version": 1,
    "defaults": {"cold_start": "admit"},
    "rules": [
        {"name": "a", "key": ["method"], "limit": {"requests": 1, "per": "1s"}},
        {"name": "b", "key": ["method"], "limit": {"requests": 1, "per": "1s"},
         "accuracy": "exact", "cold_start": "wait"},
    ]}))
    .unwrap();
    assert_eq!(set.rule("a").unwrap().cold_start, ColdStart::Admit);
    assert_eq!(set.rule("b").unwrap().cold_start, ColdStart::Wait);
}
