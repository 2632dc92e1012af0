//! The most rejected keys, named by the keyed hash, and a trial's end and top keys.

use super::*;

#[test]
fn the_most_rejected_keys_are_ranked_by_id_never_in_clear() {
    let m = Fixture::new();
    let (a, b) = (
        DescriptorKey::new("r", ["customer-a"]),
        DescriptorKey::new("r", ["customer-b"]),
    );
    for _ in 0..3 {
        m.leases.lease_denied("r", &a);
    }
    m.leases.lease_denied("r", &b);
    m.leases.refresh_top_keys();
    let text = m.render().unwrap();
    assert_eq!(
        value(&text, "meshlimit_lease_denials_total", &[("rule", "r")]),
        4.0
    );
    let (id_a, id_b) = (
        m.leases.key_id(&a).to_string(),
        m.leases.key_id(&b).to_string(),
    );
    let rank = |r, id: &str| {
        sample(
            &text,
            "meshlimit_top_rejected_keys",
            &[("rank", r), ("rule", "r"), ("key", id)],
        )
    };
    assert_eq!(rank("1", &id_a), Some(3.0));
    assert_eq!(rank("2", &id_b), Some(1.0));
    assert!(!text.contains("customer-"), "{text}");
}

#[test]
fn a_trial_shows_its_end_and_the_keys_its_rules_would_reject_most() {
    use crate::rules_watch::TrialView;
    use meshlimit_store::trial::TrialClock;
    let m = Fixture::new();
    let mut trial = TrialView {
        version: "v2".into(),
        clock: TrialClock {
            start_ms: 1_000_000,
            period_ms: 600_500,
            ended_ms: None,
            held: false,
        },
        rules: vec!["r".into()],
    };
    assert_eq!(
        value(&m.render().unwrap(), "meshlimit_rules_trial_held", &[]),
        0.0
    );
    m.trial.show(Some(&trial));
    let key = DescriptorKey::new("r", ["customer-a"]);
    m.leases.lease_denied("r", &key);
    m.leases.lease_denied("r", &key);
    m.leases.lease_denied("other", &key);
    m.leases.refresh_top_keys();
    let text = m.render().unwrap();
    let id = m.leases.key_id(&key).to_string();
    assert_eq!(
        value(&text, "meshlimit_rules_trial", &[("version", "v2")]),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "meshlimit_rules_trial_end_seconds",
            &[("version", "v2")]
        ),
        1_600.5
    );
    let top = |rule, rank| {
        sample(
            &text,
            "meshlimit_trial_top_keys",
            &[("rule", rule), ("rank", rank), ("key", &id)],
        )
    };
    assert_eq!(top("r", "1"), Some(2.0));
    assert_eq!(top("other", "1"), None, "not on trial");
    // Held: it ends when an operator ends it.
    trial.clock.held = true;
    m.trial.show(Some(&trial));
    let text = m.render().unwrap();
    assert_eq!(
        value(
            &text,
            "meshlimit_rules_trial_end_seconds",
            &[("version", "v2")]
        ),
        f64::INFINITY
    );
    // The held gauge (what the held-trial alert reads) exists from the start.
    assert_eq!(value(&text, "meshlimit_rules_trial_held", &[]), 1.0);
    // Over: its series go.
    m.trial.show(None);
    m.leases.refresh_top_keys();
    let text = m.render().unwrap();
    assert_eq!(value(&text, "meshlimit_rules_trial_held", &[]), 0.0);
    assert_eq!(sample(&text, "meshlimit_rules_trial", &[]), None);
    assert_eq!(sample(&text, "meshlimit_trial_top_keys", &[]), None);
}

#[test]
fn keys_are_named_by_the_deployments_keyed_hash_once_it_is_set() {
    let ids = meshlimit_core::secret::Secret::new(&[7; 32])
        .unwrap()
        .key_ids();
    let m = Fixture::with_key_ids(ids.clone());
    let key = DescriptorKey::new("r", ["customer-a"]);
    m.leases.lease_denied("r", &key);
    m.leases.refresh_top_keys();
    let text = m.render().unwrap();
    let shown = |id: String| {
        sample(
            &text,
            "meshlimit_top_rejected_keys",
            &[("rule", "r"), ("key", &id)],
        )
    };
    assert_eq!(shown(ids.id(&key).to_string()), Some(1.0));
    assert_eq!(
        shown(
            meshlimit_core::secret::KeyIds::placeholder()
                .id(&key)
                .to_string()
        ),
        None
    );
}
