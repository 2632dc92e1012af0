//! The decision log: key ids in records, batching to the agent, and counted drops.

use super::*;

#[test]
fn a_rejection_names_one_key_id_to_the_access_log_and_the_decision_log() {
    let mut vm = Vm::with_rules(serde_json::json!({"version": 1, "rules": [
        {"name": "per-key", "match": {"path_prefix": "/search"}, "key": [{"header": "x-api-key"}],
         "limit": {"requests": 10, "per": "1s"}},
        {"name": "per-path", "key": ["path"], "limit": {"requests": 100, "per": "1s"},
         "log_sample": 1.0},
    ]}));
    let (id, _) = vm.get("k1");
    vm.turn();
    let call = vm.only_call();
    vm.answer(
        &call,
        Some(200),
        &lease_answer(vec![
            LeaseAnswer::Deny {
                retry_after_ms: 1_000,
                local: false,
                from: None,
            },
            grant(5, 90, 100),
        ]),
    );
    assert_eq!(vm.replied(id), Some(429));
    let ids = Secret::new(SECRET.as_bytes()).unwrap().key_ids();
    let denied = ids.id(&DescriptorKey::new("per-key", ["k1"])).to_string();
    let allowed = ids
        .id(&DescriptorKey::new("per-path", ["/search"]))
        .to_string();
    let stream = vm.host.stream(id);
    assert!(
        stream
            .properties
            .iter()
            .any(|(name, value)| name == "meshlimit"
                && value.ends_with(&format!(" key_id={denied}"))),
        "{:?}",
        stream.properties
    );
    // The tick hands the records over: each rule's record has its own key's id.
    vm.tick();
    let calls = vm.host.take_calls();
    let batch = calls
        .iter()
        .find(|c| c.path == DECISIONS_PATH)
        .expect("a decisions batch");
    let batch: DecisionsRequest = serde_json::from_slice(&batch.body).unwrap();
    let of = |rule: &str| {
        batch
            .records
            .iter()
            .find(|r| r.rule == rule)
            .map(|r| r.key_id.clone())
    };
    assert_eq!(of("per-key"), Some(denied));
    assert_eq!(of("per-path"), Some(allowed));
}

#[test]
fn batches_go_one_at_a_time_whole_ones_at_once_and_a_part_one_on_the_tick() {
    let rules = per_key("closed");
    let (version, _) = served(rules.clone());
    let mut vm = Vm::with_rules(rules);
    // The batch sent since the last look, if any (a sync is answered).
    let batch = |vm: &mut Vm| -> Option<(Dispatched, DecisionsRequest)> {
        let calls = vm.host.take_calls();
        for sync in calls.iter().filter(|c| c.path == SYNC_PATH) {
            vm.answer(sync, Some(200), &sync_answer(&version));
        }
        let mut batches = calls.into_iter().filter(|c| c.path == DECISIONS_PATH);
        let call = batches.next()?;
        assert!(batches.next().is_none(), "two batches in flight");
        let body = serde_json::from_slice(&call.body).unwrap();
        Some((call, body))
    };
    vm.deny_for_a_minute("k1");
    // 299 more rejected from the cached denial, a millisecond apart, each
    // followed by a turn of the worker's loop: 300 records in all, and no
    // tick. The request that fills a batch (the byte cap: about 300 bytes a
    // record, 106 of them) wakes the root, which sends it; the next whole
    // batch waits for that one's answer.
    let mut sent = Vec::new();
    for i in 1..300 {
        vm.host.set_now(vm.host.now_ns() + MS);
        let (id, _) = vm.get("k1");
        assert_eq!(vm.replied(id), Some(429));
        vm.turn();
        if let Some(b) = batch(&mut vm) {
            sent.push((i, b));
        }
    }
    assert_eq!(
        sent.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [106],
        "the requests after which a batch went"
    );
    let (_, (call, one)) = sent.remove(0);
    // Not even the tick sends another while it is unanswered.
    vm.tick();
    assert!(batch(&mut vm).is_none());
    // Answered: the next whole batch goes at once.
    vm.answer(&call, Some(200), b"{}");
    let (call, two) = batch(&mut vm).expect("the next whole batch");
    // Answered again: what is left is less than a batch and waits for the
    // tick (a steady trickle of records is not a call a round trip).
    vm.answer(&call, Some(200), b"{}");
    assert!(batch(&mut vm).is_none());
    vm.tick();
    let (_, three) = batch(&mut vm).expect("the part batch on the tick");
    let sizes = [one.records.len(), two.records.len(), three.records.len()];
    assert_eq!(sizes, [106, 106, 88]);
    // In the order they were decided.
    let at: Vec<u64> = [one, two, three]
        .iter()
        .flat_map(|b| b.records.iter().map(|r| r.at_ms))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}");
}

#[test]
fn a_denial_answering_a_batch_of_waiting_requests_sends_their_records_at_once() {
    let mut vm = Vm::with_rules(per_key("closed"));
    // 120 requests for one key wait on its one lease call.
    let ids: Vec<u32> = (0..120).map(|_| vm.get("k1").0).collect();
    vm.turn();
    let call = vm.only_call();
    vm.answer(&call, Some(200), &lease_answer(vec![minute_denial()]));
    assert!(ids.iter().all(|id| vm.replied(*id) == Some(429)));
    // Their 120 records fill a batch: it goes now, not at the next tick.
    let batches = vm
        .host
        .take_calls()
        .into_iter()
        .filter(|c| c.path == DECISIONS_PATH)
        .count();
    assert_eq!(batches, 1);
}

#[test]
fn records_a_vm_could_not_hand_over_are_counted_dropped() {
    let rules = per_key("closed");
    let (version, _) = served(rules.clone());
    let mut vm = Vm::with_rules(rules);
    vm.deny_for_a_minute("k1");
    // Each tick syncs and hands the records over; the agent answers the batch
    // with `status`.
    let tick = |vm: &mut Vm, rejected: usize, status: u32| {
        for _ in 0..rejected {
            vm.get("k1");
        }
        vm.tick();
        let calls = vm.host.take_calls();
        let sync = calls.iter().find(|c| c.path == SYNC_PATH).unwrap();
        vm.answer(sync, Some(200), &sync_answer(&version));
        let batch = calls.iter().find(|c| c.path == DECISIONS_PATH).unwrap();
        vm.answer(batch, Some(status), b"{}");
    };
    // The agent takes the first batch: nothing dropped.
    tick(&mut vm, 4, 200);
    assert_eq!(vm.host.metric("meshlimit.decision_log_dropped"), Some(0));
    // The next batch is refused: its three records are counted dropped.
    tick(&mut vm, 3, 503);
    assert_eq!(vm.host.metric("meshlimit.decision_log_dropped"), Some(3));
}
