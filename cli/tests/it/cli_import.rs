//! `meshlimit import`, run on peers' configuration files as a platform
//! team migrating to meshlimit would: the output passes `check-rules` and
//! `explain` shows it limiting what the peer limited; what meshlimit cannot say
//! is refused, naming the file, the entry and the field, and nothing is written.
//! The fixtures (`tests/fixtures/import/`) are written in the peers' documented
//! formats.

use crate::common;

use std::path::PathBuf;

use common::run;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name)
        .display()
        .to_string()
}

fn meshlimit(args: &[&str]) -> (i32, String, String) {
    run(&mut common::cli_command(args))
}

/// `import … --out OUT`, then `check-rules OUT`: the rules text.
fn import_and_check(args: &[&str], dir: &std::path::Path) -> (String, String) {
    let out = dir.join("imported.yaml").display().to_string();
    let (code, stdout, err) = meshlimit(&[&["import"], args, &["--out", &out]].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(stdout, "", "--out writes nothing on stdout");
    let (code, checked, check_err) = meshlimit(&["check-rules", &out]);
    assert_eq!(code, 0, "{check_err}");
    assert!(checked.contains(": ok ("), "{checked}");
    (std::fs::read_to_string(&out).unwrap(), err)
}

/// `explain` of a GET of `path` with these headers from 10.0.0.7, against the
/// rules in `rules`: the rules that apply and their keys.
fn applies(rules: &str, method: &str, path: &str, headers: &[&str]) -> Vec<String> {
    let mut args = explain_args(rules, method, path);
    args.extend(["--format", "json"]);
    for h in headers {
        args.extend(["-H", h]);
    }
    let (code, out, err) = meshlimit(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["applies"] == true)
        .map(|r| {
            format!(
                "{} {}",
                r["rule"].as_str().unwrap(),
                r["key"].as_str().unwrap()
            )
        })
        .collect()
}

/// `explain` of a `method` `path` request from 10.0.0.7 against `rules`.
fn explain_args<'a>(rules: &'a str, method: &'a str, path: &'a str) -> Vec<&'a str> {
    vec![
        "explain",
        "--rules",
        rules,
        "--method",
        method,
        "--path",
        path,
        "--client-ip",
        "10.0.0.7",
    ]
}

/// Every one of the `rules` rules of an imported file counts a fixed window.
fn assert_every_rule_is_a_fixed_window(text: &str, rules: usize) {
    let v: serde_json::Value = serde_saphyr::from_str(text).unwrap();
    let rules_found = v["rules"].as_array().unwrap();
    assert_eq!(rules_found.len(), rules, "{text}");
    for rule in rules_found {
        assert_eq!(rule["algorithm"], "fixed_window", "{rule}");
    }
}

/// `explain`'s text for a request from 10.0.0.7.
fn explain_text(rules: &str, method: &str, path: &str) -> String {
    let (code, out, err) = meshlimit(&explain_args(rules, method, path));
    assert_eq!(code, 0, "{err}");
    out
}

const EDGE_MAP: [&str; 8] = [
    "--map",
    "generic_key:reports=path_prefix:/reports/",
    "--map",
    "api_key=header:x-api-key",
    "--map",
    "http_method=method",
    "--map",
    "path=path",
];

#[test]
fn an_envoy_ratelimit_configuration_becomes_rules_that_pass_check_rules() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("ratelimit-edge.yaml");
    let (text, err) = import_and_check(
        &[&["--from", "envoy-ratelimit", &file], &EDGE_MAP[..]].concat(),
        dir.path(),
    );
    // Every approximation is a comment in the file and a line on stderr.
    for note in [
        "domain `edge` is dropped",
        "path pattern `/files/*`: a prefix of the normalised path",
        "descriptors[3]: requests with this `api_key` also count against the rule for every `api_key`",
        "descriptors[5] (`unlimited`) gives no rule",
    ] {
        assert!(text.contains(&format!("# - {note}")), "{note}\n{text}");
        assert!(err.contains(&format!("approximation: {note}")), "{note}\n{err}");
    }
    assert!(
        err.ends_with("ratelimit-edge.yaml: 6 rules imported\n"),
        "{err}"
    );
    // The peer counts fixed windows, aligned to the clock: so does every rule,
    // and that is no approximation.
    assert_every_rule_is_a_fixed_window(&text, 6);
    assert!(!text.contains("fixed windows"), "{text}");
    let rules = dir.path().join("imported.yaml").display().to_string();
    assert!(
        explain_text(&rules, "GET", "/").contains("limit 10 per 1s (fixed_window)"),
        "{}",
        explain_text(&rules, "GET", "/")
    );
    // Every client address: 10 a second.
    assert_eq!(
        applies(&rules, "GET", "/", &[]),
        ["edge.remote_address edge.remote_address|10.0.0.7"]
    );
    // The reports pages: also 2 a minute per client (the generic_key's route).
    assert_eq!(
        applies(&rules, "GET", "/reports/q3", &[]),
        [
            "edge.generic_key_reports.remote_address edge.generic_key_reports.remote_address|10.0.0.7",
            "edge.remote_address edge.remote_address|10.0.0.7",
        ]
    );
    // A trial key's POST: the per-key limit, the trial key's (shadow) limit,
    // and its writes, one bucket for all of them (strictest first).
    assert_eq!(
        applies(&rules, "POST", "/orders", &["x-api-key: trial-key"]),
        [
            "edge.api_key_trial-key edge.api_key_trial-key",
            "trial-writes trial-writes",
            "edge.api_key edge.api_key|trial-key",
            "edge.remote_address edge.remote_address|10.0.0.7",
        ]
    );
    // Each file under /files/ its own 30 a day.
    assert_eq!(
        applies(&rules, "GET", "/files/a.pdf", &[])[0],
        "edge.path_files edge.path_files|/files/a.pdf"
    );
    // Without --out the same rules go to stdout.
    let (code, stdout, _) = meshlimit(
        &[
            &["import", "--from", "envoy-ratelimit", &file],
            &EDGE_MAP[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0);
    assert_eq!(stdout, text);
}

/// What the shop's wasm-shim puts in descriptor 0.
const SHOP_MAP: [&str; 6] = [
    "--map",
    "req.method=method",
    "--map",
    "req.path=path",
    "--map",
    "user_id=header:x-user-id",
];

#[test]
fn a_limitador_limits_file_becomes_rules_that_pass_check_rules() {
    let dir = tempfile::tempdir().unwrap();
    let (text, _) = import_and_check(
        &[
            &["--from", "limitador", &fixture("limitador-limits.yaml")],
            &SHOP_MAP[..],
            &["--map", "tenant=header:x-tenant"],
        ]
        .concat(),
        dir.path(),
    );
    assert!(
        text.contains("# - namespaces `shop.example.com` are dropped"),
        "{text}"
    );
    // Limitador counts fixed windows too, but starts a counter's window at its
    // first request: the one difference is said.
    assert_every_rule_is_a_fixed_window(&text, 3);
    assert!(
        text.contains("# - Limitador starts a counter's window at its first request"),
        "{text}"
    );
    let rules = dir.path().join("imported.yaml").display().to_string();
    assert_eq!(
        applies(&rules, "POST", "/cart", &["x-user-id: u1", "x-tenant: t1"]),
        [
            "writes-per-user writes-per-user|u1",
            "per-tenant-daily per-tenant-daily|t1",
        ]
    );
    // No variables: one bucket for the path, keyed on the (constant) path.
    assert_eq!(
        applies(&rules, "GET", "/catalogue", &[]),
        ["shop.example.com.limit-1 shop.example.com.limit-1"]
    );
}

/// stderr is these refusals of `file`, in this order (each line starting so).
fn assert_refusals(file: &str, err: &str, expected: &[&str]) {
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{err}");
    for (line, want) in lines.iter().zip(expected) {
        assert!(
            line.starts_with(&format!("{file}: {want}")),
            "{line}\nwanted {want}"
        );
    }
}

#[test]
fn what_meshlimit_cannot_express_is_refused_naming_file_entry_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("imported.yaml");
    let file = fixture("ratelimit-refused.yaml");
    let (code, stdout, err) = meshlimit(&[
        "import",
        "--from",
        "envoy-ratelimit",
        &file,
        "--out",
        &out.display().to_string(),
        "--map",
        "user=header:x-user",
        "--map",
        "tenant=header:x-tenant",
        "--map",
        "bot=header:x-bot",
    ]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(stdout, "");
    assert!(!out.exists(), "nothing is written when anything is refused");
    let expected = [
        "descriptors[3]: field rate_limit: raises one value above the limit of every `user` (60 per 1m)",
        "descriptors[4].descriptors[0]: field rate_limit.replaces: meshlimit applies every rule",
        "descriptors[5]: field rate_limit.requests_per_unit: 0 refuses every request",
        "descriptors[6]: field rate_limit.unit: `fortnight` is not one of second, minute",
        "descriptors[1]: field value: meshlimit cannot match a request on a value of its client IP (`192.0.2.7`)",
        "not imported (5 refusals); nothing written",
    ];
    assert_refusals(&file, &err, &expected);

    let file = fixture("limitador-refused.yaml");
    let (code, _, err) =
        meshlimit(&[&["import", "--from", "limitador", &file], &SHOP_MAP[..]].concat());
    assert_eq!(code, 1);
    let expected = [
        "limits[0]: field conditions[1]: `descriptors[0]['req.path'] != '/health'`: meshlimit has no `!=` condition",
        "limits[1] (two-at-once): field conditions[0]: `descriptors[0].tier == 'free' && descriptors[0].region == 'eu'`: meshlimit imports conditions of the form",
        "limits[2]: field max_value: 0 refuses every request",
        "limits[2]: field variables[0]: `descriptors[1].user_id` is not `descriptors[0].KEY`",
        "not imported (4 refusals); nothing written",
    ];
    assert_refusals(&file, &err, &expected);
}

#[test]
fn a_file_in_the_other_format_or_a_bad_mapping_is_refused() {
    let (code, _, err) = meshlimit(&[
        "import",
        "--from",
        "limitador",
        &fixture("ratelimit-edge.yaml"),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("not a Limitador limits file"), "{err}");
    let (code, _, err) = meshlimit(&[
        "import",
        "--from",
        "envoy-ratelimit",
        &fixture("ratelimit-edge.yaml"),
        "--map",
        "api_key=cookie:session",
    ]);
    assert_eq!(code, 64);
    assert!(
        err.starts_with("meshlimit: --map `api_key=cookie:session`: write KEY=TARGET"),
        "{err}"
    );
}
