//! Every broken rules file the tests hold, checked as `check-rules` checks it:
//! each error names the file, the line and column of the offending field and
//! the field's path (`rules[3].limit.per`), in the file's words. A Rust type
//! name or serde's phrasing in any message fails the test.

use std::path::{Path, PathBuf};

use meshlimit_cli::args::CheckFormat;
use meshlimit_cli::check_rules::check_rules;
use meshlimit_cli::CliError;

/// What no message to a person may hold: Rust types, serde's words, a field
/// left unnamed.
const RUSTISMS: [&str; 14] = [
    "struct ",
    "enum ",
    "invalid type:",
    "invalid value:",
    "variant",
    "field :",
    "field -:",
    "field .:",
    "::",
    " u32",
    " u64",
    " f64",
    "sequence",
    "untagged",
];

/// The broken rules files: the core's table and the repository's `invalid/`.
fn broken_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for (dir, prefix) in [
        (root.join("core/tests/fixtures"), "bad-"),
        (root.join("tests/fixtures/rules/invalid"), ""),
    ] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with(prefix) && (name.ends_with(".yaml") || name.ends_with(".json")) {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() > 30, "{files:?}");
    files
}

/// `FILE:LINE:COLUMN: ` at the start of `line`, with numbers.
fn placed(line: &str, file: &str) -> bool {
    let Some(rest) = line.strip_prefix(&format!("{file}:")) else {
        return false;
    };
    let mut parts = rest.splitn(3, ':');
    let number =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    number(parts.next()) && number(parts.next()) && parts.next().is_some_and(|r| r.starts_with(' '))
}

#[test]
fn every_broken_fixture_is_refused_in_the_files_words_at_its_field() {
    let mut bad = Vec::new();
    for path in broken_files() {
        let file = path.display().to_string();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let refused = check_rules(&path, CheckFormat::Text, &mut out, &mut err);
        assert_eq!(CliError::code_of(&refused), 1, "{file} should be refused");
        let text = String::from_utf8(err).unwrap();
        for line in text.lines() {
            let rustism = RUSTISMS.iter().find(|r| line.contains(*r));
            let unplaced = !placed(line, &file);
            // A rule's error names its field by its path in the file.
            let unnamed = line.contains(": rule ") && !line.contains(": field rules[");
            if rustism.is_some() || unplaced || unnamed {
                bad.push(format!(
                    "{line}\n    ({rustism:?}, unplaced {unplaced}, unnamed {unnamed})"
                ));
            }
        }
        // The same errors for tools: every one with a path, a line and a column.
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let _ = check_rules(&path, CheckFormat::Json, &mut out, &mut err);
        let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
        for e in report["errors"].as_array().unwrap() {
            let syntax = e["message"].as_str().unwrap().starts_with("not valid YAML");
            let path_ok = syntax || e["path"].as_str().is_some_and(|p| !p.is_empty());
            if !(path_ok && e["line"].is_u64() && e["column"].is_u64()) {
                bad.push(format!("{file}: {e}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "messages not in the file's words:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_committed_import_refusals_hold_no_rustism() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".refusals.txt") {
            let text = std::fs::read_to_string(&path).unwrap();
            for r in RUSTISMS {
                assert!(!text.contains(r), "{}: `{r}` in\n{text}", path.display());
            }
        }
    }
}

#[test]
fn the_issues_mistakes_say_what_to_write() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/rules/invalid");
    let check = |name: &str| {
        let path = dir.join(name);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let _ = check_rules(&path, CheckFormat::Text, &mut out, &mut err);
        String::from_utf8(err)
            .unwrap()
            .replace(&format!("{}/", dir.display()), "")
    };
    assert_eq!(
        check("key-missing.yaml"),
        "key-missing.yaml:5:5: rule search: field rules[0].key: required: a list of key parts (e.g. `key: [client_ip]`), or `key: []` for one bucket shared by every request the rule matches\n"
    );
    assert_eq!(
        check("period-as-a-number.yaml"),
        "period-as-a-number.yaml:8:7: rule per-minute: field rules[0].limit.per: expected a period: a whole number and one of ms, s, m, h, d (e.g. `per: 1m`); got the number 60\n"
    );
    assert_eq!(
        check("header-condition-as-a-value.yaml"),
        "header-condition-as-a-value.yaml:7:18: rule prod-only: field rules[0].match.headers.x-env: expected a header condition, `{ equals: VALUE }` or `{ present: true }` (e.g. `x-env: { equals: prod }`); got the text \"prod\"\n"
    );
    assert_eq!(
        check("duplicate-names.yaml"),
        "duplicate-names.yaml:7:5: rule per-ip: field rules[1].name: duplicate rule name: `per-ip` is already the name of the rule at line 4; names are unique in a file\n"
    );
    assert!(
        check("yaml-broken.yaml").starts_with("yaml-broken.yaml:6:4: not valid YAML or JSON: "),
        "{}",
        check("yaml-broken.yaml")
    );
}
