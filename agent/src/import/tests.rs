use meshlimit_core::rules::config::KeyPartConfig;
use meshlimit_core::rules::MAX_RULE_NAME;

use super::rule::unique_name;
use super::*;

fn mapping(options: &[&str]) -> Mapping {
    let options: Vec<String> = options.iter().map(|s| s.to_string()).collect();
    Mapping::from_options(&options).unwrap()
}

fn envoy(text: &str, options: &[&str]) -> Imported {
    convert(
        ImportFormat::EnvoyRatelimit,
        "rl.yaml",
        text,
        &mapping(options),
    )
}

fn errors(i: &Imported) -> Vec<String> {
    i.errors.iter().map(ToString::to_string).collect()
}

#[test]
fn mappings_are_read_and_mistakes_refused() {
    let m = mapping(&[
        "user=header:X-User",
        "q=query:api_key",
        "generic_key:slow=path_prefix:/reports/",
        "header_match:beta=header:x-beta=yes",
        "generic_key:all=any",
    ]);
    assert_eq!(m.keys.get("user"), Some(&Target::Header("x-user".into())));
    assert_eq!(m.keys.get("q"), Some(&Target::Query("api_key".into())));
    assert_eq!(m.keys.get("remote_address"), Some(&Target::ClientIp));
    assert_eq!(
        m.values.get(&("generic_key".into(), "slow".into())),
        Some(&Condition::PathPrefix("/reports/".into()))
    );
    assert_eq!(
        m.values.get(&("header_match".into(), "beta".into())),
        Some(&Condition::Header("x-beta".into(), Some("yes".into())))
    );
    for bad in [
        "user",
        "user=cookie:x",
        "=client_ip",
        "k:v=path:reports",
        "k:v=nothing",
        "user=header:",
    ] {
        let options = vec![bad.to_string()];
        assert!(Mapping::from_options(&options).is_err(), "{bad}");
    }
}

#[test]
fn names_are_valid_and_unique() {
    let mut taken = BTreeSet::new();
    assert_eq!(
        unique_name("Edge.Path_/files/*", &mut taken),
        "edge.path_-files"
    );
    assert_eq!(
        unique_name("edge.path_-files", &mut taken),
        "edge.path_-files-2"
    );
    let long = "x".repeat(100);
    let a = unique_name(&long, &mut taken);
    let b = unique_name(&long, &mut taken);
    assert_eq!(a.len(), MAX_RULE_NAME);
    assert_eq!(b.len(), MAX_RULE_NAME);
    assert!(b.ends_with("-2"));
    assert_eq!(unique_name("***", &mut taken), "rule");
}

#[test]
fn periods_take_the_largest_whole_unit() {
    assert_eq!(period(1), "1s");
    assert_eq!(period(90), "90s");
    assert_eq!(period(120), "2m");
    assert_eq!(period(7_200), "2h");
    assert_eq!(period(30 * 86_400), "30d");
}

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
    // Shared: one bucket for every matching path, and no constant key to count
    // it under: refused rather than given a bucket per path.
    let shared = text.replace(
        "    rate_limit",
        "    share_threshold: true\n    rate_limit",
    );
    let e = errors(&envoy(&shared, &["path=path"]));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with(
            "rl.yaml: descriptors[0]: the peer counts every matching request in one bucket"
        ),
        "{e:?}"
    );
    // An exact path is its own constant key.
    let exact = envoy(&text.replace("/files/*", "/files/x"), &["path=path"]);
    assert_eq!(exact.rules[0].key, [KeyPartConfig::Path]);
    assert_eq!(
        exact.rules[0].matches.as_ref().unwrap().path.as_deref(),
        Some("/files/x")
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
fn unmapped_keys_are_refused_once_naming_the_option_to_give() {
    let text = "domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: user
        rate_limit: { unit: second, requests_per_unit: 1 }
      - key: ip
        rate_limit: { unit: second, requests_per_unit: 2 }
";
    let e = errors(&envoy(text, &["ip=client_ip"]));
    assert_eq!(
        e,
        [
            "rl.yaml: descriptors[0]: field key: descriptor key `tenant` names no request part: \
             say which with --map tenant=TARGET (client_ip, method, path, authority, route, \
             cluster, header:NAME, query:NAME, claim:NAME)",
            "rl.yaml: descriptors[0].descriptors[0]: field key: descriptor key `user` names no \
             request part: say which with --map user=TARGET (client_ip, method, path, authority, \
             route, cluster, header:NAME, query:NAME, claim:NAME)",
        ]
    );
}

#[test]
fn limitador_limits_become_rules() {
    let text = "- namespace: ns
  max_value: 3
  seconds: 3600
  conditions: [\"descriptors[0]['m'] == 'POST'\", \"descriptors[0].host == 'api.example.com'\"]
  variables: [\"descriptors[0].k\"]
";
    let i = convert(
        ImportFormat::Limitador,
        "l.yaml",
        text,
        &mapping(&["m=method", "host=authority", "k=query:api_key"]),
    );
    assert_eq!(errors(&i), Vec::<String>::new());
    let r = &i.rules[0];
    assert_eq!(r.name, "ns.limit-0");
    assert_eq!(r.key, [KeyPartConfig::Query("api_key".into())]);
    let m = r.matches.as_ref().unwrap();
    assert_eq!(m.methods.as_deref(), Some(&["POST".to_string()][..]));
    assert_eq!(m.authority.as_deref(), Some("api.example.com"));
    assert_eq!(r.limit.as_ref().unwrap().per, "1h");
    let text = render(&i, "limitador `l.yaml`").unwrap();
    meshlimit_core::rules::parse_rules("out.yaml", &text).unwrap();
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
fn a_claim_is_a_key_part_and_the_destination_cluster_a_condition() {
    let text = "domain: d
descriptors:
  - key: destination_cluster
    value: \"outbound|9080||reviews.shop.svc.cluster.local\"
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: destination_cluster
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: user
    value: alice
    rate_limit: { unit: minute, requests_per_unit: 5 }
";
    let i = envoy(text, &["user=claim:sub"]);
    let r = &i.rules[0];
    assert_eq!(
        r.key,
        [KeyPartConfig::Metadata(
            meshlimit_core::metadata::MetadataPath::claim("sub")
        )]
    );
    assert_eq!(
        r.matches.as_ref().unwrap().cluster.as_deref(),
        Some("outbound|9080||reviews.shop.svc.cluster.local")
    );
    assert_eq!(i.rules.len(), 1);
    let e = errors(&i);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].contains("descriptor key `destination_cluster` (the upstream cluster) has no value"),
        "{e:?}"
    );
    assert!(
        e[1].contains("on a value of its JWT claim `sub` (`alice`)"),
        "{e:?}"
    );
    let text = render(&i, "envoy-ratelimit `rl.yaml`").unwrap();
    assert!(text.contains("claim: sub"), "{text}");
}

/// The committed peer files (`agent/tests/fixtures/import/`, which `cli_import`
/// imports through the binary), imported in-process with the same `--map`s:
/// the rules text, or the refusals, byte for byte as committed beside them
/// (`<fixture>.imported.yaml`, `<fixture>.refusals.txt`). After a deliberate
/// change of the importers, `MESHLIMIT_WRITE_IMPORTS=1 cargo test -p
/// meshlimit-agent --lib the_committed_peer_files` rewrites them; the diff is
/// then the change a user sees.
#[test]
fn the_committed_peer_files_import_to_the_committed_rules_and_refusals() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import");
    let edge = [
        "generic_key:reports=path_prefix:/reports/",
        "api_key=header:x-api-key",
        "http_method=method",
        "path=path",
    ];
    let shop = [
        "req.method=method",
        "req.path=path",
        "user_id=header:x-user-id",
        "tenant=header:x-tenant",
    ];
    let refused = [
        "user=header:x-user",
        "tenant=header:x-tenant",
        "bot=header:x-bot",
    ];
    let write = std::env::var_os("MESHLIMIT_WRITE_IMPORTS").is_some();
    let mut stale = Vec::new();
    for (format, file, map, expected) in [
        (
            ImportFormat::EnvoyRatelimit,
            "ratelimit-edge.yaml",
            &edge[..],
            "ratelimit-edge.imported.yaml",
        ),
        (
            ImportFormat::Limitador,
            "limitador-limits.yaml",
            &shop[..],
            "limitador-limits.imported.yaml",
        ),
        (
            ImportFormat::EnvoyRatelimit,
            "ratelimit-refused.yaml",
            &refused[..],
            "ratelimit-refused.refusals.txt",
        ),
        (
            ImportFormat::Limitador,
            "limitador-refused.yaml",
            &shop[..3],
            "limitador-refused.refusals.txt",
        ),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let imported = convert(format, file, &text, &mapping(map));
        let got = if imported.errors.is_empty() {
            render(&imported, &format!("{} `{file}`", format.as_str())).unwrap()
        } else {
            errors(&imported).iter().map(|e| format!("{e}\n")).collect()
        };
        let path = dir.join(expected);
        if write {
            std::fs::write(&path, &got).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(got.as_str()) {
            stale.push(format!("{expected}, now:\n{got}"));
        }
    }
    assert!(
        stale.is_empty(),
        "not as committed (MESHLIMIT_WRITE_IMPORTS=1 rewrites them):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_command_says_how_many_rules_it_imported_or_refusals_it_found() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import");
    let run = |file: &str, map: &[&str]| {
        let args = ImportArgs {
            from: ImportFormat::EnvoyRatelimit,
            map: map.iter().map(|m| m.to_string()).collect(),
            out: None,
            file: dir.join(file),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = import(&args, &mut out, &mut err);
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (code, text(out), text(err))
    };
    let (code, out, err) = run(
        "ratelimit-edge.yaml",
        &[
            "api_key=header:x-api-key",
            "generic_key:reports=path_prefix:/reports/",
            "http_method=method",
            "path=path",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("# Imported by `meshlimit-agent import`"),
        "{out}"
    );
    assert!(
        err.ends_with("ratelimit-edge.yaml: 6 rules imported\n"),
        "{err}"
    );
    let (code, out, err) = run(
        "ratelimit-refused.yaml",
        &[
            "user=header:x-user",
            "tenant=header:x-tenant",
            "bot=header:x-bot",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert!(
        err.ends_with("ratelimit-refused.yaml: not imported (5 refusals); nothing written\n"),
        "{err}"
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
fn a_value_mapping_with_nothing_to_match_is_refused() {
    for bad in [
        "k:v=method:",
        "k:v=authority:",
        "k:v=header:",
        "k:v=header:=yes",
    ] {
        let options = vec![bad.to_string()];
        assert!(Mapping::from_options(&options).is_err(), "{bad}");
    }
    let m = mapping(&[
        "k:v=method:POST",
        "k:w=authority:api.example.com",
        "k:x=header:x-beta",
    ]);
    assert_eq!(
        m.values.get(&("k".into(), "x".into())),
        Some(&Condition::Header("x-beta".into(), None))
    );
    assert_eq!(
        m.values.get(&("k".into(), "v".into())),
        Some(&Condition::Method("POST".into()))
    );
}

#[test]
fn a_limitador_window_may_be_up_to_366_days() {
    let limit = |seconds: u64| {
        let text = format!(
            "- namespace: ns\n  max_value: 3\n  seconds: {seconds}\n  conditions: []\n  variables: [\"descriptors[0].k\"]\n"
        );
        convert(
            ImportFormat::Limitador,
            "l.yaml",
            &text,
            &mapping(&["k=header:x-k"]),
        )
    };
    let most = 366 * 86_400;
    let i = limit(most);
    assert_eq!(errors(&i), Vec::<String>::new());
    assert_eq!(i.rules[0].limit.as_ref().unwrap().per, "366d");
    let e = errors(&limit(most + 1));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("field seconds: 31622401 is not from 1 to 31622400 (366 days)"),
        "{e:?}"
    );
}

#[test]
fn a_method_may_be_required_twice_but_not_two_methods_and_a_wildcard_host_is_no_key() {
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
    let exact = host("api.example.com");
    assert_eq!(errors(&exact), Vec::<String>::new());
    assert_eq!(exact.rules[0].key, [KeyPartConfig::Authority]);
    let wildcard = host("*.example.com");
    assert!(
        wildcard
            .rules
            .iter()
            .all(|r| r.key != [KeyPartConfig::Authority]),
        "{:?}",
        wildcard.rules
    );
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
