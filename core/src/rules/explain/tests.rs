use super::*;
use crate::rules::RulesConfig;

fn set() -> RuleSet {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "login", "match": {"path": "/login", "methods": ["POST"]},
             "key": ["client_ip"], "limit": {"requests": 5, "per": "1m"}},
            {"name": "per-key", "match": {"headers": {"x-env": {"equals": "prod"}}},
             "key": [{"header": "x-api-key"}], "limit": {"requests": 100, "per": "1s"}},
            {"name": "search", "match": {"path_prefix": "/v1/search"},
             "key": ["method"], "limit": {"requests": 1000, "per": "1s"}},
        ]
    }))
    .unwrap();
    RuleSet::compile(&config).unwrap()
}

#[test]
fn every_rule_says_whether_it_applies_and_why_not() {
    let s = set();
    let mut req = RequestInfo::new(
        "//login/",
        "post",
        vec![
            ("x-env".to_string(), "prod".to_string()),
            ("x-api-key".to_string(), "k1".to_string()),
        ],
    );
    req.client_ip = Some("10.0.0.7".into());
    let got: Vec<(String, String)> = s
        .explain(&req)
        .unwrap()
        .into_iter()
        .map(|e| {
            let v = match e.verdict {
                Explained::Applies { key, .. } => format!("applies as {key}"),
                Explained::Skipped(why) => format!("skipped: {why}"),
            };
            (e.rule.name.clone(), v)
        })
        .collect();
    assert_eq!(
        got,
        [
            ("login".into(), "applies as login|10.0.0.7".into()),
            ("per-key".into(), "applies as per-key|k1".into()),
            (
                "search".into(),
                "skipped: path `/login` does not start with `/v1/search`".into()
            ),
        ]
    );
    // The same rules apply as on the request path, in the same order.
    let applied: Vec<String> = s
        .applicable(&req)
        .unwrap()
        .into_iter()
        .map(|a| a.key.to_string())
        .collect();
    assert_eq!(applied, ["login|10.0.0.7", "per-key|k1"]);
}

#[test]
fn host_and_query_skips_say_what_the_request_had() {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "api", "match": {"authority": "*.example.com"}, "key": [{"query": "k"}],
             "limit": {"requests": 5, "per": "1m"}},
        ]
    }))
    .unwrap();
    let s = RuleSet::compile(&config).unwrap();
    let why = |path: &str, host: Option<&str>| {
        let headers = host
            .map(|h| vec![("host".to_string(), h.to_string())])
            .unwrap_or_default();
        match &s.explain(&RequestInfo::new(path, "GET", headers)).unwrap()[0].verdict {
            Explained::Skipped(w) => w.clone(),
            Explained::Applies { key, .. } => format!("applies as {key}"),
        }
    };
    assert_eq!(
        why("/?k=1", Some("Example.com:80")),
        "host `example.com` is not under `*.example.com`"
    );
    assert_eq!(
        why("/?k=1", None),
        "the request names no host (under `*.example.com` wanted)"
    );
    assert_eq!(
        why("/?K=1", Some("a.example.com")),
        "the request has no query parameter `k` to key on"
    );
    assert_eq!(why("/?k=%31", Some("A.example.com.")), "applies as api|1");
}

#[test]
fn skips_name_the_condition_that_failed() {
    let s = set();
    let req = RequestInfo::new(
        "/login",
        "GET",
        vec![("x-env".to_string(), "dev".to_string())],
    );
    let why: Vec<String> = s
        .explain(&req)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.verdict {
            Explained::Skipped(why) => Some(why),
            Explained::Applies { .. } => None,
        })
        .collect();
    assert_eq!(
        why,
        [
            "method GET is not one of POST",
            "header `x-env` is `dev`, not `prod`",
            "path `/login` does not start with `/v1/search`",
        ]
    );
    let no_key = RequestInfo::new("/x", "GET", vec![("x-env".to_string(), "prod".to_string())]);
    let e = s.explain(&no_key).unwrap();
    assert!(
        matches!(&e[1].verdict, Explained::Skipped(w) if w == "the request has no header `x-api-key` to key on"),
        "{:?}",
        e[1].verdict
    );
}

#[test]
fn an_expired_rule_is_skipped_from_its_instant_on_as_the_agent_leaves_it_out() {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({
        "version": 1,
        "rules": [{"name": "trial", "key": ["method"], "expires": "2026-01-01",
                   "limit": {"requests": 5, "per": "1m"}}]
    }))
    .unwrap();
    let s = RuleSet::compile(&config).unwrap();
    let expires = crate::rules::expiry::parse_instant("2026-01-01").unwrap();
    let verdict = |now_secs: u64| {
        let mut req = RequestInfo::new("/", "GET", Vec::<(String, String)>::new());
        req.now_ns = now_secs * crate::NANOS_PER_SEC;
        match &s.explain(&req).unwrap()[0].verdict {
            Explained::Applies { .. } => "applies".to_string(),
            Explained::Skipped(why) => why.clone(),
        }
    };
    assert_eq!(verdict(expires - 1), "applies");
    for now in [expires, expires + 86_400] {
        assert_eq!(
            verdict(now),
            "expired at 2026-01-01T00:00:00Z: the agent no longer serves it"
        );
        // The agent's served set leaves it out at the same instants.
        let (live, gone) = crate::rules::expiry::live_rules(&config, now);
        assert!(live.rules.is_empty() && gone == ["trial"]);
    }
    assert!(crate::rules::expiry::live_rules(&config, expires - 1)
        .1
        .is_empty());
}
