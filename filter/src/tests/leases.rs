//! A miss waits for a lease call: batching, grants, denials, gRPC answers, and calls from a stream.

use super::*;

#[test]
fn a_miss_waits_for_one_lease_call_and_a_grant_lets_it_through_with_its_quota() {
    let mut vm = Vm::with_rules(per_key("closed"));
    let (first, action) = vm.get("k1");
    assert_eq!(action, Action::Pause);
    // A second request for the key waits on the same call.
    let (second, action) = vm.get("k1");
    assert_eq!(action, Action::Pause);
    // Nothing goes out until the worker's loop turns; then one call, from the
    // root context, for the one key.
    assert!(vm.host.take_calls().is_empty());
    vm.turn();
    let call = vm.only_call();
    assert_eq!((call.context, call.path.as_str()), (ROOT, LEASE_PATH));
    let asked: LeaseRequest = serde_json::from_slice(&call.body).unwrap();
    assert_eq!(asked.items.len(), 1);
    assert_eq!(asked.items[0].rule, "per-key");
    assert_eq!(asked.items[0].key, DescriptorKey::new("per-key", ["k1"]));
    assert_eq!(vm.host.metric("meshlimit.lease_calls"), Some(1));
    assert_eq!(vm.host.metric("meshlimit.lease_waits"), Some(1));

    vm.answer(&call, Some(200), &lease_answer(vec![grant(2, 7, 800)]));
    for id in [first, second] {
        let stream = vm.host.stream(id);
        assert_eq!(stream.resumed, 1, "request {id} resumed once");
        assert_eq!(stream.answer, None);
        assert!(stream
            .properties
            .iter()
            .any(|(name, value)| name == "meshlimit" && value.contains(" decision=allowed ")));
    }
    assert_eq!(vm.host.metric("meshlimit.rule.per-key.allowed"), Some(2));
    // The allowed response carries its quota.
    vm.respond(first);
    let headers = vm.host.stream(first).response_headers;
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "ratelimit" && v.starts_with("\"per-key\";r=")),
        "{headers:?}"
    );
}

#[test]
fn a_denied_miss_is_answered_429_with_when_to_retry() {
    let mut vm = Vm::with_rules(per_key("closed"));
    let (id, _) = vm.get("k1");
    vm.send_and_answer(LeaseAnswer::Deny {
        retry_after_ms: 2_500,
        local: false,
        from: None,
    });
    let stream = vm.host.stream(id);
    assert_eq!(stream.resumed, 0);
    let Some(Answer::Http { status, fields, .. }) = stream.answer else {
        panic!("no local reply: {stream:?}");
    };
    assert_eq!(status, 429);
    assert_eq!(field(&fields, "retry-after"), Some("3"));
    assert_eq!(field(&fields, "x-meshlimit-rule"), Some("per-key"));
    assert_eq!(vm.host.metric("meshlimit.rule.per-key.limited"), Some(1));
    // The denial is cached: the next request is answered at once, no call.
    let (id, action) = vm.get("k1");
    assert_eq!(action, Action::Pause);
    vm.turn();
    assert!(vm.host.take_calls().is_empty());
    assert_eq!(vm.replied(id), Some(429));
}

#[test]
fn a_limited_grpc_call_gets_a_grpc_answer() {
    let mut vm = Vm::with_rules(per_key("closed"));
    let (id, _) = vm.request(&[
        (":method", "POST"),
        (":path", "/search.Search/Find"),
        ("content-type", "application/grpc"),
        ("x-api-key", "k1"),
    ]);
    vm.send_and_answer(LeaseAnswer::Deny {
        retry_after_ms: 1_000,
        local: false,
        from: None,
    });
    let answer = vm.host.stream(id).answer;
    let Some(Answer::Grpc { status, fields, .. }) = answer else {
        panic!("not a gRPC answer: {answer:?}");
    };
    assert_eq!(
        status,
        meshlimit_core::headers::grpc_status::RESOURCE_EXHAUSTED
    );
    assert_eq!(field(&fields, "x-meshlimit-rule"), Some("per-key"));
}

#[test]
fn without_a_queue_each_miss_calls_the_agent_from_its_own_stream() {
    let host = Rc::new(MemoryHost::default());
    host.set_now(1_000 * MS);
    host.set_env(SECRET_ENV, SECRET);
    host.refuse_queues(true);
    let (mut vm, configured) = Vm::start(&host, "{}");
    assert!(configured);
    vm.sync_rules(per_key("closed"));
    // A grant answered to the stream's own call lets the request through.
    let (id, action) = vm.get("k1");
    assert_eq!(action, Action::Pause);
    let call = vm.only_call();
    assert_eq!((call.context, call.path.as_str()), (id, LEASE_PATH));
    vm.answer(&call, Some(200), &lease_answer(vec![grant(1, 9, 100)]));
    assert_eq!((vm.host.stream(id).resumed, vm.replied(id)), (1, None));
    // A denial is answered 429.
    let (id, _) = vm.get("k2");
    let call = vm.only_call();
    let deny = LeaseAnswer::Deny {
        retry_after_ms: 1_000,
        local: false,
        from: None,
    };
    vm.answer(&call, Some(200), &lease_answer(vec![deny]));
    assert_eq!(vm.replied(id), Some(429));
    // An answer that is not a lease response, or not a 200, takes the rule's
    // failure policy (closed: 503).
    for (status, body) in [
        (Some(200), b"not json".to_vec()),
        (Some(500), lease_answer(vec![])),
    ] {
        let (id, _) = vm.get("k3");
        let call = vm.only_call();
        vm.answer(&call, status, &body);
        assert_eq!(vm.replied(id), Some(503), "{status:?}");
    }
    // So does an answer of another wire version.
    let (id, _) = vm.get("k4");
    let call = vm.only_call();
    let other = serde_json::to_vec(&LeaseResponse {
        v: WIRE_VERSION + 1,
        items: vec![grant(1, 9, 100)],
    })
    .unwrap();
    vm.answer(&call, Some(200), &other);
    assert_eq!(vm.replied(id), Some(503));
}

#[test]
fn envoy_counts_each_lease_call_and_wait_once() {
    let mut vm = Vm::with_rules(per_key("closed"));
    for (n, key) in ["k1", "k2", "k3"].iter().enumerate() {
        let (_, _) = vm.get(key);
        let (_, _) = vm.get(key);
        vm.send_and_answer(grant(2, 7, 800));
        let n = i64::try_from(n + 1).unwrap();
        assert_eq!(vm.host.metric("meshlimit.lease_calls"), Some(n));
        assert_eq!(vm.host.metric("meshlimit.lease_waits"), Some(n));
    }
}

#[test]
fn misses_in_one_turn_wake_the_root_once_and_share_one_call() {
    let mut vm = Vm::with_rules(per_key("closed"));
    for key in ["k1", "k2", "k3"] {
        assert_eq!(vm.get(key).1, Action::Pause);
    }
    let woken = vm.host.take_woken_queues();
    assert_eq!(woken.len(), 1, "{woken:?}");
    vm.host.enter(ROOT);
    vm.root.on_queue_ready(woken[0]);
    let call = vm.only_call();
    let asked: LeaseRequest = serde_json::from_slice(&call.body).unwrap();
    assert_eq!(asked.items.len(), 3);
}

#[test]
fn a_request_gone_before_its_answer_is_forgotten_not_resumed() {
    let mut vm = Vm::with_rules(per_key("closed"));
    let (gone, _) = vm.get("k1");
    let (stays, _) = vm.get("k1");
    // The client of the first went away: Envoy destroys its context.
    vm.streams.remove(&gone);
    vm.send_and_answer(grant(5, 9, 100));
    assert_eq!(vm.host.stream(gone).resumed, 0);
    assert_eq!(vm.host.stream(stays).resumed, 1);
}
