//! How Limitador limits become rules, and the longest window they may have.

use super::*;

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
