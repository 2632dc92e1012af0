use std::rc::Rc;

use meshlimit_core::rules::RulesConfig;
use meshlimit_core::wire::LeaseAnswer;
use meshlimit_core::{RequestInfo, RuleSet, NANOS_PER_SEC};

use super::*;
use crate::pipeline::Evaluation;
use crate::testing::MemoryHost;

fn rules() -> Rc<RuleSet> {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({"version": 1, "rules": [
        {"name": "per-key", "key": [{"header": "x-api-key"}], "limit": {"requests": 10, "per": "1m"}},
        {"name": "search", "match": {"path_prefix": "/search", "methods": ["GET"]},
         "key": [{"header": "x-api-key"}], "limit": {"requests": 5, "per": "1s", "burst": 8}},
        {"name": "by-method", "key": ["method"], "limit": {"requests": 100, "per": "1s"}},
        {"name": "watch", "key": [{"header": "x-api-key"}], "limit": {"requests": 1, "per": "1s"}, "mode": "shadow"},
    ]}))
    .unwrap();
    Rc::new(RuleSet::compile(&config).unwrap())
}

fn caller(path: &str) -> RequestInfo {
    RequestInfo::new(
        path,
        "GET",
        vec![("x-api-key".to_string(), "k1".to_string())],
    )
}

fn limits(host: &MemoryHost, cfg: &FilterConfig, path: &str) -> Vec<(String, u32, u64)> {
    usage(host, cfg, Some(&rules()), &caller(path))
        .unwrap()
        .limits
        .into_iter()
        .map(|l| (l.rule, l.remaining, l.reset_seconds))
        .collect()
}

fn line(rule: &str, remaining: u32, reset: u64) -> (String, u32, u64) {
    (rule.to_string(), remaining, reset)
}

/// One request through the pipeline, the agent granting `tokens` (the store
/// then holding `store_remaining`, full again in `reset_ms`).
fn spend(host: &MemoryHost, cfg: &FilterConfig, path: &str, tokens: u32, store_remaining: u32) {
    let mut e = Evaluation::new(rules(), &caller(path), cfg)
        .unwrap()
        .unwrap();
    if e.local_pass(host, cfg) {
        let answers = e
            .lease_request()
            .items
            .iter()
            .map(|_| LeaseAnswer::Grant {
                tokens,
                ttl_ms: 1_000,
                remaining: store_remaining,
                reset_ms: 3_500,
                local: false,
                from: None,
                next_ask_ms: None,
            })
            .collect();
        e.apply_answers(host, cfg, answers);
    }
}

#[test]
fn keys_without_local_state_report_the_full_limit() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    // Naming no request: the rules that apply to the usage request as sent
    // (not `search`, scoped to another path; not the shadow rule).
    assert_eq!(
        limits(&host, &cfg, "/.well-known/ratelimit"),
        [line("per-key", 10, 0), line("by-method", 100, 0)]
    );
    // Naming one: the rules that would count it.
    assert_eq!(
        limits(&host, &cfg, "/.well-known/ratelimit?path=/other"),
        [line("per-key", 10, 0), line("by-method", 100, 0)]
    );
    assert_eq!(
        limits(
            &host,
            &cfg,
            "/.well-known/ratelimit?method=POST&path=%2Fsearch"
        ),
        [line("per-key", 10, 0), line("by-method", 100, 0)]
    );
    let l = usage(&host, &cfg, Some(&rules()), &caller("/u?path=/search")).unwrap();
    assert_eq!(
        serde_json::to_value(&l.limits[1]).unwrap(),
        serde_json::json!({"rule": "search", "requests": 5, "per_seconds": 1, "remaining": 8, "reset_seconds": 0})
    );
    assert_eq!(host.slot_count(), 0);
}

#[test]
fn spent_tokens_show_and_asking_spends_none() {
    let host = MemoryHost::default();
    host.set_now(NANOS_PER_SEC);
    let cfg = FilterConfig::default();
    // Granted 4 (one spent by the request), the store keeps 5.
    spend(&host, &cfg, "/search", 4, 5);
    let before = limits(&host, &cfg, "/u?path=/search");
    assert_eq!(
        before,
        [
            line("per-key", 8, 4),
            line("search", 8, 4),
            line("by-method", 8, 4)
        ]
    );
    // Asking again changes nothing: the same answer, no token taken.
    assert_eq!(limits(&host, &cfg, "/u?path=/search"), before);
    spend(&host, &cfg, "/search", 4, 5);
    assert_eq!(
        limits(&host, &cfg, "/u?path=/search")[1],
        line("search", 7, 4)
    );
    // Past the store's reset, with the lease expired, the bucket is full again.
    host.set_now(6 * NANOS_PER_SEC);
    assert_eq!(
        limits(&host, &cfg, "/u?path=/search")[1],
        line("search", 8, 0)
    );
}

#[test]
fn a_cached_denial_shows_nothing_left_until_it_clears() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let mut e = Evaluation::new(rules(), &caller("/x"), &cfg)
        .unwrap()
        .unwrap();
    assert!(e.local_pass(&host, &cfg));
    let n = e.lease_request().items.len();
    let deny = LeaseAnswer::Deny {
        retry_after_ms: 2_500,
        local: false,
        from: None,
    };
    e.apply_answers(&host, &cfg, vec![deny; n]);
    assert_eq!(limits(&host, &cfg, "/u")[0], line("per-key", 0, 3));
}

#[test]
fn an_ambiguous_question_is_refused() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let twice = caller("/u?path=/a&path=/b");
    assert_eq!(
        usage(&host, &cfg, Some(&rules()), &twice),
        Err(RequestError::RepeatedQuery("path".into()))
    );
    assert_eq!(usage(&host, &cfg, None, &caller("/u")).unwrap().limits, []);
}

#[test]
fn only_a_get_to_the_configured_path_asks_usage() {
    let cfg = FilterConfig::parse(Some(br#"{"usage_path": "/.well-known//ratelimit/"}"#)).unwrap();
    assert!(is_usage(&cfg, &caller("/.well-known/ratelimit?path=/x")));
    let post = RequestInfo::new(
        "/.well-known/ratelimit",
        "POST",
        Vec::<(String, Vec<u8>)>::new(),
    );
    assert!(!is_usage(&cfg, &post));
    assert!(!is_usage(&cfg, &caller("/.well-known/ratelimits")));
    assert!(!is_usage(
        &FilterConfig::default(),
        &caller("/.well-known/ratelimit")
    ));
}

/// Rules scoped to `n` paths, one each, and as many scoped to every path.
fn many_rules(n: usize) -> Rc<RuleSet> {
    let rules: Vec<serde_json::Value> = (0..n)
        .flat_map(|i| {
            [
                serde_json::json!({"name": format!("path-{i}"), "match": {"path": format!("/p{i}")},
                    "key": [{"header": "x-api-key"}], "limit": {"requests": 10, "per": "1m"}}),
                serde_json::json!({"name": format!("all-{i}"),
                    "key": [{"header": "x-api-key"}], "limit": {"requests": 10, "per": "1m"}}),
            ]
        })
        .collect();
    let config: RulesConfig =
        serde_json::from_value(serde_json::json!({"version": 1, "rules": rules})).unwrap();
    Rc::new(RuleSet::compile(&config).unwrap())
}

/// A usage answer lists the rules of the request it names, never another
/// path's, and at most `MAX_USAGE_LIMITS` of them (one shared-data read and
/// about 100 bytes each), however large the rule set.
#[test]
fn an_answer_lists_only_rules_of_the_request_and_at_most_its_bound() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let set = many_rules(1_000);
    let u = usage(&host, &cfg, Some(&set), &caller("/u?path=/p7")).unwrap();
    assert_eq!(u.limits.len(), MAX_USAGE_LIMITS);
    assert!(u.truncated);
    assert!(
        u.limits
            .iter()
            .all(|l| !l.rule.starts_with("path-") || l.rule == "path-7"),
        "another path's rule listed"
    );
    let body = serde_json::to_string(&u).unwrap();
    assert!(body.len() < 8 * 1024, "{} bytes", body.len());
    assert!(body.contains(r#""truncated":true"#));
    // A few rules: all listed, no `truncated` field.
    let few = usage(&host, &cfg, Some(&many_rules(3)), &caller("/u?path=/p1")).unwrap();
    let names: Vec<&str> = few.limits.iter().map(|l| l.rule.as_str()).collect();
    assert_eq!(names, ["all-0", "path-1", "all-1", "all-2"]);
    assert!(!serde_json::to_string(&few).unwrap().contains("truncated"));
}

#[test]
fn a_rule_scoped_to_another_cluster_or_route_is_not_listed() {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({"version": 1, "rules": [
        {"name": "reviews", "match": {"cluster": "reviews"}, "key": [{"header": "x-api-key"}],
         "limit": {"requests": 10, "per": "1m"}},
    ]}))
    .unwrap();
    let set = RuleSet::compile(&config).unwrap();
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let mut other = caller("/u?path=/x");
    other.cluster = Some("ratings".into());
    assert_eq!(usage(&host, &cfg, Some(&set), &other).unwrap().limits, []);
    let mut reviews = caller("/u?path=/x");
    reviews.cluster = Some("reviews".into());
    assert_eq!(
        usage(&host, &cfg, Some(&set), &reviews)
            .unwrap()
            .limits
            .len(),
        1
    );
}

#[test]
fn a_worker_answers_at_most_its_allowance_and_counts_each_answer() {
    let host = MemoryHost::default();
    let mut answers = UsageAnswers::default();
    let admitted = (0..25).filter(|_| answers.admit(&host, 20, 0)).count();
    assert_eq!(admitted, 20);
    assert_eq!(host.metric("meshlimit.usage.answered"), Some(20));
    assert_eq!(host.metric("meshlimit.usage.limited"), Some(5));
    assert!(
        answers.admit(&host, 20, NANOS_PER_SEC / 10),
        "two back after 0.1 s"
    );
    let (status, fields, _) = limited().wire();
    assert_eq!(status, 429);
    assert!(fields.iter().any(|(n, v)| n == "retry-after" && v == "1"));
}
