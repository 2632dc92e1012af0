//! The short versions of `scenarios/` in the virtual fleet
//! (`meshlimit_sim::vtime`: the filter's and the agent's own code in virtual
//! time, no Redis, no agent processes), over many seeds each: the targets the
//! real-time runs (`accuracy.rs`) hold, seed by seed, and one seed's two runs
//! identical. A missed seed's message prints the command that reproduces it.
//!
//! Seeds per scenario: `MESHLIMIT_SIM_SEEDS` (seeds 1 to N), default
//! [`DEFAULT_SEEDS`]; `make accuracy-seeds` runs 200.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use meshlimit_sim::measure::Figures;
use meshlimit_sim::{vtime, Overrides, Plan, RunReport, Scenario};

/// Seeds per scenario in `make test`: what fits its time (every scenario's
/// seeds together in about a minute of one core, unoptimised agent code).
const DEFAULT_SEEDS: u64 = 4;

fn seeds() -> u64 {
    std::env::var("MESHLIMIT_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEEDS)
}

fn short() -> Overrides {
    Overrides {
        short: true,
        ..Overrides::default()
    }
}

fn plan(name: &str) -> (String, Plan) {
    let path = format!("scenarios/{name}.yaml");
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(&path);
    let plan = Scenario::load(&file).unwrap().plan(&short()).unwrap();
    (path, plan)
}

/// The verdict's misses (`verdict.rs`: admitted band, wrong decisions).
fn targets(r: &RunReport) -> Vec<String> {
    r.checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{}: {}", c.what, c.value))
        .collect()
}

fn line(f: &Figures) -> String {
    format!(
        "admitted/limit {:.4}, steady wrongly limited {} / allowed {} of {}, agent calls {}, scripts {}",
        f.steady.ratio,
        f.steady.wrongly_limited,
        f.steady.wrongly_allowed,
        f.steady.requests,
        f.agent_calls,
        f.script_calls
    )
}

/// Runs every seed of `name`; fails with each missed seed's misses, figures
/// and reproducing command.
fn sweep(name: &str, check: impl Fn(&RunReport) -> Vec<String>) {
    let (path, plan) = plan(name);
    let n = seeds();
    let mut missed = Vec::new();
    for seed in 1..=n {
        let r = vtime::run(&plan, seed).unwrap();
        let misses = check(&r);
        if !misses.is_empty() {
            missed.push(format!(
                "seed {seed}: {misses:?}\n  {}\n  reproduce: {}",
                line(&r.figures),
                vtime::command(&path, seed, &short())
            ));
        }
    }
    assert!(
        missed.is_empty(),
        "{name}: {} of {n} seeds missed\n{}",
        missed.len(),
        missed.join("\n")
    );
}

#[test]
fn one_seed_runs_the_same_twice() {
    // A pooled hot key: asks wait on each other's store calls at the agents,
    // and the order they wake in decides who gets the tokens.
    let (_, plan) = plan("leased-hot-key-3x");
    let a = vtime::run(&plan, 7).unwrap();
    let b = vtime::run(&plan, 7).unwrap();
    assert!(
        a.figures == b.figures,
        "seed 7 ran twice:\n  {}\n  {}",
        line(&a.figures),
        line(&b.figures)
    );
}

#[test]
fn exact_rule_at_three_times_its_limit_admits_the_limit() {
    sweep("exact-3x", |r| {
        let mut m = targets(r);
        if r.figures.script_calls == 0 {
            m.push("no store calls".into());
        }
        m
    });
}

#[test]
fn leased_hot_key_at_three_times_its_limit_admits_the_limit() {
    // The store and agent call bounds of the real-time short run.
    sweep("leased-hot-key-3x", |r| {
        let f = &r.figures;
        let mut m = targets(r);
        let scripts = f.per_1000(f.script_calls);
        if scripts > 75.0 {
            m.push(format!("{scripts:.1} script calls per 1,000 requests"));
        }
        if f.hottest_node_scripts_per_sec > 220.0 {
            let hot = f.hottest_node_scripts_per_sec;
            m.push(format!("{hot:.0} script calls/s on the busiest node"));
        }
        let calls = f.per_1000(f.agent_calls);
        if calls > 190.0 {
            m.push(format!("{calls:.1} agent calls per 1,000 requests"));
        }
        m
    });
}

#[test]
fn ten_thousand_cold_keys_are_limited_per_key() {
    sweep("cold-keys", targets);
}

#[test]
fn a_load_shift_between_gateways_keeps_the_limit() {
    sweep("load-shift", targets);
}

#[test]
fn the_race_admits_exactly_one() {
    for name in ["race", "race-leased"] {
        sweep(name, |r| {
            let mut m = targets(r);
            if r.figures.totals.requests != 1_000 {
                m.push(format!("{} requests", r.figures.totals.requests));
            }
            m
        });
    }
}

#[test]
fn leased_windows_admit_their_windows() {
    sweep("fixed-window", targets);
    sweep("sliding-window", targets);
}

#[test]
fn a_hot_key_just_under_its_limit_is_never_limited() {
    sweep("hot-key-under-limit", |r| {
        let mut m = targets(r);
        if r.figures.totals.wrongly_limited > 0 {
            m.push(format!(
                "{} wrongly limited",
                r.figures.totals.wrongly_limited
            ));
        }
        m
    });
}

#[test]
fn one_gateway_with_forty_percent_of_the_traffic_keeps_the_limit() {
    sweep("one-gateway-40", targets);
}

#[test]
fn an_exact_hot_key_over_a_sharded_store_admits_the_limit() {
    sweep("hot-key-shard-exact", targets);
}

#[test]
fn a_leased_hot_key_over_a_sharded_store_admits_the_limit() {
    sweep("hot-key-shard-leased", targets);
}

#[test]
fn after_a_burst_a_key_under_its_limit_is_admitted_in_full_within_a_second() {
    // As the real-time run: from a second after the burst (5× from 5 s for
    // 2 s), every request an ideal limiter admits is admitted. (The onset's
    // wrong decisions are a known miss: docs/performance/accuracy.md.)
    sweep("burst", |r| {
        r.figures
            .seconds
            .iter()
            .filter(|s| s.key.is_none() && (8..11).contains(&s.second))
            .filter(|s| (s.admitted as f64) < 0.99 * s.ideal as f64)
            .map(|s| format!("second {}: {} of {}", s.second, s.admitted, s.ideal))
            .collect()
    });
}

#[test]
fn faults_the_seed_places_run_the_same_twice() {
    // An agent crash and restart, a store outage, lost calls and skewed
    // gateway clocks: the run still replays bit for bit.
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/leased-hot-key-3x.yaml");
    let text = std::fs::read_to_string(file).unwrap()
        + "virtual:\n  network: { loss: 0.01 }\n  faults: { agent_crashes: 1, agent_down: 2s, store_outages: 1, store_down: 500ms, clock_skew: 20ms }\n";
    let plan = Scenario::parse(&text).unwrap().plan(&short()).unwrap();
    let a = vtime::run(&plan, 3).unwrap();
    let b = vtime::run(&plan, 3).unwrap();
    assert!(a.figures.agent_failures > 0, "no fault reached a gateway");
    assert!(
        a.figures == b.figures,
        "seed 3 ran twice:\n  {}\n  {}",
        line(&a.figures),
        line(&b.figures)
    );
}
