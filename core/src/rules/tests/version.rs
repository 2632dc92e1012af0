//! A set's content-hash version, and the `changes` block written back.

use super::*;

#[test]
fn the_version_is_a_content_hash() {
    assert_eq!(set().version(), set().version());
    let other = compile(
        serde_json::json!({"version": 1, "rules": [{"name": "x", "key": ["method"], "limit": {"requests": 1, "per": "1s"}}]}),
    );
    assert_ne!(
        other.map(|s| s.version().to_string()).unwrap_or_default(),
        set().version()
    );
}

#[test]
fn a_changes_block_is_written_back_only_when_it_says_something() {
    let rule =
        serde_json::json!({"name": "x", "key": ["method"], "limit": {"requests": 1, "per": "1s"}});
    let plain: RulesConfig =
        serde_json::from_value(serde_json::json!({"version": 1, "rules": [rule.clone()]})).unwrap();
    let written = serde_json::to_value(&plain).unwrap();
    assert!(written.get("changes").is_none(), "{written}");
    let guarded: RulesConfig = serde_json::from_value(serde_json::json!({
        "version": 1, "rules": [rule], "changes": {"max_tightening": 0.2}
    }))
    .unwrap();
    let written = serde_json::to_value(&guarded).unwrap();
    assert_eq!(written["changes"]["max_tightening"], 0.2, "{written}");
}
