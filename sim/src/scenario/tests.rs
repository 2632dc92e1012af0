use super::*;

const MINIMAL: &str = r#"
name: t
duration: 10s
rules: |
  version: 1
  rules:
    - name: r
      key: [{ header: x-key }]
      limit: { requests: 10, per: 1s }
"#;

#[test]
fn defaults_fill_what_a_file_leaves_out() {
    let s = Scenario::parse(MINIMAL).unwrap();
    assert_eq!((s.gateways, s.agents, s.store), (50, 4, Store::Redis));
    assert_eq!((s.duration, s.warmup), (Secs(10.0), Secs(5.0)));
    assert_eq!(s.traffic.keys, 1);
    let plan = s.plan(&Overrides::default()).unwrap();
    // A generous lease timeout: accuracy, not latency, is measured.
    assert_eq!(plan.filter.timeout, std::time::Duration::from_secs(1));
    assert_eq!(plan.filter.expected_nodes, 50);
}

#[test]
fn shapes_spreads_and_overrides_read_as_maps() {
    let text = format!(
        "{MINIMAL}store: {{ cluster: 3 }}\nfilter: {{ timeout_ms: 20 }}\ntraffic:\n  rate: {{ ramp: {{ from: 0, to: 100, start: 1s, end: 3s }} }}\n  keys: 7\n  popularity: {{ zipf: {{ s: 1.1 }} }}\n  spread: {{ one: {{ share: 0.4 }} }}\n  shift: {{ at: 5s, to: even }}\nshort: {{ duration: 4s, warmup: 1s, gateways: 3 }}\n"
    );
    let s = Scenario::parse(&text).unwrap();
    assert_eq!(s.store, Store::Cluster(3));
    assert_eq!(s.traffic.rate.at(2.0), 50.0);
    assert_eq!(s.traffic.spread_at(6.0), Spread::Even);
    let plan = s
        .plan(&Overrides {
            short: true,
            ..Overrides::default()
        })
        .unwrap();
    assert_eq!(plan.scenario.duration, Secs(4.0));
    assert_eq!(plan.scenario.gateways, 3);
    assert_eq!(plan.filter.timeout, std::time::Duration::from_millis(20));
}

#[test]
fn mistakes_are_refused_with_the_field() {
    let typo = format!("{MINIMAL}gatways: 3\n");
    assert!(Scenario::parse(&typo)
        .unwrap_err()
        .to_string()
        .contains("gatways"));
    let bad_rules = MINIMAL.replace("requests: 10", "requests: 0");
    let err = Scenario::parse(&bad_rules)
        .unwrap()
        .plan(&Overrides::default())
        .unwrap_err();
    assert!(err.to_string().contains("requests"), "{err}");
    let warm = format!("{MINIMAL}warmup: 20s\n");
    assert!(Scenario::parse(&warm)
        .unwrap()
        .plan(&Overrides::default())
        .is_err());
}

#[test]
fn durations_parse() {
    assert_eq!(Secs::parse("250ms"), Ok(Secs(0.25)));
    assert_eq!(Secs::parse("1.5m"), Ok(Secs(90.0)));
    assert_eq!(Secs::parse("12"), Ok(Secs(12.0)));
    assert!(Secs::parse("ten").is_err());
}

#[test]
fn weights_sum_to_one() {
    for w in [
        Popularity::Hot { share: 0.9 }.weights(10),
        Popularity::Zipf { s: 1.0 }.weights(100),
        Spread::One { share: 0.4 }.weights(50),
        Spread::Range { from: 25, to: 50 }.weights(50),
        Spread::Skewed { s: 1.0 }.weights(5),
    ] {
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }
    let one = Spread::One { share: 0.4 }.weights(50);
    assert!((one[0] - 0.4).abs() < 1e-12);
    assert_eq!(Spread::Range { from: 25, to: 50 }.weights(50)[0], 0.0);
}

#[test]
fn every_committed_scenario_reads_and_plans() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut read = 0;
    let files = ["", "trade-offs", "capacity"]
        .iter()
        .flat_map(|sub| std::fs::read_dir(root.join(sub)).unwrap());
    for entry in files {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        scenario
            .plan(&Overrides::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        read += 1;
    }
    assert!(read >= 20, "{read} scenarios read");
}
