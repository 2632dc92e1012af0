//! Failed or refused agent calls: failure policies, the back-off, and the fail-local bucket.

use super::*;

#[test]
fn after_three_failed_calls_in_a_row_a_miss_takes_its_failure_policy_without_a_call() {
    let mut vm = Vm::with_rules(per_key("closed"));
    for key in ["k1", "k2", "k3"] {
        let id = vm.get_with_failed_call(key);
        // Each failed call sends its request to the rule's policy: 503.
        assert_eq!(vm.replied(id), Some(503));
    }
    let before = vm.host.calls_dispatched();
    let (id, action) = vm.get("k4");
    assert_eq!(action, Action::Pause);
    assert_eq!(vm.replied(id), Some(503));
    vm.turn();
    assert_eq!(
        vm.host.calls_dispatched(),
        before,
        "no call while backed off"
    );
    assert_eq!(
        vm.host.metric("meshlimit.rule.per-key.failed_closed"),
        Some(4)
    );

    // The back-off ends on time (agent_backoff_ms, 500 ms): the next miss calls.
    vm.host.set_now(vm.host.now_ns() + 500 * MS);
    let id = vm.get_with_granted_call("k5");
    assert_eq!(vm.host.stream(id).resumed, 1);
}

#[test]
fn an_answered_call_ends_a_run_of_failed_calls() {
    let mut vm = Vm::with_rules(per_key("closed"));
    vm.get_with_failed_call("k1");
    vm.get_with_failed_call("k2");
    vm.get_with_granted_call("k3");
    // Past the time an answer vouches for the agent, two more failures are
    // not three in a row: the next miss still calls.
    vm.host.set_now(vm.host.now_ns() + AGENT_ALIVE_NS);
    vm.get_with_failed_call("k4");
    vm.get_with_failed_call("k5");
    let (_, action) = vm.get("k6");
    assert_eq!(action, Action::Pause);
    vm.turn();
    let call = vm.only_call();
    assert_eq!(call.path, LEASE_PATH);
}

#[test]
fn a_call_the_host_refuses_to_send_decides_its_requests_by_policy_and_counts_as_a_failure() {
    let mut vm = Vm::with_rules(per_key("closed"));
    vm.host.refuse_calls(true);
    let mut ids = Vec::new();
    for key in ["k1", "k2", "k3"] {
        let (id, action) = vm.get(key);
        assert_eq!(action, Action::Pause);
        vm.turn();
        ids.push(id);
    }
    for id in ids {
        assert_eq!(vm.replied(id), Some(503));
    }
    assert_eq!(vm.host.metric("meshlimit.lease_calls"), Some(0));
    // Three refusals are three failures in a row: the next miss does not wait
    // for the root context at all.
    vm.host.refuse_calls(false);
    let (id, _) = vm.get("k4");
    assert!(vm.host.take_woken_queues().is_empty());
    assert_eq!(vm.replied(id), Some(503));
}

#[test]
fn when_the_root_context_cannot_be_woken_waiting_requests_take_their_policy() {
    let mut vm = Vm::with_rules(per_key("closed"));
    vm.host.refuse_wakes(true);
    let (id, action) = vm.get("k1");
    assert_eq!(action, Action::Pause);
    // No call can be sent for it: the rule's policy (closed) answers at once.
    assert!(vm.host.take_calls().is_empty());
    assert_eq!(vm.replied(id), Some(503));
}

/// A sync answer naming `live` agents in the region.
fn sync_answer_with_live_nodes(version: &str, live: u32) -> Vec<u8> {
    serde_json::to_vec(&SyncResponse {
        v: WIRE_VERSION,
        version: version.into(),
        rules: None,
        live_nodes: Some(live),
    })
    .unwrap()
}

/// Of `n` requests for `key` while every agent call fails (or is skipped by
/// the back-off), how many the fail-local bucket admits.
fn admitted_while_the_agent_fails(vm: &mut Vm, key: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let (id, action) = vm.get(key);
        if action == Action::Pause {
            vm.turn();
            for call in vm.host.take_calls() {
                vm.answer(&call, None, b"");
            }
        }
        let stream = vm.host.stream(id);
        if stream.answer.is_none() {
            admitted += 1;
        }
    }
    admitted
}

#[test]
fn the_fail_local_bucket_is_shared_by_the_live_agents_the_agent_reports() {
    // A 10-per-second rule, failing to a local bucket of twice its burst
    // divided among the nodes.
    let rules = per_key("local");
    let mut vm = Vm::with_rules(rules.clone());
    assert_eq!(admitted_while_the_agent_fails(&mut vm, "k1", 30), 20);
    // The agent reports four live agents: each node's bucket is a quarter. A
    // report of none (the agent does not know) keeps the configured count.
    let (version, _) = served(rules.clone());
    for (live, admitted) in [(4, 5), (0, 20)] {
        let mut vm = Vm::with_rules(rules.clone());
        vm.tick();
        let sync = vm.only_call();
        vm.answer(
            &sync,
            Some(200),
            &sync_answer_with_live_nodes(&version, live),
        );
        assert_eq!(
            admitted_while_the_agent_fails(&mut vm, "k1", 30),
            admitted,
            "{live} live"
        );
    }
}
