//! The peer's text is data: whatever it holds, it stays in its comment or is
//! refused, and the written file reads back as the rules compiled.

use meshlimit_core::rules::config::DefaultsConfig;
use meshlimit_core::rules::parse_rules;

use super::*;
use meshlimit_core::printable::hidden;

/// An envoyproxy/ratelimit file of one limit under `domain` (a YAML
/// double-quoted scalar's contents).
fn ratelimit(domain: &str) -> String {
    format!(
        "domain: \"{domain}\"
descriptors:
  - key: remote_address
    rate_limit: {{ unit: second, requests_per_unit: 10 }}
"
    )
}

/// The rules text written for `imported`, and what the agent reads in it.
fn written(imported: &Imported) -> (String, RulesConfig) {
    assert_eq!(errors(imported), Vec::<String>::new());
    let text = render(imported, "a peer `x.yaml`").unwrap();
    let read = parse_rules("imported.yaml", &text).unwrap();
    (text.clone(), read.config().unwrap().clone())
}

fn assert_only_comments_hold_peer_text(text: &str) {
    assert!(!text.chars().any(|c| c != '\n' && hidden(c)), "{text}");
    // Top level: the comments, `version` and `rules` only.
    for line in text.lines() {
        assert!(
            line.starts_with(['#', ' ', '-']) || line == "version: 1" || line == "rules:",
            "a peer's text left its comment: {line}\n{text}"
        );
    }
}

#[test]
fn a_domain_that_breaks_its_line_stays_in_its_comment() {
    // The review's file: the domain's newline started a top-level `defaults`
    // that put every rule in shadow, failing open.
    for breaks in ["\\n", "\\r", "\\r\\n", "\\L", "\\P", "\\N", "\\u202e\\n"] {
        let domain = format!("edge{breaks}defaults: {{mode: shadow, on_failure: open}}");
        let (text, read) = written(&envoy(&ratelimit(&domain), &[]));
        assert_only_comments_hold_peer_text(&text);
        assert_eq!(read.defaults, DefaultsConfig::default(), "{text}");
        assert_eq!(read.rules[0].mode, None, "{text}");
    }
}

#[test]
fn a_limitador_namespace_or_name_that_breaks_its_line_stays_in_its_comment() {
    let text = "- namespace: \"ns\\ndefaults: {mode: shadow, on_failure: open}\"
  name: \"n\\u2028defaults: {mode: shadow}\"
  max_value: 3
  seconds: 60
  variables: [\"descriptors[0].k\"]
  id: x
";
    let i = convert(
        ImportFormat::Limitador,
        "l.yaml",
        text,
        &mapping(&["k=header:x-k"]),
    );
    let (text, read) = written(&i);
    assert_only_comments_hold_peer_text(&text);
    assert_eq!(read.defaults, DefaultsConfig::default(), "{text}");
    assert!(
        text.contains("# - namespaces `ns\\u{000a}defaults: {mode: shadow, on_failure: open}`"),
        "{text}"
    );
}

#[test]
fn refusals_and_the_file_name_are_one_printable_line_each() {
    let i = envoy(
        "domain: d\ndescriptors:\n  - key: \"k\\n\\u202ex\"\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
        &[],
    );
    let e = errors(&i);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(!e[0].chars().any(hidden), "{e:?}");
    assert!(e[0].contains("`k\\u{000a}\\u{202e}x`"), "{e:?}");
    let at = Report::new("a\nb.yaml");
    let mut r = at;
    r.refuse("", "", "no");
    assert_eq!(r.errors[0].to_string(), "a\\u{000a}b.yaml: no");
}

#[test]
fn a_value_holding_a_character_that_does_not_print_is_refused() {
    for value in ["a\\u202eb", "a\\nb", "a\\u2028b", "\\u200b"] {
        let text = format!(
            "domain: d
descriptors:
  - key: tier
    value: \"{value}\"
    rate_limit: {{ unit: second, requests_per_unit: 1 }}
"
        );
        let e = errors(&envoy(&text, &["tier=header:x-tier"]));
        assert_eq!(e.len(), 1, "{value}: {e:?}");
        assert!(
            e[0].starts_with("rl.yaml: descriptors[0]: field value: holds U+"),
            "{e:?}"
        );
    }
}

#[test]
fn a_written_file_that_reads_back_as_other_rules_is_not_written() {
    let i = envoy(&ratelimit("edge"), &[]);
    let (text, _) = written(&i);
    let config = RulesConfig {
        version: SCHEMA_VERSION,
        defaults: Default::default(),
        rules: i.rules.clone(),
        changes: Default::default(),
    };
    let compiled = RuleSet::compile(&config).unwrap();
    assert!(reread(&text, &compiled).is_ok());
    let shadowed = format!("{text}defaults: {{mode: shadow}}\n");
    assert!(matches!(
        reread(&shadowed, &compiled),
        Err(RenderError::Differs)
    ));
    let hidden = text.replace("edge.remote_address", "edge.remote\u{202e}_address");
    assert!(matches!(
        reread(&hidden, &compiled),
        Err(RenderError::Hidden(0x202E))
    ));
    assert!(matches!(
        reread("rules: [", &compiled),
        Err(RenderError::Reread(_))
    ));
}
