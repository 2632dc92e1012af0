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

/// `override ACTION --store redis://127.0.0.1:6379 --reason test`'s arguments.
fn args(action: &str) -> OverrideArgs {
    use clap::Parser;
    let cli = crate::args::Cli::try_parse_from([
        "meshlimit",
        "override",
        action,
        "--store",
        "redis://127.0.0.1:6379",
        "--reason",
        "test",
    ])
    .unwrap();
    match cli.command {
        crate::args::Command::Override(args) => args,
        other => panic!("{other:?}"),
    }
}

fn acted(action: &str, store: &dyn FleetState) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(act(&args(action), store))
        .map_err(|e| e.to_string())
}

#[test]
fn each_action_says_what_it_did_or_why_it_could_not() {
    let store = meshlimit_store::memory::MemoryStore::new();
    let on = "redis://127.0.0.1:6379";
    assert_eq!(
        acted("pin", &store),
        Err(format!(
            "{on} records no previous rules version (no agent has installed a version over \
             another yet): give --rules-version"
        ))
    );
    assert_eq!(
        acted("shadow", &store),
        Ok(format!(
            "fleet override set on {on}: every rule in shadow on every agent within their \
             poll (1 s by default)"
        ))
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(store.record_versions("v2", "v1")).unwrap();
    assert_eq!(
        acted("pin", &store),
        Ok(format!(
            "fleet override set on {on}: every agent serves rules version v1 within their \
             poll (an agent without it: every rule in shadow)"
        ))
    );
    assert_eq!(
        acted("clear", &store),
        Ok(format!(
            "fleet override cleared on {on}: the rules file's set applies again within the \
             agents' poll"
        ))
    );
    assert_eq!(
        acted("end-trial", &store),
        Err(format!("{on} records no trial to act on"))
    );
    let history = acted("history", &store).unwrap();
    assert_eq!(history.lines().count(), 4, "{history}");
    assert!(history.contains(" test: "), "{history}");
}
