use super::*;
use crate::scenario::Secs;
use crate::scenario::{Arrivals, Popularity, Shift, Spread};

fn traffic(rate: Rate, arrivals: Arrivals) -> Traffic {
    Traffic {
        rate,
        keys: 4,
        popularity: Popularity::Hot { share: 0.7 },
        arrivals,
        ..Traffic::default()
    }
}

fn all(t: &Traffic, gateways: usize, horizon: f64) -> Vec<Vec<Planned>> {
    let cdf = Rc::new(key_cdf(t));
    (0..gateways)
        .map(|g| ArrivalGen::new(t, g, gateways, horizon, 7, Rc::clone(&cdf)).collect())
        .collect()
}

#[test]
fn poisson_arrivals_offer_the_rate_and_the_popularity() {
    let t = traffic(Rate::Steady(1_000.0), Arrivals::Poisson);
    let per_gateway = all(&t, 10, 20.0);
    let n: usize = per_gateway.iter().map(Vec::len).sum();
    // 20,000 expected; a Poisson count's deviation is about 141.
    assert!((19_400..=20_600).contains(&n), "{n}");
    let hot = per_gateway.iter().flatten().filter(|a| a.key == 0).count();
    let share = hot as f64 / n as f64;
    assert!((0.68..=0.72).contains(&share), "{share}");
    for g in &per_gateway {
        assert!(g.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
        assert!(g.iter().all(|a| a.at_ns < 20_000_000_000 && a.key < 4));
    }
}

#[test]
fn uniform_arrivals_follow_a_step() {
    let step = Rate::Step {
        from: 100.0,
        to: 300.0,
        at: Secs(1.0),
    };
    let t = traffic(step, Arrivals::Uniform);
    let arrivals = all(&t, 1, 2.0).concat();
    let before = arrivals.iter().filter(|a| a.at_ns < 1_000_000_000).count();
    let after = arrivals.len() - before;
    assert!((99..=101).contains(&before), "{before}");
    assert!((299..=301).contains(&after), "{after}");
}

#[test]
fn a_shift_moves_the_traffic() {
    let mut t = traffic(Rate::Steady(400.0), Arrivals::Poisson);
    t.spread = Spread::Range { from: 0, to: 2 };
    t.shift = Some(Shift {
        at: Secs(5.0),
        to: Spread::Range { from: 2, to: 4 },
    });
    let per_gateway = all(&t, 4, 10.0);
    let half = 5_000_000_000;
    assert!(per_gateway[..2].iter().flatten().all(|a| a.at_ns < half));
    assert!(per_gateway[2..].iter().flatten().all(|a| a.at_ns >= half));
    assert!(per_gateway.iter().all(|g| g.len() > 800));
}

#[test]
fn the_same_seed_plans_the_same_load() {
    let t = traffic(Rate::Steady(500.0), Arrivals::Poisson);
    assert_eq!(all(&t, 3, 2.0), all(&t, 3, 2.0));
}
