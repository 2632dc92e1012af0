//! The lease path with regions on, in process (`App::handle`, the memory store):
//! a global rule is enforced at the region's share (the floor until a share is
//! published), a region rule whole, and what was offered is counted for the
//! rebalancer.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::common;

use std::sync::Arc;

use meshlimit_agent::regions::table::{Entry, ShareTable};
use meshlimit_agent::{App, CurrentRules, LeaseSettings};
use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::LeaseAnswer;
use meshlimit_core::DescriptorKey;
use meshlimit_store::MemoryStore;

use common::{item, lease};

const RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/global-and-regional-exact.yaml"
));

fn app() -> App {
    let rules = Arc::new(CurrentRules::empty());
    rules.install(Arc::new(parse_rules("rules.yaml", RULES).unwrap()));
    App::standalone(
        rules,
        Arc::new(MemoryStore::new()),
        LeaseSettings::default(),
        meshlimit_agent::api::Auth::new(&common::secret()),
    )
    .unwrap()
}

async fn granted(app: &App, rule: &str, part: &str) -> usize {
    let mut n = 0;
    for _ in 0..60 {
        if let [LeaseAnswer::Grant { tokens, .. }] = lease(app, vec![item(rule, part, 1)]).await[..]
        {
            n += tokens as usize;
        }
    }
    n
}

#[tokio::test(start_paused = true)]
async fn a_global_rule_is_enforced_at_the_regions_share() {
    let app = app();
    let shares = app.shares_handle();
    assert_eq!(
        granted(&app, "g", "GET").await,
        50,
        "no peers: the whole burst"
    );

    assert!(shares.enable(0.1, meshlimit_core::secret::KeyIds::placeholder()));
    assert_eq!(
        granted(&app, "g", "PUT").await,
        5,
        "no share published: the floor"
    );
    assert_eq!(
        granted(&app, "r", "PUT").await,
        50,
        "a region rule is never split"
    );

    let key = DescriptorKey::new("g", ["POST"]);
    let entry = Entry {
        share: 0.5,
        demand: 100.0,
    };
    shares.install(ShareTable::new(
        Some(1),
        [(
            meshlimit_store::redis::keys::region::exchange_key(
                &meshlimit_core::secret::KeyIds::placeholder(),
                &key,
            ),
            entry,
        )]
        .into_iter()
        .collect(),
    ));
    assert_eq!(granted(&app, "g", "POST").await, 25, "the published share");

    // Offered: every ask of the split rule (60 + 60), none of the region rule.
    let offered: u64 = shares
        .take_demand()
        .values()
        .flat_map(|keys| keys.iter())
        .map(|(k, n)| {
            assert!(k.starts_with("g|"), "{k}");
            *n
        })
        .sum();
    assert_eq!(offered, 120);
}
