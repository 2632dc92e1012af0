//! `meshlimit check-rules DIR` against the agent's own load of the same
//! directory (`tests/fixtures/rules-dirs/`): the same problems, in the same
//! words, so a directory CI passes is one the agent loads whole.

use crate::common;

use std::path::PathBuf;

use common::{cli_command, run};
use meshlimit_agent::rules_watch::first_load;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/rules-dirs")
        .join(name)
}

#[test]
fn a_directory_is_refused_with_the_agents_own_messages() {
    for (name, expected) in [
        (
            "two-files-one-name",
            "search.yaml: rule `checkout` is also defined in checkout.yaml, which owns it",
        ),
        (
            "one-broken-among-good",
            "search.yaml:3:57: rule search: field rules[0].limit.per: `1 minute` is not a period",
        ),
    ] {
        let dir = fixture(name);
        let path = dir.display().to_string();
        let loaded = first_load(&dir).unwrap();
        let agent: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
        assert!(
            agent.iter().any(|e| e.contains(expected)),
            "{name}: {agent:?}"
        );

        let (code, stdout, stderr) = run(&mut cli_command(&["check-rules", &path]));
        assert_eq!(code, 1, "{name}: {stderr}");
        assert_eq!(stdout, "", "{name}");
        assert_eq!(stderr.lines().collect::<Vec<_>>(), agent, "{name}");

        let (code, stdout, _) = run(&mut cli_command(&[
            "check-rules",
            "--format",
            "json",
            &path,
        ]));
        assert_eq!(code, 1, "{name}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["valid"], false, "{name}");
        assert_eq!(
            report["errors"],
            serde_json::to_value(&loaded.errors).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn a_directory_the_agent_loads_whole_passes() {
    let dir = fixture("good");
    let path = dir.display().to_string();
    let (code, stdout, stderr) = run(&mut cli_command(&["check-rules", &path]));
    assert_eq!(code, 0, "{stderr}");
    let version = first_load(&dir).unwrap().set.unwrap().version().to_string();
    assert_eq!(stdout, format!("{path}: ok (2 rules, version {version})\n"));
}
