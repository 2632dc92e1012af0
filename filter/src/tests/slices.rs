//! A key hot at a worker is decided from the worker's slice of its lease,
//! with no shared-data call; the workers of one Envoy never admit more than
//! the lease granted.

use super::*;
use crate::config::FilterConfig;
use crate::slots::slot_key;

/// A rule far above the rate, so each key's lease decides (a burst of
/// 100,000: a worker's slice is at most 1,000 tokens).
fn hot_rule() -> serde_json::Value {
    serde_json::json!({"version": 1, "rules": [
        {"name": "hot", "key": [{"header": "x-api-key"}],
         "limit": {"requests": 100_000, "per": "1s"}},
    ]})
}

/// The shared-data key of `key`'s slot under the rule `hot`.
fn slot_of(key: &str) -> String {
    let hasher = Secret::new(SECRET.as_bytes()).unwrap().slot_hasher();
    let fingerprint = hasher.fingerprint(&DescriptorKey::new("hot", [key]));
    slot_key(fingerprint, FilterConfig::default().slots).to_string()
}

/// The `r` (remaining) of the response's `RateLimit` field.
fn remaining(vm: &mut Vm, id: u32) -> u32 {
    vm.respond(id);
    let headers = vm.host.stream(id).response_headers;
    let (_, value) = headers.iter().find(|(n, _)| n == "ratelimit").unwrap();
    let r = value.split(';').find_map(|p| p.strip_prefix("r=")).unwrap();
    r.parse().unwrap()
}

/// A request for `key` that the filter lets through at once.
fn admitted(vm: &mut Vm, key: &str) -> u32 {
    let (id, action) = vm.get(key);
    assert_eq!(action, Action::Continue);
    id
}

#[test]
fn a_hot_key_is_decided_from_its_slice_with_the_shared_leases_quota() {
    let mut vm = Vm::with_rules(hot_rule());
    let (first, _) = vm.get("k1");
    vm.send_and_answer(grant(5_000, 90_000, 100));
    assert_eq!(vm.replied(first), None);
    // Its demand grows with each request (the clock stands still).
    let mut last = u32::MAX;
    for _ in 0..1_000 {
        let id = admitted(&mut vm, "k1");
        let r = remaining(&mut vm, id);
        // One token less each request, slice or not, as the shared lease
        // alone would report.
        assert!(last == u32::MAX || r == last - 1, "{r} after {last}");
        last = r;
    }
    assert_eq!(last, 90_000 + 5_000 - 1 - 1_000);
    // Hot now (10 ms of its demand is 10 tokens or more): one slot read a
    // slice, not one a request.
    vm.host.count_reads(&slot_of("k1"));
    for _ in 0..100 {
        admitted(&mut vm, "k1");
    }
    assert!(vm.host.reads_counted() <= 10, "{}", vm.host.reads_counted());
    assert_eq!(vm.host.metric("meshlimit.rule.hot.allowed"), Some(1_101));
}

#[test]
fn workers_sharing_a_lease_admit_no_more_than_it_granted() {
    let mut a = Vm::with_rules(hot_rule());
    let (mut b, configured) = Vm::start(&a.host, "{}");
    assert!(configured);
    // The second worker starts with the rules the first left in shared data;
    // its streams' ids are apart from the first's, on the shared host.
    b.next_context = 100_000;
    let (first, _) = a.get("k1");
    a.send_and_answer(grant(2_000, 0, 100));
    assert_eq!(a.replied(first), None);
    // Both workers spend the one lease until it is empty: each slice came
    // out of it, so together they admit its 2,000 tokens and not one more.
    let mut admitted = 1;
    for i in 0..6_000 {
        let vm = if i % 3 == 0 { &mut b } else { &mut a };
        match vm.get("k1").1 {
            Action::Continue => admitted += 1,
            _ => break,
        }
    }
    assert!(admitted <= 2_000, "{admitted}");
    assert!(admitted > 1_900, "{admitted}");
}
