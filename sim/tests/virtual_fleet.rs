//! The virtual fleet (`meshlimit_sim::vtime`: the filter's and the agent's
//! own code in virtual time, no Redis, no agent processes): one seed's two
//! runs are identical.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use meshlimit_sim::measure::Figures;
use meshlimit_sim::{vtime, Overrides, Plan, Scenario};

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
