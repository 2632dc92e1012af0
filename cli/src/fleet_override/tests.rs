use super::*;

#[test]
fn the_history_prints_a_line_a_change_and_the_refused_entries() {
    use meshlimit_store::{AuditEntry, Refusal};
    assert_eq!(history_text(&[]), "no changes recorded");
    let entry = AuditEntry {
        at_ms: 1_700_000_000_000,
        by: "alice".into(),
        what: "override clear".into(),
    };
    assert_eq!(
        history_text(&[Ok(entry), Err(Refusal::Mac)]),
        "1700000000000 alice: override clear\n(an entry that does not verify, refused: mac)"
    );
}
