//! Chaos at the filter: a new build of the module rolled out under load, as
//! a control plane pushes a new WasmPlugin version. Envoy's listeners come
//! from a file it watches; the file is replaced, naming the new module. Envoy
//! starts the new module's VMs beside the old ones, which keep the
//! connections they hold until those drain. Both share Envoy's shared data,
//! which is keyed by the VM id (the same for both), so the new VMs decide from
//! the keys' slots as the old ones left them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use meshlimit_tests::{
    assert_limit_kept, eventually, rebuilt_module, AgentOptions, EnvoyConfig, Load, Sample, Stack,
};

/// The hot key's limit, a second (its burst too).
const HOT: f64 = 200.0;
const RULES: &str = r#"
version: 1
rules:
  - name: hot
    match: { path_prefix: /hot }
    key: [{ header: x-api-key }]
    limit: { requests: 200, per: 1s }
    on_failure: closed
"#;

#[test]
fn a_filter_rollout_under_load_keeps_the_limit_and_answers_every_request() {
    let stack = Stack::start_with(AgentOptions::new(RULES), |c| c.listeners_from_file());
    let old = EnvoyConfig::new(0).wasm_path();
    let new = rebuilt_module(&old, stack.envoy.dir(), "v2");
    let vms = |stack: &Stack| stack.envoy.stat("wasm.envoy.wasm.runtime.v8.created");
    let created = vms(&stack).unwrap_or(0);
    let updates = |stack: &Stack| stack.envoy.stat("listener_manager.lds.update_success");
    let updated = updates(&stack).unwrap_or(0);

    let max = Duration::from_secs(30);
    let hot = Load::start(
        &stack.envoy.url("/hot"),
        &[("x-api-key", "hot")],
        2.0 * HOT,
        8,
        max,
    );
    std::thread::sleep(Duration::from_secs(2)); // the old module's phase, measured
    let rolled = Instant::now();
    stack.envoy.roll_filter(&old, &new);
    eventually(
        Duration::from_secs(10),
        "Envoy to take the new listeners",
        || updates(&stack).unwrap_or(0) > updated,
    );
    let took = Instant::now();
    println!(
        "Envoy took the new listeners {:?} after the file changed",
        took - rolled
    );
    std::thread::sleep(Duration::from_secs(3)); // the new module's phase, measured
    let hot = hot.stop();

    // The new module runs: its VMs were made (one a worker and the main
    // thread's), and the last requests went through them.
    let made = vms(&stack).unwrap_or(0) - created;
    println!(
        "VMs made by the rollout: {made}; Envoy stats:\n{}",
        wasm_stats(&stack)
    );
    assert!(made >= 1, "no new VM: the rollout did not happen");

    assert_eq!(stack.by_failure_policy("hot"), 0);
    let other: Vec<&Sample> = hot
        .iter()
        .filter(|s| s.status != 200 && s.status != 429)
        .collect();
    assert!(
        other.is_empty(),
        "{} neither 200 nor 429: {other:?}",
        other.len()
    );
    // From the file's change to a second after Envoy showed the new listeners.
    assert_limit_kept(
        &hot,
        HOT,
        rolled,
        took + Duration::from_secs(1),
        ROLLOUT_TOLERANCE,
    );
}

fn wasm_stats(stack: &Stack) -> String {
    stack
        .envoy
        .stats()
        .lines()
        .filter(|l| l.starts_with("wasm.") || l.starts_with("listener_manager."))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A hot key offered twice its limit admits, over a span, what refills (the
/// limit times the span), plus the tokens held unspent at its start, less
/// those held at its end (the agent upgrade's bound: three lease periods of
/// a second's limit, 0.3; see chaos_upgrade). The rollout adds what the old
/// VMs held in their own memory (a worker's slice of a lease, and the answers
/// of calls in flight as their connections went): tokens lost, not made, at
/// most a lease period's worth (0.1).
const ROLLOUT_TOLERANCE: f64 = 0.4;
