use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::LeaseItem;

use super::setup::validate;
use super::table::Entry;
use super::*;

const RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/global-and-regional.yaml"
));

fn item(rule: &str, part: &str, cost: u32) -> LeaseItem {
    LeaseItem {
        rule: rule.into(),
        key: DescriptorKey::new(rule, [part]),
        cost,
        plan: None,
        want: None,
    }
}

#[test]
fn without_peers_every_rule_gets_the_whole_limit_and_nothing_is_counted() {
    let set = parse_rules("t", RULES).unwrap();
    let shares = Shares::default();
    let g = set.rule("g").unwrap();
    assert_eq!(shares.share(g, &DescriptorKey::new("g", ["GET"])), 1.0);
    assert!(!shares.is_split(g));
    shares.record_offered(Some(&set), &[item("g", "GET", 1)], &[None]);
    assert!(shares.take_demand().is_empty());
}

#[test]
fn a_global_key_takes_the_floor_until_a_share_is_published() {
    let set = parse_rules("t", RULES).unwrap();
    let shares = Shares::default();
    assert!(shares.enable(0.1, KeyIds::placeholder()));
    assert!(!shares.enable(0.2, KeyIds::placeholder()), "once");
    let (g, r) = (set.rule("g").unwrap(), set.rule("r").unwrap());
    let key = DescriptorKey::new("g", ["GET"]);
    assert_eq!(shares.share(g, &key), 0.1);
    assert_eq!(shares.share(r, &DescriptorKey::new("r", ["GET"])), 1.0);
    let entry = Entry {
        share: 0.8,
        demand: 300.0,
    };
    shares.install(ShareTable::new(
        Some(7),
        [(keys::exchange_key(&KeyIds::placeholder(), &key), entry)]
            .into_iter()
            .collect(),
    ));
    assert_eq!(shares.share(g, &key), 0.8);
    assert_eq!(shares.table().period, Some(7));
}

#[test]
fn offered_demand_counts_grants_in_tokens_and_other_answers_in_cost() {
    let set = parse_rules("t", RULES).unwrap();
    let shares = Shares::default();
    shares.enable(0.1, KeyIds::placeholder());
    let items = [
        item("g", "GET", 1),
        item("g", "GET", 2),
        item("r", "GET", 1),
    ];
    let answers = [
        Some(LeaseAnswer::Grant {
            tokens: 10,
            ttl_ms: 100,
            remaining: 0,
            reset_ms: 0,
            local: false,
            from: None,
            next_ask_ms: None,
        }),
        Some(LeaseAnswer::Deny {
            retry_after_ms: 5,
            local: false,
            from: None,
        }),
        Some(LeaseAnswer::Deny {
            retry_after_ms: 5,
            local: false,
            from: None,
        }),
    ];
    shares.record_offered(Some(&set), &items, &answers);
    let demand: u64 = shares
        .take_demand()
        .values()
        .flat_map(|keys| keys.iter())
        .map(|(k, n)| {
            assert!(k.starts_with("g|"), "region rules are never counted: {k}");
            *n
        })
        .sum();
    assert_eq!(demand, 12);
}

#[test]
fn a_setup_is_refused_when_it_cannot_work() {
    let cfg = RegionsConfig {
        region: "eu".into(),
        store: StoreSpec::Redis("a:1".into()),
        peers: vec![("us".into(), StoreSpec::Redis("b:1".into()))],
        floor: 0.1,
        agent_id: "x".into(),
        credentials: Default::default(),
        peer_credentials: Default::default(),
        timeout: Duration::from_millis(250),
        key_ids: KeyIds::placeholder(),
    };
    assert!(validate(&cfg).is_ok());
    let twice = RegionsConfig {
        peers: vec![("eu".into(), StoreSpec::Redis("b:1".into()))],
        ..cfg.clone()
    };
    assert_eq!(
        validate(&twice).unwrap_err().to_string(),
        "region eu is named twice (--region, --peer-region)"
    );
    let memory = RegionsConfig {
        store: StoreSpec::Memory,
        ..cfg.clone()
    };
    assert_eq!(
        validate(&memory).unwrap_err().to_string(),
        "peer regions need this region's store to be Redis (--store redis://…)"
    );
    let floor = RegionsConfig { floor: 0.6, ..cfg };
    assert_eq!(
        validate(&floor).unwrap_err().to_string(),
        "--region-floor 0.6 cannot hold for 2 regions: it must be above 0 and at most 1/2"
    );
}

#[test]
fn a_flush_carries_the_script_once_a_partition_and_every_key_in_it() {
    let ids = KeyIds::placeholder();
    let demand = |n: usize| {
        (0..n)
            .map(|i| {
                let key = DescriptorKey::new("g", [format!("k{i}")]);
                (keys::exchange_key(&ids, &key), 7)
            })
            .collect::<std::collections::HashMap<_, _>>()
    };
    let one = flush_bytes(5, demand(1));
    let script = meshlimit_store::redis::script::FLUSH_SCRIPT.len();
    assert!(one > script, "{one} bytes for one key");
    assert!(one < 2 * script, "{one} bytes for one key: one pipeline");
    let key = keys::exchange_key(&ids, &DescriptorKey::new("g", ["k0"])).len();
    let many = flush_bytes(5, demand(1_000));
    let per_key = (many - one) as f64 / 999.0;
    assert!(per_key > key as f64, "{per_key} bytes a key of {key}");
    assert!(
        flush_bytes(5, demand(0)) == 0,
        "nothing to flush sends nothing"
    );
}
