//! Rules ordered strictest first, and plans picking their limit.

use super::*;

#[test]
fn rules_are_ordered_strictest_first() {
    let s = set();
    let names: Vec<&str> = s.rules().iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["plans", "per-key", "loose"]);
}

#[test]
fn plans_pick_their_limit_and_fall_back_to_the_default() {
    let s = set();
    let limit_of = |plan: Option<&str>| {
        let mut h = vec![("x-customer", "c1")];
        h.extend(plan.map(|p| ("x-plan", p)));
        let req = request("/", "GET", &h);
        let a = s
            .applicable(&req)
            .unwrap()
            .into_iter()
            .find(|a| a.rule.name == "plans")
            .map(|a| (a.limit.requests(), a.plan.map(str::to_string)));
        a.unwrap_or_default()
    };
    assert_eq!(limit_of(Some("pro")), (100, Some("pro".into())));
    assert_eq!(limit_of(Some("platinum")), (1, Some("free".into())));
    assert_eq!(limit_of(None), (1, Some("free".into())));
}

#[test]
fn a_plan_rule_is_ordered_by_its_strictest_plan() {
    let s = compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "middle", "key": ["method"], "limit": {"requests": 100, "per": "1s"}},
            {"name": "plans", "key": [{"header": "x-customer"}],
             "plans": {"header": "x-plan", "default": "pro", "limits": {
                 "free": {"requests": 1, "per": "1s"}, "pro": {"requests": 1000, "per": "1s"}}}},
        ]
    }))
    .unwrap();
    let names: Vec<&str> = s.rules().iter().map(|r| r.name.as_str()).collect();
    // The free plan (1/s) is stricter than the 100/s rule, though the plan rule's
    // loosest (and default) plan is not.
    assert_eq!(names, ["plans", "middle"]);
    let plans = s.rule("plans").unwrap();
    assert_eq!(plans.limits.strictest().requests(), 1);
}
