//! The tests' rules files (`tests/fixtures/rules/`): every file at the top is a
//! rules file the agent accepts (`make test` also checks each against
//! docs/rules.schema.json), and every file under `invalid/` is one it refuses.
//! A fixture in the wrong place would make a test pass for the wrong reason.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};

use meshlimit_core::rules::parse_rules;

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/rules")
}

#[test]
fn every_fixture_at_the_top_is_accepted() {
    let files = yaml_files(&fixtures());
    assert!(files.len() >= 10, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        if let Err(e) = parse_rules(&path.display().to_string(), &text) {
            panic!(
                "{} should be valid (or move it to invalid/):\n{e}",
                path.display()
            );
        }
    }
}

#[test]
fn every_fixture_under_invalid_is_refused() {
    let files = yaml_files(&fixtures().join("invalid"));
    assert!(files.len() >= 5, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            parse_rules(&path.display().to_string(), &text).is_err(),
            "{} is valid: move it out of invalid/",
            path.display()
        );
    }
}
