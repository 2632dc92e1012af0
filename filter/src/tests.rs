//! The filter as Envoy drives it: the root and HTTP contexts called as the
//! proxy calls them, over the in-memory host. Each test names what a user of
//! the filter would observe.

use std::collections::HashMap;
use std::rc::Rc;

use meshlimit_core::headers::Answer;
use meshlimit_core::rules::lines::{self, RULES_LINES_TYPE};
use meshlimit_core::secret::{Secret, SECRET_ENV};
use meshlimit_core::wire::{
    DecisionsRequest, LeaseAnswer, LeaseRequest, LeaseResponse, SyncRequest, SyncResponse,
    DECISIONS_PATH, LEASE_PATH, RULES_PATH, SYNC_PATH, WIRE_VERSION,
};
use meshlimit_core::{DescriptorKey, RuleSet};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::Action;

use crate::host::Host;
use crate::http::Http;
use crate::root::Root;
use crate::state::AGENT_ALIVE_NS;
use crate::testing::{Dispatched, MemoryHost};

const ROOT: u32 = 1;
const MS: u64 = 1_000_000;
const SECRET: &str = "a deployment secret of at least thirty-two bytes";

/// One Envoy worker's VM: its root context and the streams it created.
struct Vm {
    host: Rc<MemoryHost>,
    root: Root<MemoryHost>,
    // Concrete, not `dyn HttpContext`: the trait's default methods call
    // hostcalls, which a native test binary cannot link.
    streams: HashMap<u32, Http<MemoryHost>>,
    next_context: u32,
}

impl Vm {
    /// A VM on `host` (another VM of the same Envoy shares it), configured with
    /// `plugin_config`; the bool is what `on_configure` answered.
    fn start(host: &Rc<MemoryHost>, plugin_config: &str) -> (Vm, bool) {
        host.set_plugin_configuration(plugin_config);
        host.enter(ROOT);
        let mut root = Root::new(ROOT, Rc::clone(host));
        let configured = root.on_configure(plugin_config.len());
        let vm = Vm {
            host: Rc::clone(host),
            root,
            streams: HashMap::new(),
            next_context: ROOT + 1,
        };
        (vm, configured)
    }

    /// A VM on a fresh host (node `node-a`, the secret in its environment) with
    /// `rules` from its first sync.
    fn with_rules(rules: serde_json::Value) -> Vm {
        let host = Rc::new(MemoryHost::default());
        host.set_now(1_000 * MS);
        host.set_env(SECRET_ENV, SECRET);
        host.set_host_property(&["node", "id"], "node-a");
        let (mut vm, configured) = Vm::start(&host, "{}");
        assert!(configured);
        vm.sync_rules(rules);
        vm
    }

    /// A tick's sync finds the agent on the version of `rules`; the VM fetches
    /// them and the agent answers with their lines.
    fn sync_rules(&mut self, rules: serde_json::Value) {
        let (version, lines) = served(rules);
        self.tick();
        let sync = self.only_call();
        self.answer(&sync, Some(200), &sync_answer(&version));
        let fetch = self.only_call();
        self.answer(&fetch, Some(200), &lines);
    }

    fn tick(&mut self) {
        self.host.enter(ROOT);
        self.root.on_tick();
    }

    /// A request with these headers: its context id and what the filter
    /// answered to its headers.
    fn request(&mut self, headers: &[(&str, &str)]) -> (u32, Action) {
        let id = self.next_context;
        self.next_context += 1;
        self.host.set_request_headers(id, headers);
        let mut stream = self.root.http(id);
        self.host.enter(id);
        let action = stream.on_http_request_headers(headers.len(), true);
        self.streams.insert(id, stream);
        (id, action)
    }

    /// A request for `key` on `/search`.
    fn get(&mut self, key: &str) -> (u32, Action) {
        self.request(&[
            (":method", "GET"),
            (":path", "/search"),
            (":authority", "api.example.com"),
            ("x-api-key", key),
        ])
    }

    /// The worker's event loop turns: the root context hears of every queue
    /// woken since.
    fn turn(&mut self) {
        for queue in self.host.take_woken_queues() {
            self.host.enter(ROOT);
            self.root.on_queue_ready(queue);
        }
    }

    /// Delivers the answer to a call to the context that dispatched it.
    fn answer(&mut self, call: &Dispatched, status: Option<u32>, body: &[u8]) {
        self.host.set_call_response(status, body);
        self.host.enter(call.context);
        if call.context == ROOT {
            self.root
                .on_http_call_response(call.token, 1, body.len(), 0);
        } else if let Some(stream) = self.streams.get_mut(&call.context) {
            stream.on_http_call_response(call.token, 1, body.len(), 0);
        }
    }

    /// The response's headers reach the filter.
    fn respond(&mut self, id: u32) {
        self.host.enter(id);
        if let Some(stream) = self.streams.get_mut(&id) {
            stream.on_http_response_headers(2, false);
        }
    }

    /// The HTTP status of the local reply stream `id` got, if it got one.
    fn replied(&self, id: u32) -> Option<u32> {
        match self.host.stream(id).answer {
            Some(Answer::Http { status, .. }) => Some(status),
            _ => None,
        }
    }

    /// The one call dispatched since the last look.
    fn only_call(&self) -> Dispatched {
        let mut calls = self.host.take_calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        calls.remove(0)
    }

    /// One request for `key`, its lease call granting one token.
    fn get_with_granted_call(&mut self, key: &str) -> u32 {
        let (id, action) = self.get(key);
        assert_eq!(action, Action::Pause);
        self.send_and_answer(grant(1, 9, 100));
        id
    }

    /// The worker's loop turns, and the one lease call it sends is answered
    /// with `answer`.
    fn send_and_answer(&mut self, answer: LeaseAnswer) {
        self.turn();
        let call = self.only_call();
        self.answer(&call, Some(200), &lease_answer(vec![answer]));
    }

    /// One request for `key`, denied by the agent for a minute: the key's
    /// later requests are answered from the cached denial.
    fn deny_for_a_minute(&mut self, key: &str) {
        let (first, _) = self.get(key);
        self.send_and_answer(minute_denial());
        assert_eq!(self.replied(first), Some(429));
    }

    /// One request for `key`, its lease call failing.
    fn get_with_failed_call(&mut self, key: &str) -> u32 {
        let (id, action) = self.get(key);
        assert_eq!(action, Action::Pause);
        self.turn();
        let call = self.only_call();
        self.answer(&call, None, b"");
        id
    }
}

/// The version of `rules` and their lines, as the agent serves them.
fn served(rules: serde_json::Value) -> (String, Vec<u8>) {
    let set = RuleSet::compile(&serde_json::from_value(rules).unwrap()).unwrap();
    (set.version().to_string(), lines::encode(&set).unwrap())
}

fn sync_answer(version: &str) -> Vec<u8> {
    serde_json::to_vec(&SyncResponse {
        v: WIRE_VERSION,
        version: version.into(),
        rules: None,
        live_nodes: None,
    })
    .unwrap()
}

/// The agent's denial of a key for a minute.
fn minute_denial() -> LeaseAnswer {
    LeaseAnswer::Deny {
        retry_after_ms: 60_000,
        local: false,
        from: None,
    }
}

fn lease_answer(items: Vec<LeaseAnswer>) -> Vec<u8> {
    serde_json::to_vec(&LeaseResponse {
        v: WIRE_VERSION,
        items,
    })
    .unwrap()
}

/// A store grant of `tokens` for 300 ms, with what the store has left.
fn grant(tokens: u32, remaining: u32, reset_ms: u64) -> LeaseAnswer {
    LeaseAnswer::Grant {
        tokens,
        ttl_ms: 300,
        remaining,
        reset_ms,
        local: false,
        from: None,
    }
}

fn per_key(on_failure: &str) -> serde_json::Value {
    serde_json::json!({"version": 1, "rules": [
        {"name": "per-key", "match": {"path_prefix": "/search"}, "key": [{"header": "x-api-key"}],
         "limit": {"requests": 10, "per": "1s"}, "on_failure": on_failure},
    ]})
}

fn field<'a>(fields: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_vm_with_a_good_plugin_configuration_fetches_its_rules_on_its_first_tick() {
    let host = Rc::new(MemoryHost::default());
    host.set_env(SECRET_ENV, SECRET);
    host.set_host_property(&["node", "id"], "node-a");
    let (mut vm, configured) = Vm::start(
        &host,
        r#"{"agent_cluster": "agent", "sync_timeout_ms": 250, "sync_interval_ms": 2000}"#,
    );
    assert!(configured);
    // Without rules it ticks fast, so a fresh Envoy limits soon.
    assert_eq!(host.tick_period_ms(), Some(100));
    assert_eq!(host.metric("meshlimit.rules_ready_vms"), Some(0));

    vm.tick();
    let sync = vm.only_call();
    let token = format!(
        "Bearer {}",
        Secret::new(SECRET.as_bytes()).unwrap().agent_token()
    );
    assert_eq!(
        (sync.cluster.as_str(), sync.path.as_str(), sync.timeout_ms),
        ("agent", SYNC_PATH, 250)
    );
    assert_eq!(sync.auth, Some(token));
    let asked: SyncRequest = serde_json::from_slice(&sync.body).unwrap();
    assert_eq!(asked.filter_id, "node-a/vm1");
    assert_eq!(asked.rules_version, None);

    let (version, lines) = served(per_key("closed"));
    vm.answer(&sync, Some(200), &sync_answer(&version));
    // The agent is on a version this VM lacks: it fetches it, as lines.
    let fetch = vm.only_call();
    assert_eq!(
        (fetch.method, fetch.path.as_str(), fetch.accept.as_deref()),
        ("GET", RULES_PATH, Some(RULES_LINES_TYPE))
    );
    assert_eq!(host.tick_period_ms(), Some(100));
    vm.answer(&fetch, Some(200), &lines);
    assert_eq!(host.tick_period_ms(), Some(2000));
    assert_eq!(host.metric("meshlimit.rules_ready_vms"), Some(1));
    // The rules apply: a request they match waits for its key's lease.
    assert_eq!(vm.get("k1").1, Action::Pause);

    // A second VM of the same Envoy starts with them, before any sync.
    let (mut second, configured) = Vm::start(&host, "{}");
    assert!(configured);
    assert_eq!(host.metric("meshlimit.rules_ready_vms"), Some(2));
    second.tick();
    let asked: SyncRequest = serde_json::from_slice(&second.only_call().body).unwrap();
    assert_eq!(asked.filter_id, "node-a/vm2");
    assert_eq!(asked.rules_version, Some(version));
}

#[test]
fn a_vm_with_a_bad_plugin_configuration_refuses_to_start() {
    for bad in [
        r#"{"timeout": 7}"#,
        r#"{"slots": 0}"#,
        r#"{"usage_path": "usage"}"#,
        "not json",
    ] {
        let host = Rc::new(MemoryHost::default());
        let (mut vm, configured) = Vm::start(&host, bad);
        assert!(!configured, "{bad} was accepted");
        // Nothing was started for it: no tick, no queue.
        assert_eq!(host.tick_period_ms(), None, "{bad}");
        vm.get("k1");
        assert!(host.take_woken_queues().is_empty(), "{bad}");
    }
}

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
            .contains(&("meshlimit_decision".into(), "allowed".into())));
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
fn a_vm_reports_a_new_version_to_the_agent_as_soon_as_it_runs_it() {
    let mut vm = Vm::with_rules(per_key("closed"));
    let (next, lines) = served(per_key("open"));
    vm.tick();
    let sync = vm.only_call();
    vm.answer(&sync, Some(200), &sync_answer(&next));
    let fetch = vm.only_call();
    vm.answer(&fetch, Some(200), &lines);
    assert!(
        vm.host.take_calls().is_empty(),
        "compiled on the ticks that follow, not in the answer's turn"
    );
    // The next tick finishes the load (the clock stands still here, so within
    // one slice) and the VM reports at once, before its next sync is due.
    vm.tick();
    let report = vm.only_call();
    assert_eq!(report.path, SYNC_PATH);
    let asked: SyncRequest = serde_json::from_slice(&report.body).unwrap();
    assert_eq!(asked.rules_version, Some(next));
}

/// The dynamic metadata Envoy's jwt_authn filter leaves for a token whose
/// payload carries `claims` (`payload_in_metadata: payload`), beside another
/// filter's, as the proxy hands it over: a serialized protobuf Metadata.
fn verified(vm: &Vm, claims: &[(&str, &str)]) {
    use meshlimit_core::metadata::{encode_metadata, Field, StructBuilder, JWT_AUTHN};
    let mut payload = StructBuilder::new();
    for (name, value) in claims {
        payload = payload.with(name, Field::String((*value).into()));
    }
    let ns = StructBuilder::new()
        .with("payload", Field::Struct(payload))
        .encode();
    let other = StructBuilder::new().with("user", Field::String("eve".into()));
    let all = encode_metadata(&[
        ("acme.authn".to_string(), other.encode()),
        (JWT_AUTHN.to_string(), ns),
    ]);
    vm.host.set_host_property_bytes(&["metadata"], &all);
}

#[test]
fn a_verified_claim_keys_and_plans_the_rule_and_a_cluster_scopes_it() {
    let mut vm = Vm::with_rules(serde_json::json!({"version": 1, "rules": [
        {"name": "per-sub", "match": {"cluster": "*|reviews.shop.svc.cluster.local"},
         "key": [{"claim": "sub"}],
         "plans": {"claim": "plan", "default": "free", "limits": {
             "free": {"requests": 1, "per": "1s"}, "pro": {"requests": 100, "per": "1s"}}}},
    ]}));
    let to_reviews = "outbound|9080||reviews.shop.svc.cluster.local";
    vm.host
        .set_host_property(&["xds", "cluster_name"], to_reviews);
    let asked = |vm: &mut Vm| {
        let (_, action) = vm.get("ignored");
        assert_eq!(action, Action::Pause);
        vm.turn();
        let call = vm.only_call();
        let asked: LeaseRequest = serde_json::from_slice(&call.body).unwrap();
        vm.answer(&call, None, b"");
        (asked.items[0].key.clone(), asked.items[0].plan.clone())
    };
    verified(&vm, &[("sub", "alice"), ("plan", "pro")]);
    assert_eq!(
        asked(&mut vm),
        (DescriptorKey::new("per-sub", ["alice"]), Some("pro".into()))
    );
    verified(&vm, &[("sub", "bob")]);
    assert_eq!(
        asked(&mut vm),
        (DescriptorKey::new("per-sub", ["bob"]), Some("free".into()))
    );
    // No verified `sub`: the rule does not apply, the request goes on, no call.
    verified(&vm, &[("iss", "x")]);
    assert_eq!(vm.get("k").1, Action::Continue);
    assert!(vm.host.take_calls().is_empty());
    // Another service's cluster: the rule does not apply either.
    verified(&vm, &[("sub", "alice")]);
    vm.host.set_host_property(
        &["xds", "cluster_name"],
        "outbound|9080||ratings.shop.svc.cluster.local",
    );
    assert_eq!(vm.get("k").1, Action::Continue);
    vm.turn();
    assert!(vm.host.take_calls().is_empty());
}

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
            .contains(&("meshlimit_key_id".into(), denied.clone())),
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

#[test]
fn a_vm_fetches_each_rules_version_once() {
    let first = per_key("closed");
    let (first_version, _) = served(first.clone());
    let mut vm = Vm::with_rules(first);
    // The agent is still on the VM's version: nothing to fetch.
    vm.tick();
    let sync = vm.only_call();
    vm.answer(&sync, Some(200), &sync_answer(&first_version));
    assert!(vm.host.take_calls().is_empty());
    // A new version: one fetch. A sync while it is on its way sends no other.
    let (version, lines) = served(per_key("open"));
    vm.tick();
    let sync = vm.only_call();
    vm.answer(&sync, Some(200), &sync_answer(&version));
    let fetch = vm.only_call();
    assert!(fetch.path.starts_with(RULES_PATH), "{}", fetch.path);
    vm.tick();
    let sync = vm.only_call();
    vm.answer(&sync, Some(200), &sync_answer(&version));
    assert!(vm.host.take_calls().is_empty());
    vm.answer(&fetch, Some(200), &lines);
}

#[test]
fn the_method_client_address_and_route_are_read_from_the_request() {
    let mut vm = Vm::with_rules(serde_json::json!({"version": 1, "rules": [
        {"name": "per-method-ip", "match": {"route": "search"}, "key": ["method", "client_ip"],
         "limit": {"requests": 10, "per": "1s"}},
    ]}));
    vm.host
        .set_host_property(&["source", "address"], "10.0.0.7:5555");
    vm.host.set_host_property(&["xds", "route_name"], "search");
    let asked = |vm: &mut Vm, method: &str| {
        let (_, action) = vm.request(&[
            (":method", method),
            (":path", "/search"),
            (":authority", "api.example.com"),
            ("x-forwarded-for", "203.0.113.9"),
        ]);
        assert_eq!(action, Action::Pause);
        vm.turn();
        let call = vm.only_call();
        let asked: LeaseRequest = serde_json::from_slice(&call.body).unwrap();
        vm.answer(&call, None, b"");
        asked.items[0].key.clone()
    };
    // The downstream address counts, not what the client wrote in
    // X-Forwarded-For (no trusted hops).
    assert_eq!(
        asked(&mut vm, "POST"),
        DescriptorKey::new("per-method-ip", ["POST", "10.0.0.7"])
    );
    assert_eq!(
        asked(&mut vm, "GET"),
        DescriptorKey::new("per-method-ip", ["GET", "10.0.0.7"])
    );
    // On another route, or none, the rule does not apply.
    for route in ["other", ""] {
        vm.host.set_host_property(&["xds", "route_name"], route);
        let (_, action) = vm.get("k");
        assert_eq!(action, Action::Continue, "route {route:?}");
        vm.turn();
        assert!(vm.host.take_calls().is_empty());
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
