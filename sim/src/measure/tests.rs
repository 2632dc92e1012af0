use super::*;
use crate::record::{AgentCounts, Log};
use crate::scenario::{Overrides, Scenario};

const SEC: u64 = 1_000_000_000;

fn plan() -> Plan {
    Scenario::parse(
        r#"
name: m
duration: 4s
warmup: 1s
rules: |
  version: 1
  rules:
    - name: r
      key: [{ header: x-key }]
      limit: { requests: 2, per: 1s }
"#,
    )
    .unwrap()
    .plan(&Overrides::default())
    .unwrap()
}

fn event(at: u64, decision: Decision, ideal_admit: bool, wrong: bool) -> Event {
    Event {
        arrived_ns: at,
        decided_ns: at,
        key: 0,
        gateway: 0,
        decision,
        local: true,
        ideal_admit,
        wrong,
        held_back: false,
    }
}

#[test]
fn figures_count_the_steady_part_and_wrong_decisions() {
    let mut events = Vec::new();
    for s in 0..4u64 {
        // Each second: 3 offered, 2 allowed by an ideal limiter.
        events.push(event(s * SEC, Decision::Allowed, true, false));
        events.push(event(s * SEC + 1, Decision::Allowed, true, false));
        events.push(event(s * SEC + 2, Decision::Limited, false, false));
    }
    // Second 3: one more admitted than the ideal (wrongly), one wrongly limited.
    events.push(event(3 * SEC + 3, Decision::FailAllowed, false, true));
    events.push(event(3 * SEC + 4, Decision::Unavailable, true, true));
    // And one wrongly limited by an agent's answer, not the gateway's cache.
    events.push(Event {
        local: false,
        ..event(3 * SEC + 5, Decision::Limited, true, true)
    });
    let recorded = Recorded {
        log: Log {
            events,
            agent: AgentCounts {
                lease_tokens: vec![1, 2, 3, 10],
                // Three calls in the warmup (second 0), two after it.
                calls: 5,
                call_ns: vec![1, 2, SEC - 1, SEC, 3 * SEC],
                ..AgentCounts::default()
            },
            unmatched: 0,
            lag_us: Vec::new(),
        },
        scripts_per_second: vec![vec![5], vec![6], vec![7], vec![8]],
        elapsed: 4.0,
        refills: 0,
        waits: 0,
        cold_starts: 0,
        cold_starts_unpaid: 0,
    };
    let f = figures(&plan(), &recorded, 26, &[2.0]);
    assert_eq!(f.totals.requests, 15);
    assert_eq!((f.totals.wrongly_allowed, f.totals.wrongly_limited), (1, 2));
    // Where the wrong 429s were decided: one from the gateway's cached denial.
    assert_eq!(f.totals.wrongly_limited_cached, 1);
    assert_eq!(
        (f.steady.wrongly_limited, f.steady.wrongly_limited_cached),
        (2, 1)
    );
    // Steady part, seconds 1-3: 7 admitted against an allowance of 8.
    assert_eq!((f.steady.admitted, f.steady.ideal), (7, 8));
    assert!((f.steady.ratio - 7.0 / 8.0).abs() < 1e-12);
    // Second 3 admitted 3 against 4 ideal.
    assert_eq!(f.steady.max_over, 0.0);
    assert!((f.steady.max_under - 0.25).abs() < 1e-12);
    assert_eq!(f.leases.max, 10);
    // Calls: 5 over 15 requests, 2 over the steady part's 12.
    assert_eq!((f.agent_calls, f.steady.agent_calls), (5, 2));
    assert!((f.steady_calls_per_1000() - 2_000.0 / 12.0).abs() < 1e-9);
    assert_eq!(f.hottest_node_scripts_per_sec, 7.0);
    let all: Vec<&Second> = f.seconds.iter().filter(|s| s.key.is_none()).collect();
    assert_eq!(all.len(), 4);
    assert_eq!(all[3].offered, 6);
    assert_eq!(all[3].limit, 2.0);
    assert_eq!(all[0].scripts, Some(5));
    assert!((f.per_1000(f.script_calls) - 26_000.0 / 15.0).abs() < 1e-9);
}
