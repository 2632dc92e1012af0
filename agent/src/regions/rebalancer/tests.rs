use super::*;

fn demand(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

fn share_of(entries: &HashMap<String, Entry>, key: &str) -> f64 {
    entries[key].share
}

#[test]
fn every_region_computes_its_part_of_one_split() {
    let all = [
        demand(&[("r|a", 300), ("r|b", 10)]),
        demand(&[("r|b", 30)]),
        demand(&[]),
    ];
    let mut sum_a = 0.0;
    let mut sum_b = 0.0;
    for own in 0..3 {
        let entries = compute(&mut HashMap::new(), &all, own, 0.1, MAX_KEYS);
        sum_a += share_of(&entries, "r|a");
        sum_b += share_of(&entries, "r|b");
        assert_eq!(entries["r|a"].demand, 300.0);
    }
    assert!((sum_a - 1.0).abs() < 1e-12 && (sum_b - 1.0).abs() < 1e-12);
    let first = compute(&mut HashMap::new(), &all, 0, 0.1, MAX_KEYS);
    assert!((share_of(&first, "r|a") - 0.8).abs() < 1e-12);
    let third = compute(&mut HashMap::new(), &all, 2, 0.1, MAX_KEYS);
    assert!(
        (share_of(&third, "r|b") - 0.1).abs() < 1e-12,
        "no demand: the floor"
    );
}

#[test]
fn an_idle_key_splits_equally_then_is_dropped() {
    let mut known = HashMap::new();
    let busy = [demand(&[("r|a", 5)]), demand(&[])];
    compute(&mut known, &busy, 1, 0.1, MAX_KEYS);
    let idle = [demand(&[]), demand(&[])];
    for _ in 0..IDLE_PERIODS {
        let entries = compute(&mut known, &idle, 1, 0.1, MAX_KEYS);
        assert_eq!(share_of(&entries, "r|a"), 0.5);
    }
    assert!(compute(&mut known, &idle, 1, 0.1, MAX_KEYS).is_empty());
    assert!(known.is_empty());
}

#[test]
fn past_the_cap_the_least_demanded_keys_go() {
    let mut known = HashMap::new();
    let all = [demand(&[("r|a", 5), ("r|b", 50), ("r|c", 1)])];
    let entries = compute(&mut known, &all, 0, 0.1, 2);
    let mut keys: Vec<&String> = entries.keys().collect();
    keys.sort();
    assert_eq!(keys, ["r|a", "r|b"]);
    assert_eq!(known.len(), 2);
}
