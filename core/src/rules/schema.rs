//! The rules file's JSON Schema, derived (schemars) from the `config` types the
//! parser deserialises into, so the two cannot drift: `docs/rules.schema.json` is
//! this schema, and a test fails when the committed file differs from it.
//!
//! What the schema cannot say (a duplicate name, `plans.default` naming a plan,
//! a burst that takes over 366 days to refill, a cost above the burst, a period
//! over 366d) only `meshlimit check-rules` finds.

use super::RulesConfig;

/// The JSON Schema (draft 2020-12) of a rules file.
pub fn rules_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(RulesConfig).to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("title".into(), "meshlimit rules file".into());
    }
    schema
}

/// [`rules_schema`] as the committed file holds it: pretty-printed, one final newline.
pub fn rules_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&rules_schema()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/rules.schema.json");

    /// The published schema is the one the types give. Regenerate it with
    /// `MESHLIMIT_WRITE_SCHEMA=1 cargo test -p meshlimit-core --features schema schema`
    /// (or `meshlimit schema > docs/rules.schema.json`).
    #[test]
    fn the_committed_schema_is_the_generated_one() {
        let generated = rules_schema_text();
        if std::env::var_os("MESHLIMIT_WRITE_SCHEMA").is_some() {
            std::fs::write(COMMITTED, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/rules.schema.json differs from the schema the rules types give; \
             regenerate it with MESHLIMIT_WRITE_SCHEMA=1 cargo test -p meshlimit-core \
             --features schema schema"
        );
    }
}
