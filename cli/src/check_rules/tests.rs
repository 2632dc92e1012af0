use super::*;

fn check_as(format: CheckFormat, content: &str) -> (u8, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.yaml");
    std::fs::write(&path, content).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = CliError::code_of(&check_rules(&path, format, &mut out, &mut err));
    let text = |b: Vec<u8>| {
        String::from_utf8(b)
            .unwrap()
            .replace(&path.display().to_string(), "PATH")
    };
    (code, text(out), text(err))
}

fn check(content: &str) -> (u8, String, String) {
    check_as(CheckFormat::Text, content)
}

#[test]
fn good_and_bad_files() {
    let (code, out, _) = check(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/one-rule.yaml"
    )));
    assert_eq!(code, 0);
    assert!(out.starts_with("PATH: ok (1 rules, version "), "{out}");
    let (code, _, err) = check(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/invalid/zero-requests.yaml"
    )));
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "PATH:3:38: rule a: field rules[0].limit.requests: must be at least 1\n"
    );
}

#[test]
fn json_names_file_line_rule_field_and_message() {
    let (code, out, err) = check_as(
        CheckFormat::Json,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/one-rule.yaml"
        )),
    );
    assert_eq!((code, err.as_str()), (0, ""));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["valid"], true);
    assert_eq!(report["rules"], 1);
    assert_eq!(report["errors"], json!([]));

    let (code, out, err) = check_as(
        CheckFormat::Json,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/invalid/mistakes-in-two-rules-and-the-top-level.yaml"
        )),
    );
    assert_eq!((code, err.as_str()), (1, ""));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["file"], "PATH");
    assert_eq!(report["valid"], false);
    let errors = report["errors"].as_array().unwrap();
    let seen: Vec<_> = errors
        .iter()
        .map(|e| {
            (
                e["file"].as_str(),
                e["line"].as_u64(),
                e["rule"].as_str(),
                e["field"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (Some("PATH"), Some(3), Some("a"), Some("limt")),
            // The line of the field, not of its rule.
            (Some("PATH"), Some(5), Some("b"), Some("key[0]")),
            (Some("PATH"), Some(7), None, Some("extra")),
        ]
    );
    assert!(errors.iter().all(|e| e["message"].is_string()));

    // A YAML syntax error: line and column.
    let (_, out, _) = check_as(CheckFormat::Json, "version: 1\nrules: [\n");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &report["errors"][0];
    assert!(e["line"].is_u64() && e["column"].is_u64(), "{e}");
}

#[test]
fn unreadable_is_one_line() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let path = Path::new("/nonexistent/r.yaml");
    let code = CliError::code_of(&check_rules(path, CheckFormat::Text, &mut out, &mut err));
    assert_eq!(code, 1);
    let err = String::from_utf8(err).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("/nonexistent/r.yaml: cannot read:"));

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = CliError::code_of(&check_rules(path, CheckFormat::Json, &mut out, &mut err));
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["errors"][0]["line"], serde_json::Value::Null);
}

#[test]
fn an_aggregate_rule_is_said_to_count_every_request_in_one_bucket() {
    let text = "version: 1\nrules:\n  - name: search-total\n    match: { path_prefix: /v1/search }\n    key: []\n    limit: { requests: 1000, per: 1s }\n";
    let (code, out, _) = check(text);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("PATH: rule search-total: `key: []`: every request it matches counts in one bucket, whoever sends it (1000 per 1s in total)"),
        "{out}"
    );
    let (_, out, _) = check_as(CheckFormat::Json, text);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["aggregate"], serde_json::json!(["search-total"]));
}
