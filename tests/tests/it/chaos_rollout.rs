//! Chaos at the filter: a new build of the module rolled out under load, as
//! a control plane pushes a new WasmPlugin version. Envoy's listeners come
//! from a file it watches; the file is replaced, naming the new module. Envoy
//! starts the new module's VMs beside the old ones, which keep the
//! connections they hold until those drain. Both share Envoy's shared data,
//! which is keyed by the VM id (the same for both), so the new VMs decide from
//! the keys' slots as the old ones left them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use meshlimit_tests::{count_between, eventually, AgentOptions, EnvoyConfig, Load, Sample, Stack};

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

/// `module` with a custom section appended: the same filter, but another
/// module to Envoy (its bytes, so its hash, differ), as a new build is.
fn new_build(module: &Path, dir: &Path) -> PathBuf {
    const NAME: &[u8] = b"meshlimit-rollout";
    const PAYLOAD: &[u8] = b"v2";
    let mut bytes = std::fs::read(module).unwrap();
    // Section id 0 (custom), its size, then the name's length and the name:
    // every length under 128 is one LEB128 byte.
    bytes.push(0);
    bytes.push((1 + NAME.len() + PAYLOAD.len()) as u8);
    bytes.push(NAME.len() as u8);
    bytes.extend_from_slice(NAME);
    bytes.extend_from_slice(PAYLOAD);
    let path = dir.join("meshlimit_filter-v2.wasm");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Decisions of `rule` by its failure policy, in every form.
fn by_failure_policy(stack: &Stack, rule: &str) -> u64 {
    ["failed_open", "failed_closed", "failed_local"]
        .iter()
        .map(|o| stack.decisions(rule, o))
        .sum()
}

#[test]
fn a_filter_rollout_under_load_keeps_the_limit_and_answers_every_request() {
    let stack = Stack::start_with(AgentOptions::new(RULES), |c| c.listeners_from_file());
    let old = EnvoyConfig::new(0).wasm_path();
    let new = new_build(&old, stack.envoy.dir());
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
    std::thread::sleep(Duration::from_secs(2));
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
    std::thread::sleep(Duration::from_secs(3));
    let hot = hot.stop();

    // The new module runs: its VMs were made (one a worker and the main
    // thread's), and the last requests went through them.
    let made = vms(&stack).unwrap_or(0) - created;
    println!(
        "VMs made by the rollout: {made}; Envoy stats:\n{}",
        wasm_stats(&stack)
    );
    assert!(made >= 1, "no new VM: the rollout did not happen");

    assert_eq!(by_failure_policy(&stack, "hot"), 0);
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
    assert_hot_key_admitted(&hot, rolled, took + Duration::from_secs(1));
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

/// No token made by the rollout (from `from` to `to`), and none lost past
/// what the old VMs held unspent.
fn assert_hot_key_admitted(hot: &[Sample], from: Instant, to: Instant) {
    let admitted = count_between(hot, from, to, 200);
    let limit = HOT * (to - from).as_secs_f64();
    let (first, last) = (hot[0], hot[hot.len() - 1]);
    let span = (last.at + last.latency).duration_since(first.at);
    let admitted_all = hot.iter().filter(|s| s.status == 200).count();
    println!(
        "hot key: {admitted} admitted in the rollout's {:?} (limit {limit:.0}), \
         {admitted_all} in {span:?}",
        to - from
    );
    // None made: from its first request the key admits at most its burst and
    // what refills, whichever VM decides.
    let bound = HOT + HOT * span.as_secs_f64();
    assert!(
        admitted_all as f64 <= bound,
        "{admitted_all} admitted, bound {bound}"
    );
    // None lost beyond the tolerance: the rollout's seconds admit the limit,
    // less what the old VMs held when their connections moved to the new ones
    // (ROLLOUT_TOLERANCE).
    let tolerance = ROLLOUT_TOLERANCE * HOT;
    assert!(
        (admitted as f64 - limit).abs() <= tolerance,
        "{admitted} admitted in the rollout, limit {limit:.0} ± {tolerance}"
    );
}

/// A hot key offered twice its limit admits, over a span, what refills (the
/// limit times the span), plus the tokens held unspent at its start, less
/// those held at its end (the agent upgrade's bound: three lease periods of
/// a second's limit, 0.3; see chaos_upgrade). The rollout adds what the old
/// VMs held in their own memory (a worker's slice of a lease, and the answers
/// of calls in flight as their connections went): tokens lost, not made, at
/// most a lease period's worth (0.1).
const ROLLOUT_TOLERANCE: f64 = 0.4;
