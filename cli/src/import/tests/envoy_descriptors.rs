//! How an envoyproxy/ratelimit configuration becomes rules, and what of it is refused.

use super::*;

#[test]
fn a_wildcard_path_keeps_a_bucket_per_path_unless_it_shares_its_threshold() {
    let text = "domain: d
descriptors:
  - key: path
    value: /files/*
    rate_limit: { unit: minute, requests_per_unit: 5 }
";
    let i = envoy(text, &["path=path"]);
    assert_eq!(errors(&i), Vec::<String>::new());
    let files = &i.rules[0];
    assert_eq!(
        files.matches.as_ref().unwrap().path_prefix.as_deref(),
        Some("/files/")
    );
    assert_eq!(files.key, [KeyPartConfig::Path]);
    // Shared: one bucket for every matching path: `key: []`.
    let shared = text.replace(
        "    rate_limit",
        "    share_threshold: true\n    rate_limit",
    );
    let shared = envoy(&shared, &["path=path"]);
    assert_eq!(errors(&shared), Vec::<String>::new());
    assert_eq!(shared.rules[0].key, []);
    assert_eq!(
        shared.rules[0]
            .matches
            .as_ref()
            .unwrap()
            .path_prefix
            .as_deref(),
        Some("/files/")
    );
    // An exact path: one bucket too.
    let exact = envoy(&text.replace("/files/*", "/files/x"), &["path=path"]);
    assert_eq!(exact.rules[0].key, []);
    assert_eq!(
        exact.rules[0].matches.as_ref().unwrap().path.as_deref(),
        Some("/files/x")
    );
}

#[test]
fn a_generic_key_on_a_route_is_one_bucket_for_the_route() {
    let text = "domain: d
descriptors:
  - key: generic_key
    value: search
    rate_limit: { unit: second, requests_per_unit: 1000 }
";
    let prefix = envoy(text, &["generic_key:search=path_prefix:/v1/search"]);
    assert_eq!(errors(&prefix), Vec::<String>::new());
    assert_eq!(prefix.rules[0].key, []);
    assert_eq!(
        prefix.rules[0]
            .matches
            .as_ref()
            .unwrap()
            .path_prefix
            .as_deref(),
        Some("/v1/search")
    );
    // The value as Envoy's route name.
    let route = envoy(text, &["generic_key=route"]);
    assert_eq!(errors(&route), Vec::<String>::new());
    assert_eq!(route.rules[0].key, []);
    assert_eq!(
        route.rules[0].matches.as_ref().unwrap().route.as_deref(),
        Some("search")
    );
}

#[test]
fn a_value_above_its_keys_limit_or_exempt_from_it_is_refused() {
    let base = "domain: d
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: user
    value: vip
";
    let looser = format!("{base}    rate_limit: {{ unit: minute, requests_per_unit: 601 }}\n");
    let same = format!("{base}    rate_limit: {{ unit: minute, requests_per_unit: 600 }}\n");
    let exempt = format!("{base}    rate_limit: {{ unlimited: true }}\n");
    let m = ["user=header:x-user"];
    assert!(errors(&envoy(&looser, &m))[0]
        .starts_with("rl.yaml: descriptors[1]: field rate_limit: raises"));
    let ok = envoy(&same, &m);
    assert_eq!(errors(&ok), Vec::<String>::new());
    assert_eq!(ok.rules.len(), 2);
    assert!(ok.notes.iter().any(|n| n.contains("also count against")));
    assert!(errors(&envoy(&exempt, &m))[0].contains("field rate_limit.unlimited: exempts"));
}

#[test]
fn the_peers_own_mistakes_are_refused_with_their_place() {
    let i = envoy(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limt: {}\n",
        &[],
    );
    let e = errors(&i);
    assert!(
        e[0].starts_with("rl.yaml: not an envoyproxy/ratelimit configuration"),
        "{e:?}"
    );
    assert!(
        e[0].contains("rate_limt") && e[0].contains("line 4"),
        "{e:?}"
    );
    // Aliases are refused before they are expanded, as in rules files.
    let i = envoy("domain: &d x\ndescriptors:\n  - key: *d\n", &[]);
    assert!(errors(&i)[0].contains("aliases"), "{:?}", errors(&i));
}

#[test]
fn a_value_that_makes_no_valid_rule_is_refused_at_its_entry() {
    let text = "domain: d
descriptors:
  - key: host
    value: api.example.com:8443
    descriptors:
      - key: remote_address
        rate_limit: { unit: second, requests_per_unit: 1 }
";
    let e = errors(&envoy(text, &["host=authority"]));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("rl.yaml: descriptors[0].descriptors[0]: gives rule field `match.authority`: `api.example.com:8443` is not a host"),
        "{e:?}"
    );
}

#[test]
fn every_unit_of_the_peers_is_read_and_only_a_path_pattern_is_matched() {
    let one = |unit: &str, value: &str, extra: &str| {
        envoy(
            &format!(
                "domain: d\ndescriptors:\n  - key: path\n    value: {value}\n{extra}    rate_limit: {{ unit: {unit}, requests_per_unit: 5 }}\n"
            ),
            &["path=path"],
        )
    };
    // A month is 30 days, a year 365, as the peer counts them.
    for (unit, per) in [("week", "7d"), ("month", "30d"), ("year", "365d")] {
        let i = one(unit, "/x", "");
        assert_eq!(errors(&i), Vec::<String>::new(), "{unit}");
        assert_eq!(i.rules[0].limit.as_ref().unwrap().per, per, "{unit}");
    }
    // A pattern that is no path prefix is refused.
    let e = errors(&one("minute", "files/*", ""));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("is a pattern; meshlimit matches a pattern only as a path prefix"),
        "{e:?}"
    );
    // Any one of the peer's metric options is said to be dropped.
    for option in ["detailed_metric", "value_to_metric"] {
        let i = one("minute", "/x", &format!("    {option}: true\n"));
        assert!(
            i.notes.iter().any(|n| n
                .starts_with("`detailed_metric`, `value_to_metric` and `metadata` are dropped")),
            "{option}: {:?}",
            i.notes
        );
    }
    assert!(one("minute", "/x", "")
        .notes
        .iter()
        .all(|n| !n.contains("are dropped")));
}

#[test]
fn a_method_may_be_required_twice_but_not_two_methods_and_a_host_is_a_condition() {
    let nested = |first: &str, second: &str| {
        envoy(
            &format!(
                "domain: d\ndescriptors:\n  - key: m\n    value: {first}\n    descriptors:\n      - key: m2\n        value: {second}\n        rate_limit: {{ unit: second, requests_per_unit: 1 }}\n"
            ),
            &["m=method", "m2=method"],
        )
    };
    assert_eq!(errors(&nested("POST", "post")), Vec::<String>::new());
    let e = errors(&nested("POST", "GET"));
    assert!(
        e.iter()
            .any(|e| e.contains("a second, different method `GET`")),
        "{e:?}"
    );
    let host = |value: &str| {
        envoy(
            &format!("domain: d\ndescriptors:\n  - key: host\n    value: \"{value}\"\n    rate_limit: {{ unit: second, requests_per_unit: 1 }}\n"),
            &["host=authority"],
        )
    };
    // A host is a condition: one bucket for its requests.
    let exact = host("api.example.com");
    assert_eq!(errors(&exact), Vec::<String>::new());
    assert_eq!(exact.rules[0].key, []);
    let m = exact.rules[0].matches.as_ref().unwrap();
    assert_eq!(m.authority.as_deref(), Some("api.example.com"));
}

#[test]
fn a_value_written_as_a_number_or_a_boolean_is_its_text() {
    let text = "domain: d
descriptors:
  - key: port
    value: 8443
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: beta
    value: true
    rate_limit: { unit: second, requests_per_unit: 2 }
";
    let i = envoy(text, &["port=header:x-port", "beta=header:x-beta"]);
    assert_eq!(errors(&i), Vec::<String>::new());
    let headers: Vec<_> = i
        .rules
        .iter()
        .map(|r| r.matches.as_ref().unwrap().headers.clone())
        .collect();
    assert!(format!("{headers:?}").contains("8443"), "{headers:?}");
    assert!(format!("{headers:?}").contains("true"), "{headers:?}");
}
