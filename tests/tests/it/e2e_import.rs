//! A migration, end to end: the real `meshlimit import` turns a peer's
//! limits file (the fixtures the importer's own tests use, written in the
//! peers' documented formats) into a rules file, a real agent serves exactly
//! that output, and real Envoy with the filter enforces it: the limit the peer
//! set is the limit a client meets, named by the imported rule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;

use meshlimit_tests::{cli_bin, count, post, repo_root, Stack};

fn fixture(name: &str) -> String {
    repo_root()
        .join("cli/tests/fixtures/import")
        .join(name)
        .display()
        .to_string()
}

/// `meshlimit import ARGS…`: the rules text it writes on stdout.
fn import(args: &[&str]) -> String {
    let bin: PathBuf = cli_bin();
    let out = Command::new(&bin)
        .arg("import")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    assert!(
        out.status.success(),
        "import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The text of the imported rule `name` (from `- name: NAME` to the next rule).
fn rule_text<'a>(rules: &'a str, name: &str) -> &'a str {
    let start = rules
        .find(&format!("- name: {name}\n"))
        .unwrap_or_else(|| panic!("no rule {name} in:\n{rules}"));
    let rest = &rules[start + 2..];
    let end = rest.find("\n  - name: ").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

#[test]
fn an_imported_envoy_ratelimit_configuration_is_enforced_through_envoy() {
    let rules = import(&[
        "--from",
        "envoy-ratelimit",
        &fixture("ratelimit-edge.yaml"),
        "--map",
        "generic_key:reports=path_prefix:/reports/",
        "--map",
        "api_key=header:x-api-key",
        "--map",
        "http_method=method",
        "--map",
        "path=path",
    ]);
    let stack = Stack::start(&rules);
    // The reports pages: two a minute per client address, a fixed window as in
    // the peer. The third is refused by the imported rule.
    let statuses = stack.statuses(3, "/reports/monthly", &[]);
    assert_eq!(statuses, [200, 200, 429], "{rules}");
    let r = stack.get("/reports/monthly", &[]);
    assert_eq!(r.status, 429);
    let rule = r.header("x-meshlimit-rule").unwrap().to_string();
    let text = rule_text(&rules, &rule);
    assert!(
        text.contains("requests: 2") && text.contains("per: 1m"),
        "{text}"
    );
    assert!(text.contains("algorithm: fixed_window"), "{text}");
    // A fixed window of a minute: retry at its end, never later.
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "retry-after {retry}");
    // Other pages are under the looser per-address limit (10 a second).
    assert_eq!(stack.get("/catalogue", &[]).status, 200);
    // The health descriptor was `unlimited`: no rule was written for it.
    assert!(!rules.contains("health"), "{rules}");
}

#[test]
fn an_imported_limitador_file_is_enforced_through_envoy() {
    let rules = import(&[
        "--from",
        "limitador",
        &fixture("limitador-limits.yaml"),
        "--map",
        "req.method=method",
        "--map",
        "req.path=path",
        "--map",
        "user_id=header:x-user-id",
        "--map",
        "tenant=header:x-tenant",
    ]);
    let stack = Stack::start(&rules);
    let url = stack.envoy.url("/cart");
    let write = |user: &str| post(&url, &[("x-user-id", user)], "{}").status;
    // writes-per-user: five POSTs a minute per user; the sixth is refused.
    let alice: Vec<u16> = (0..6).map(|_| write("alice")).collect();
    assert_eq!(count(&alice, 200), 5, "{alice:?}\n{rules}");
    assert_eq!(alice[5], 429, "{alice:?}");
    // Another user has a window of their own; GETs are not writes.
    assert_eq!(write("bob"), 200);
    let gets = stack.statuses(3, "/cart", &[("x-user-id", "alice")]);
    assert_eq!(gets, [200, 200, 200]);
    let r = post(&url, &[("x-user-id", "alice")], "{}");
    assert_eq!(r.status, 429);
    let rule = r.header("x-meshlimit-rule").unwrap().to_string();
    assert!(rule.contains("writes-per-user"), "{rule}");
    let text = rule_text(&rules, &rule);
    assert!(text.contains("algorithm: fixed_window"), "{text}");
}
