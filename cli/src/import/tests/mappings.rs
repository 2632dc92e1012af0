//! `--map` options read or refused, unmapped keys, and what a claim or a cluster becomes.

use super::*;

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
