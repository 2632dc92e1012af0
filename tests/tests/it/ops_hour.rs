//! An hour of operations at once (`make ops-hour`; not in `make test`): a
//! Redis Cluster of 3 primaries with a replica each, two nodes (an agent and
//! an Envoy each, the Envoys' listeners from a file so a filter can be rolled
//! out), steady load over a hot key, a zipf spread of keys and cold keys, and
//! a schedule of events an operator causes or suffers: agent upgrades, a hash
//! slot moved, a primary added and later removed (each with a rebalance of
//! the slots), a primary killed, a rules change with its trial, a filter
//! rollout. Every second it records what each rule decided, by outcome, the
//! store's topology events and redirects, and the agents' and Envoys'
//! memory; at the end it writes the figures (`ops-hour.csv`), a table of each
//! event's effect (`summary.md`) and a plot (`ops-hour.png`) to
//! `OPS_OUT` (bench/results/ops-hour by default, from the repository's root). `OPS_MINUTES` sets the
//! length (60 by default); the events are spread evenly over it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshlimit_tests::{
    eventually, rebuilt_module, redis_bucket_key, sample, signal, try_request, Agent, AgentOptions,
    EnvoyConfig, Load, RedisCluster, Stack,
};

/// The hot key's limit a second (and burst), offered twice that in all.
const HOT: f64 = 100.0;
/// Each zipf key's limit a second; the keys and their offered rate a node.
const ZIPF_LIMIT: f64 = 5.0;
const ZIPF_KEYS: usize = 1_000;
const ZIPF_RATE: f64 = 100.0;
/// Cold keys: each seen about once, far under its limit; offered a node.
const COLD_RATE: f64 = 20.0;
const RULES: &str = "
version: 1
changes: { shadow_first: 20s }
rules:
  - { name: hot, match: { path_prefix: /hot }, key: [{ header: x-api-key }], limit: { requests: 100, per: 1s }, on_failure: local }
  - { name: zipf, match: { path_prefix: /zipf }, key: [{ header: x-api-key }], limit: { requests: 5, per: 1s }, on_failure: local }
  - { name: cold, match: { path_prefix: /cold }, key: [{ header: x-api-key }], limit: { requests: 100, per: 1m }, on_failure: open }
";
/// The rules change: the zipf keys' limit tightened, on trial for 20 s.
const RULES_CHANGED: &str = "
version: 1
changes: { shadow_first: 20s }
rules:
  - { name: hot, match: { path_prefix: /hot }, key: [{ header: x-api-key }], limit: { requests: 100, per: 1s }, on_failure: local }
  - { name: zipf, match: { path_prefix: /zipf }, key: [{ header: x-api-key }], limit: { requests: 4, per: 1s }, on_failure: local }
  - { name: cold, match: { path_prefix: /cold }, key: [{ header: x-api-key }], limit: { requests: 100, per: 1m }, on_failure: open }
";
const RULE_NAMES: [&str; 3] = ["hot", "zipf", "cold"];
/// A rule's decisions as the filter counts them: the last three are by a
/// failure policy.
pub(super) const OUTCOMES: [&str; 5] = [
    "allowed",
    "limited",
    "failed_open",
    "failed_closed",
    "failed_local",
];

/// One node: its agent and Envoy, and the rules its agent reads.
struct Node {
    stack: Stack,
    rules: &'static str,
}

/// One node's figures at one reading (the counters as read), or over the
/// interval since its reading before (`delta`). Each node is read on its
/// own clock: a process that answers slowly (Envoy's admin while it compiles
/// a new module) moves that node's reading, not the others'.
#[derive(Clone, Default)]
struct Second {
    node: usize,
    /// When its Envoy's counters were read, seconds into the run.
    at: f64,
    /// For an interval: its length in seconds (about 1).
    span: f64,
    /// Per rule (RULE_NAMES) and outcome (OUTCOMES).
    decisions: [[u64; 5]; 3],
    node_down: f64,
    redirects: f64,
    agent_rss_kib: u64,
    envoy_rss_kib: u64,
}

/// What an event did, from its start to the next event's.
struct Event {
    name: String,
    at: f64,
    took: Duration,
}

#[test]
#[ignore = "an hour: make ops-hour"]
fn an_hour_of_operations() {
    let minutes: f64 = std::env::var("OPS_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(60.0);
    let out = meshlimit_tests::repo_root()
        .join(std::env::var("OPS_OUT").unwrap_or_else(|_| "bench/results/ops-hour".to_string()));
    let length = Duration::from_secs_f64(minutes * 60.0);
    let mut cluster = RedisCluster::start_with(3, 1, 1_000);
    let mut nodes: Vec<Node> = (0..2)
        .map(|_| Node {
            stack: Stack::start_with(
                AgentOptions::new(RULES).store(cluster.url()),
                EnvoyConfig::listeners_from_file,
            ),
            rules: RULES,
        })
        .collect();
    let t0 = Instant::now();
    let loads = Loads::start(&nodes, length + Duration::from_secs(60));
    let recorder = Recorder::start(&nodes, t0);

    let schedule: [&'static str; 8] = [
        "agent upgrade, node 1",
        "hash slot of the hot key moved",
        "primary added, slots rebalanced",
        "primary killed",
        "rules change with its trial",
        "added primary drained, removed",
        "filter rollout, node 2",
        "agent upgrade, node 2",
    ];
    let every = length.div_f64(schedule.len() as f64 + 1.0);
    let mut events = Vec::new();
    for (i, name) in schedule.iter().enumerate() {
        let due = t0 + every.mul_f64(i as f64 + 1.0);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let started = Instant::now();
        recorder.sync(&nodes);
        match i {
            0 => upgrade(&mut nodes[0], &cluster.url()),
            1 => move_hot_slot(&cluster),
            2 => {
                cluster.add_primary();
            }
            3 => kill_a_primary(&mut cluster),
            4 => change_rules(&mut nodes),
            5 => cluster.remove_last_primary(),
            6 => roll_filter(&nodes[1]),
            _ => upgrade(&mut nodes[1], &cluster.url()),
        }
        recorder.sync(&nodes);
        events.push(Event {
            name: name.to_string(),
            at: started.duration_since(t0).as_secs_f64(),
            took: started.elapsed(),
        });
        println!(
            "{:>7.1} s: {name} ({:?})",
            events.last().unwrap().at,
            started.elapsed()
        );
    }
    std::thread::sleep((t0 + length).saturating_duration_since(Instant::now()));
    let seconds = recorder.stop();
    drop(loads);
    report(&out, &seconds, &events, minutes);
}

/// Draws the plot again from a run's `ops-hour.csv` and `summary.md` in
/// `OPS_OUT`, for a change to the plot alone: `cargo test -p meshlimit-tests
/// --test it ops_hour::replot -- --ignored`.
#[test]
#[ignore = "redraws a committed run's plot"]
fn replot() {
    let out = meshlimit_tests::repo_root()
        .join(std::env::var("OPS_OUT").unwrap_or_else(|_| "bench/results/ops-hour".to_string()));
    let csv = std::fs::read_to_string(out.join("ops-hour.csv")).unwrap();
    let deltas: Vec<Second> = csv
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<f64> = line.split(',').map(|v| v.parse().unwrap()).collect();
            let mut d = Second {
                node: f[0] as usize - 1,
                at: f[1],
                span: f[2],
                ..Second::default()
            };
            d.decisions[0][0] = f[3] as u64;
            d.decisions[0][2] = f[5] as u64;
            d
        })
        .collect();
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    let events: Vec<Event> = summary
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let at: f64 = cells.get(2)?.parse().ok()?;
            let took: f64 = cells.get(3)?.parse().ok()?;
            Some(Event {
                name: cells[1].to_string(),
                at,
                took: Duration::from_secs_f64(took),
            })
        })
        .collect();
    let nodes = deltas.iter().map(|d| d.node + 1).max().unwrap_or(0);
    plot(&out.join("ops-hour.png"), &deltas, &events, nodes);
}

/// The steady load: per node, the hot key at its share of twice the limit,
/// zipf keys and cold keys.
struct Loads {
    hot: Vec<Load>,
    stop: Arc<AtomicBool>,
    spread: Vec<std::thread::JoinHandle<()>>,
}

impl Loads {
    fn start(nodes: &[Node], max: Duration) -> Loads {
        let stop = Arc::new(AtomicBool::new(false));
        let mut spread = Vec::new();
        let mut hot = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            let base = node.stack.envoy.url("");
            hot.push(Load::start(
                &format!("{base}/hot"),
                &[("x-api-key", "hot")],
                2.0 * HOT / nodes.len() as f64,
                4,
                max,
            ));
            for (path, rate, keys) in [("zipf", ZIPF_RATE, ZIPF_KEYS), ("cold", COLD_RATE, 0)] {
                for t in 0..2 {
                    let (url, stop) = (format!("{base}/{path}"), stop.clone());
                    let seed = (n * 10 + t) as u64 + 1;
                    spread.push(std::thread::spawn(move || {
                        spread_load(&url, rate / 2.0, keys, seed, &stop)
                    }));
                }
            }
        }
        Loads { hot, stop, spread }
    }
}

impl Drop for Loads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for load in self.hot.drain(..) {
            drop(load.stop());
        }
        for t in self.spread.drain(..) {
            let _ = t.join();
        }
    }
}

/// Requests at `rate` a second to `url`, each for a key drawn by zipf
/// (s = 1.1) over `keys` keys, or a new key each time when `keys` is 0.
fn spread_load(url: &str, rate: f64, keys: usize, seed: u64, stop: &AtomicBool) {
    let weights: Vec<f64> = (1..=keys.max(1))
        .map(|k| 1.0 / (k as f64).powf(1.1))
        .collect();
    let total: f64 = weights.iter().sum();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let started = Instant::now();
    for i in 0u64.. {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let due = started + Duration::from_secs_f64(i as f64 / rate);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let key = if keys == 0 {
            format!("cold-{seed}-{i}")
        } else {
            let mut u = next() * total;
            let mut k = 0;
            while k + 1 < weights.len() && u > weights[k] {
                u -= weights[k];
                k += 1;
            }
            format!("z{k}")
        };
        let _ = try_request("GET", url, &[("x-api-key", &key)], None);
    }
}

/// Reads every node's figures once a second on a thread of its own.
struct Recorder {
    stop: Arc<AtomicBool>,
    nodes: Arc<std::sync::Mutex<Vec<Probe>>>,
    thread: Option<std::thread::JoinHandle<Vec<Second>>>,
}

/// What the recorder reads of a node: its agent's and Envoy's addresses and
/// processes (an upgrade or a rollout changes them: `sync`).
#[derive(Clone)]
struct Probe {
    agent_url: String,
    envoy_admin: String,
    agent_pid: Option<u32>,
    envoy_pid: u32,
}

impl Probe {
    fn of(node: &Node) -> Probe {
        Probe {
            agent_url: format!("http://127.0.0.1:{}/metrics", node.stack.agent.port()),
            envoy_admin: node.stack.envoy.admin_url("/stats"),
            agent_pid: node.stack.agent.pid(),
            envoy_pid: node.stack.envoy.pid(),
        }
    }
}

impl Recorder {
    fn start(nodes: &[Node], t0: Instant) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let probes: Vec<Probe> = nodes.iter().map(Probe::of).collect();
        let probes = Arc::new(std::sync::Mutex::new(probes));
        let (s, p) = (stop.clone(), Arc::clone(&probes));
        let thread = std::thread::spawn(move || {
            let mut seconds = Vec::new();
            let mut i = 1u64;
            loop {
                std::thread::sleep(
                    (t0 + Duration::from_secs(i)).saturating_duration_since(Instant::now()),
                );
                if s.load(Ordering::SeqCst) {
                    return seconds;
                }
                let probes: Vec<Probe> = p.lock().unwrap().clone();
                seconds.extend(probes.iter().enumerate().map(|(n, p)| read_node(n, p, t0)));
                // A slow reading skips the seconds it took, rather than
                // reading again at once to catch up.
                i = (i + 1).max(t0.elapsed().as_secs() + 1);
            }
        });
        Recorder {
            stop,
            nodes: probes,
            thread: Some(thread),
        }
    }

    /// Follows the nodes' current processes.
    fn sync(&self, nodes: &[Node]) {
        *self.nodes.lock().unwrap() = nodes.iter().map(Probe::of).collect();
    }

    fn stop(mut self) -> Vec<Second> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

fn read_node(node: usize, p: &Probe, t0: Instant) -> Second {
    let stats = try_request("GET", &p.envoy_admin, &[], None)
        .map(|r| r.body)
        .unwrap_or_default();
    let mut s = Second {
        node,
        at: t0.elapsed().as_secs_f64(),
        ..Second::default()
    };
    for (r, rule) in RULE_NAMES.iter().enumerate() {
        for (o, outcome) in OUTCOMES.iter().enumerate() {
            let name = format!("wasmcustom.meshlimit.rule.{rule}.{outcome}: ");
            s.decisions[r][o] = stats
                .lines()
                .find_map(|l| l.strip_prefix(&name)?.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    let metrics = try_request("GET", &p.agent_url, &[], None)
        .map(|r| r.body)
        .unwrap_or_default();
    let events = "meshlimit_store_topology_events_total";
    s.node_down = sample(&metrics, events, &[("event", "node_down")]).unwrap_or(0.0);
    s.redirects = sample(&metrics, "meshlimit_store_redirects_total", &[]).unwrap_or(0.0);
    s.agent_rss_kib = p.agent_pid.map_or(0, rss_kib);
    s.envoy_rss_kib = rss_kib(p.envoy_pid);
    s
}

/// A process's resident memory, in KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// An agent upgrade as the DaemonSet rolls it: the new agent on the old one's
/// port, then SIGTERM to the old one.
fn upgrade(node: &mut Node, store: &str) {
    let options = AgentOptions::new(node.rules)
        .store(store)
        .port(node.stack.agent.port());
    let new = Agent::start_with(options);
    eventually(Duration::from_secs(20), "the new agent to serve", || {
        new.stderr().contains("meshlimit-agent serving")
    });
    signal(node.stack.agent.pid().unwrap(), "-TERM");
    eventually(Duration::from_secs(20), "the old agent to exit", || {
        !node.stack.agent.is_running()
    });
    node.stack.agent = new;
}

/// Moves the hot key's hash slot to the next primary, key by key.
fn move_hot_slot(cluster: &RedisCluster) {
    let key = redis_bucket_key("hot", &["hot"]);
    let slot = cluster.slot_of(&key);
    let from = cluster
        .index_of(cluster.slot_owner(0, slot).unwrap())
        .unwrap();
    let to = (0..cluster.ports().len())
        .find(|n| *n != from && cluster.slot_owner(0, slot).is_some() && is_primary(cluster, *n))
        .unwrap();
    cluster.start_slot_move(slot, from, to);
    cluster.migrate_keys(from, to, &[key]);
    cluster.finish_slot_move(slot, from, to);
}

fn is_primary(cluster: &RedisCluster, node: usize) -> bool {
    cluster.flags_of(node, node).contains("master")
}

/// Kills a primary that has a replica (the one added by scaling out has
/// none), the one holding the most-requested zipf key that such a primary
/// holds, waits for its replica's promotion, and restarts it (it rejoins as a
/// replica).
fn kill_a_primary(cluster: &mut RedisCluster) {
    let (slot, port) = (0..ZIPF_KEYS)
        .find_map(|k| {
            let slot = cluster.slot_of(&redis_bucket_key("zipf", &[&format!("z{k}")]));
            let port = cluster.slot_owner(0, slot)?;
            let replicated = cluster
                .index_of(port)
                .is_some_and(|n| n < cluster.founders());
            replicated.then_some((slot, port))
        })
        .expect("a zipf key on a replicated primary");
    let victim = cluster.index_of(port).unwrap();
    let witness = (0..cluster.ports().len()).find(|n| *n != victim).unwrap();
    cluster.kill_node(victim);
    eventually(
        Duration::from_secs(30),
        "a replica to take the slots",
        || cluster.slot_owner(witness, slot).is_some_and(|p| p != port),
    );
    cluster.restart_node(victim);
}

/// The zipf rule tightened on every agent; its trial runs in shadow first.
fn change_rules(nodes: &mut [Node]) {
    for node in nodes.iter_mut() {
        node.stack.agent.update_rules(RULES_CHANGED);
        node.rules = RULES_CHANGED;
    }
}

/// A new build of the filter module, pushed to the node's Envoy.
fn roll_filter(node: &Node) {
    let old = EnvoyConfig::new(0).wasm_path();
    let new = rebuilt_module(&old, node.stack.envoy.dir(), "ops");
    node.stack.envoy.roll_filter(&old, &new);
}

/// Writes the figures, the events' table and the plot.
fn report(out: &Path, seconds: &[Second], events: &[Event], minutes: f64) {
    std::fs::create_dir_all(out).unwrap();
    let mut csv = String::from("node,second,span,hot_allowed,hot_limited,failure_policy,zipf_allowed,zipf_limited,cold_allowed,node_down,redirects,agent_rss_kib,envoy_rss_kib\n");
    let nodes = seconds.iter().map(|s| s.node + 1).max().unwrap_or(0);
    let mut deltas: Vec<Second> = (0..nodes)
        .flat_map(|n| {
            let mine: Vec<&Second> = seconds.iter().filter(|s| s.node == n).collect();
            mine.windows(2)
                .map(|w| delta(w[0], w[1]))
                .collect::<Vec<_>>()
        })
        .collect();
    deltas.sort_by(|a, b| a.at.total_cmp(&b.at));
    for d in &deltas {
        let _ = writeln!(
            csv,
            "{},{:.2},{:.2},{},{},{},{},{},{},{},{},{},{}",
            d.node + 1,
            d.at,
            d.span,
            d.decisions[0][0],
            d.decisions[0][1],
            failure_policy(d),
            d.decisions[1][0],
            d.decisions[1][1],
            d.decisions[2][0],
            d.node_down,
            d.redirects,
            d.agent_rss_kib,
            d.envoy_rss_kib,
        );
    }
    let end = deltas.last().map_or(0.0, |d| d.at);
    std::fs::write(out.join("ops-hour.csv"), csv).unwrap();
    std::fs::write(
        out.join("summary.md"),
        summary(&deltas, events, minutes, end),
    )
    .unwrap();
    plot(&out.join("ops-hour.png"), &deltas, events, nodes);
}

/// What happened in the second ending at `b` (memory as it is at `b`).
fn delta(a: &Second, b: &Second) -> Second {
    let mut d = b.clone();
    d.span = b.at - a.at;
    for r in 0..3 {
        for o in 0..5 {
            // A process replaced in between (an upgrade, a rollout) starts its
            // counters again: count what the new one shows.
            d.decisions[r][o] = b.decisions[r][o]
                .checked_sub(a.decisions[r][o])
                .unwrap_or(b.decisions[r][o]);
        }
    }
    d.node_down = (b.node_down - a.node_down).max(0.0);
    d.redirects = (b.redirects - a.redirects).max(0.0);
    d
}

/// `count` over the interval `d`, a second.
fn rate(count: u64, d: &Second) -> f64 {
    count as f64 / d.span.max(1e-3)
}

fn failure_policy(d: &Second) -> u64 {
    d.decisions.iter().map(|r| r[2] + r[3] + r[4]).sum()
}

/// The hot key's admitted rate, both nodes together, and the decisions by a
/// failure policy, in each whole second of the run (a node's interval counts
/// in the second it ends in).
fn whole_seconds(window: &[&Second]) -> std::collections::BTreeMap<u64, (f64, u64)> {
    let mut by_second = std::collections::BTreeMap::new();
    for d in window {
        let entry = by_second.entry(d.at as u64).or_insert((0.0, 0));
        entry.0 += rate(d.decisions[0][0], d);
        entry.1 += failure_policy(d);
    }
    by_second
}

fn summary(deltas: &[Second], events: &[Event], minutes: f64, end: f64) -> String {
    let mut md = format!(
        "# An hour of operations ({minutes} minutes)\n\n`make ops-hour OPS_MINUTES={minutes}`: two nodes on a Redis Cluster of 3 primaries with a replica each; the hot key offered {} a second against {HOT}, {ZIPF_KEYS} zipf keys at {} a second against {ZIPF_LIMIT} each, cold keys at {} a second. Each event's row covers the time from it to the next event.\n\n",
        2.0 * HOT,
        2.0 * ZIPF_RATE,
        2.0 * COLD_RATE
    );
    md.push_str("A second is *disturbed* when a decision in it was taken by a failure policy or the hot key's admitted rate (both nodes) was more than 10% off its limit; *recovered* is when the last disturbed second before the next event ended, counted from the event's start.\n\n");
    md.push_str("| event | at (s) | took (s) | failure-policy decisions | hot key admitted / limit | hot key's highest and lowest second / limit | recovered after (s) | node_down | redirects |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut bounds: Vec<f64> = events.iter().map(|e| e.at).collect();
    bounds.push(end);
    for (i, e) in events.iter().enumerate() {
        let (from, to) = (e.at, bounds[i + 1]);
        let window: Vec<&Second> = deltas
            .iter()
            .filter(|d| d.at > from && d.at <= to)
            .collect();
        let hot: u64 = window.iter().map(|d| d.decisions[0][0]).sum();
        let by_second = whole_seconds(&window);
        let ratios = by_second.values().map(|(hot, _)| hot / HOT);
        let (high, low) = ratios.fold((0.0_f64, f64::MAX), |(h, l), r| (h.max(r), l.min(r)));
        let recovered = by_second
            .iter()
            .filter(|(_, (hot, failed))| *failed > 0 || (hot / HOT - 1.0).abs() > 0.1)
            .map(|(second, _)| (*second + 1) as f64 - from)
            .fold(0.0_f64, f64::max);
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.1} | {} | {:.3} | {:.2} / {:.2} | {:.0} | {} | {} |",
            e.name,
            e.at,
            e.took.as_secs_f64(),
            window.iter().map(|d| failure_policy(d)).sum::<u64>(),
            hot as f64 / (HOT * (to - from)).max(1.0),
            high,
            if low == f64::MAX { 0.0 } else { low },
            recovered,
            window.iter().map(|d| d.node_down).sum::<f64>(),
            window.iter().map(|d| d.redirects).sum::<f64>(),
        );
    }
    let total: u64 = deltas
        .iter()
        .map(|d| d.decisions.iter().flatten().sum::<u64>())
        .sum();
    let failed: u64 = deltas.iter().map(failure_policy).sum();
    // Memory a minute in (after warm-up) and at the end, summed over nodes.
    let memory = |at: f64, of: fn(&Second) -> u64| -> u64 {
        let mut by_node: std::collections::BTreeMap<usize, u64> = Default::default();
        for d in deltas.iter().filter(|d| d.at <= at) {
            by_node.insert(d.node, of(d));
        }
        by_node.values().sum()
    };
    let warm = 60.0_f64.min(end / 2.0);
    let _ = write!(
        md,
        "\nDecisions in all: {total}; by a failure policy: {failed} ({:.4} %).\n\nMemory (KiB, summed over the nodes) at {warm:.0} s and at the end: agents {} → {}, Envoys {} → {}.\n",
        100.0 * failed as f64 / (total as f64).max(1.0),
        memory(warm, |d| d.agent_rss_kib),
        memory(end, |d| d.agent_rss_kib),
        memory(warm, |d| d.envoy_rss_kib),
        memory(end, |d| d.envoy_rss_kib),
    );
    let largest = deltas.iter().map(|d| d.agent_rss_kib).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "\nThe largest agent at any reading: {:.1} MiB, against the 256 MiB the DaemonSet limits an agent to.",
        largest as f64 / 1024.0
    );
    md
}

fn plot(path: &Path, deltas: &[Second], events: &[Event], nodes: usize) {
    use plotters::prelude::*;
    use plotters::style::{register_font, FontStyle};
    // Text needs a font: the one embedded in the binary, the same everywhere.
    let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    let root = BitMapBackend::new(path, (1400, 700)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let end = deltas.last().map_or(1.0, |d| d.at);
    let top = deltas
        .iter()
        .map(|d| rate(d.decisions[0][0], d).max(rate(failure_policy(d), d)))
        .fold(HOT, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "per node: hot key admitted a second, and decisions by a failure policy",
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..top * 1.1)
        .unwrap();
    chart.configure_mesh().x_desc("seconds").draw().unwrap();
    let colours = [(BLUE, RED), (CYAN, MAGENTA)];
    for n in 0..nodes {
        let (admitted, failed) = colours[n % colours.len()];
        let mine: Vec<&Second> = deltas.iter().filter(|d| d.node == n).collect();
        chart
            .draw_series(LineSeries::new(
                mine.iter().map(|d| (d.at, rate(d.decisions[0][0], d))),
                admitted,
            ))
            .unwrap()
            .label(format!("node {}: hot key admitted", n + 1))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], admitted));
        chart
            .draw_series(LineSeries::new(
                mine.iter().map(|d| (d.at, rate(failure_policy(d), d))),
                failed,
            ))
            .unwrap()
            .label(format!("node {}: failure-policy decisions", n + 1))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], failed));
    }
    let share = HOT / nodes.max(1) as f64;
    chart
        .draw_series(LineSeries::new(
            [(0.0, share), (end, share)],
            BLACK.mix(0.4),
        ))
        .unwrap()
        .label("a node's share of the hot key's limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    for (i, e) in events.iter().enumerate() {
        chart
            .draw_series(LineSeries::new(
                [(e.at, 0.0), (e.at, top * 1.1)],
                GREEN.mix(0.6),
            ))
            .unwrap();
        // Three rows of labels, so neighbours do not overlap.
        let row = [1.06, 0.99, 0.92][i % 3];
        chart
            .draw_series(std::iter::once(Text::new(
                e.name.clone(),
                (e.at, top * row),
                ("sans-serif", 13),
            )))
            .unwrap();
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .unwrap();
    root.present().unwrap();
}
