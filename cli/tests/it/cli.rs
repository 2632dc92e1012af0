//! The built `meshlimit` binary, run as an operator would: exit codes and
//! what lands on stdout and stderr.

use crate::common;

use common::{rules_file, run, SECRET};
use std::process::Command;

const GOOD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/api-ten-per-second.yaml"
));
const BAD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/invalid/period-in-words.yaml"
));

/// The `meshlimit` binary with this deployment's secret and nothing else from
/// the test's environment.
fn meshlimit(args: &[&str]) -> Command {
    common::cli_command(args)
}

#[test]
fn help_lists_the_operators_commands_and_mistakes_exit_64() {
    let (code, stdout, _) = run(&mut meshlimit(&["--help"]));
    assert_eq!(code, 0);
    for command in [
        "check-rules",
        "schema",
        "key-id",
        "replay",
        "explain",
        "import",
        "override",
    ] {
        assert!(stdout.contains(command), "{command}: {stdout}");
    }
    assert!(!stdout.contains("\n  run "), "{stdout}");
    let (code, stdout, _) = run(&mut meshlimit(&["--version"]));
    assert_eq!(code, 0);
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")));
    for (args, needle) in [(&[][..], "a subcommand is required"), (&["run"][..], "run")] {
        let (code, _, stderr) = run(&mut meshlimit(args));
        assert_eq!(code, 64, "{args:?}: {stderr}");
        assert!(stderr.starts_with("meshlimit: "), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn check_rules_good_and_bad() {
    let dir = tempfile::tempdir().unwrap();
    let path = rules_file(dir.path(), GOOD);
    let (code, stdout, _) = run(&mut meshlimit(&["check-rules", &path]));
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with(&format!("{path}: ok (1 rules, version ")),
        "{stdout}"
    );

    let path = rules_file(dir.path(), BAD);
    let (code, _, stderr) = run(&mut meshlimit(&["check-rules", &path]));
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&format!(
            "{path}:3:54: rule api: field rules[0].limit.per: `1 minute` is not a period"
        )),
        "{stderr}"
    );

    // The same as JSON on stdout, for CI annotations and admission checks.
    let (code, stdout, _) = run(&mut meshlimit(&["check-rules", "--format", "json", &path]));
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["errors"][0]["file"], path.as_str());
    assert_eq!(report["errors"][0]["line"], 3);
    assert_eq!(report["errors"][0]["rule"], "api");
    assert_eq!(report["errors"][0]["field"], "limit.per");
    assert_eq!(report["errors"][0]["path"], "rules[0].limit.per");
    assert_eq!(report["errors"][0]["column"], 54);

    let (code, _, stderr) = run(&mut meshlimit(&["check-rules", "/nonexistent/rules.yaml"]));
    assert_eq!(code, 1);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn key_id_maps_a_known_key_to_its_id_and_only_with_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(
        dir.path(),
        "version: 1\nrules:\n  - name: per-key\n    key: [{ header: x-api-key }]\n    limit: { requests: 1, per: 1s }\n",
    );
    let id = |secret: &str| {
        let mut cmd = meshlimit(&["key-id", "--rules", &rules, "--rule", "per-key", "k-123"]);
        cmd.env("MESHLIMIT_SECRET", secret);
        let (code, out, err) = run(&mut cmd);
        assert_eq!(code, 0, "{err}");
        out.trim().to_string()
    };
    let a = id(SECRET);
    assert_eq!(a.len(), 32, "{a}");
    assert!(a.bytes().all(|b| b.is_ascii_hexdigit()), "{a}");
    assert_eq!(a, id(SECRET), "stable");
    assert_ne!(a, id("another-secret-0123456789abcdef0123"));
    // The same id the library computes (and metrics, logs and Redis names use).
    let secret = meshlimit_core::secret::Secret::new(SECRET.as_bytes()).unwrap();
    let key = meshlimit_core::DescriptorKey::new("per-key", ["k-123"]);
    assert_eq!(a, secret.key_ids().id(&key).to_string());
}

#[test]
fn key_id_names_a_key_of_a_trials_copy_of_a_rule_by_the_copys_id() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(
        dir.path(),
        "version: 1\nrules:\n  - name: per-key\n    key: [{ header: x-api-key }]\n    limit: { requests: 1, per: 1s }\n",
    );
    let id = |rule: &str, parts: &[&str]| {
        let mut args = vec!["key-id", "--rules", &rules, "--rule", rule];
        args.extend_from_slice(parts);
        let mut cmd = meshlimit(&args);
        cmd.env("MESHLIMIT_SECRET", SECRET);
        run(&mut cmd)
    };
    let (code, out, err) = id("per-key.trial", &["k-123"]);
    assert_eq!(code, 0, "{err}");
    // The id the trial's metrics and decision-log lines carry: its key is
    // counted under the copy's name.
    let secret = meshlimit_core::secret::Secret::new(SECRET.as_bytes()).unwrap();
    let key = meshlimit_core::DescriptorKey::new("per-key.trial", ["k-123"]);
    assert_eq!(out.trim(), secret.key_ids().id(&key).to_string());
    assert_ne!(out.trim(), id("per-key", &["k-123"]).1.trim());
    // The copy's key has the rule's parts, and only a rule the file holds has one.
    let (code, _, err) = id("per-key.trial", &[]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = id("other.trial", &["k-123"]);
    assert_eq!(code, 1);
    assert!(err.contains("other"), "{err}");
}

#[test]
fn key_id_refuses_a_rule_the_file_does_not_hold_naming_the_close_ones() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(
        dir.path(),
        "version: 1\nrules:\n  - name: search-per-api-key\n    key: [{ header: x-api-key }, method]\n    limit: { requests: 1, per: 1s }\n  - name: search-total\n    key: []\n    limit: { requests: 1, per: 1s }\n",
    );
    let (code, out, err) = run(&mut meshlimit(&[
        "key-id",
        "--rules",
        &rules,
        "--rule",
        "search-per-apikey",
        "k-1",
        "GET",
    ]));
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("has no rule `search-per-apikey`; did you mean `search-per-api-key`?"),
        "{err}"
    );
    // The key's parts are counted against the rule's.
    let (code, _, err) = run(&mut meshlimit(&[
        "key-id",
        "--rules",
        &rules,
        "--rule",
        "search-per-api-key",
        "k-1",
    ]));
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "rule search-per-api-key keys on 2 part(s) (header `x-api-key`, method), 1 given"
        ),
        "{err}"
    );
    // A one-bucket rule's key has no parts.
    let (code, out, err) = run(&mut meshlimit(&[
        "key-id",
        "--rules",
        &rules,
        "--rule",
        "search-total",
    ]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim().len(), 32, "{out}");
}
