//! A VM's start-up on its plugin configuration, and how it fetches, runs and reports rules versions.

use super::*;

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
