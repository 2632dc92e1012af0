//! Key parts and plans from Envoy dynamic metadata (a verified JWT's claims),
//! and the destination conditions `match.cluster` and `match.route`.

use super::*;
use crate::header_list::HeaderList;
use crate::metadata::{Field, StructBuilder, JWT_AUTHN};

/// A request whose verified JWT carries `claims` (as jwt_authn hands them over
/// with `payload_in_metadata: payload`).
fn with_claims(claims: &[(&str, Field)]) -> RequestInfo {
    let mut payload = StructBuilder::new();
    for (name, value) in claims {
        payload = payload.with(name, value.clone());
    }
    let mut req = request("/v1/x", "GET", &[]);
    req.metadata = vec![(
        JWT_AUTHN.to_string(),
        StructBuilder::new()
            .with("payload", Field::Struct(payload))
            .encode(),
    )];
    req
}

fn claims_set() -> RuleSet {
    compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "per-sub", "key": [{"claim": "sub"}], "limit": {"requests": 10, "per": "1s"}},
            {"name": "per-tenant", "key": [{"metadata": {"filter": "acme.authn", "path": ["tenant", "id"]}}],
             "limit": {"requests": 20, "per": "1s"}},
            {"name": "by-plan", "key": [{"claim": "sub"}],
             "plans": {"claim": "plan", "default": "free", "limits": {
                 "free": {"requests": 1, "per": "1m"}, "pro": {"requests": 100, "per": "1m"}}}},
        ]
    }))
    .unwrap()
}

fn keys(set: &RuleSet, req: &RequestInfo) -> Vec<String> {
    set.applicable(req)
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{}{}",
                a.key,
                a.plan.map(|p| format!(" ({p})")).unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_claim_keys_the_rule_and_its_absence_skips_it() {
    let s = claims_set();
    let alice = with_claims(&[("sub", Field::String("alice".into()))]);
    let bob = with_claims(&[("sub", Field::String("bob".into()))]);
    assert_eq!(keys(&s, &alice), ["by-plan|alice (free)", "per-sub|alice"]);
    assert_eq!(keys(&s, &bob), ["by-plan|bob (free)", "per-sub|bob"]);
    // No token verified (no metadata), or no `sub` in it: the rules do not apply.
    assert!(keys(&s, &request("/v1/x", "GET", &[])).is_empty());
    assert!(keys(&s, &with_claims(&[("iss", Field::String("x".into()))])).is_empty());
    // A header of the same name is not a claim.
    assert!(keys(&s, &request("/v1/x", "GET", &[("sub", "alice")])).is_empty());
}

#[test]
fn a_claim_names_the_plan() {
    let s = claims_set();
    let pro = with_claims(&[
        ("sub", Field::String("alice".into())),
        ("plan", Field::String("pro".into())),
    ]);
    assert_eq!(keys(&s, &pro), ["by-plan|alice (pro)", "per-sub|alice"]);
    let rule = s.rule("by-plan").unwrap();
    let a = s.applicable_rule("by-plan", &pro).unwrap();
    assert_eq!(a.limit, rule.limit_for_plan(Some("pro")).0);
    // An unknown plan, or a plan header sent by the client, is the default plan.
    let forged = {
        let mut r = with_claims(&[("sub", Field::String("alice".into()))]);
        r.headers = HeaderList::from_pairs([("plan", "pro")]);
        r
    };
    assert_eq!(
        s.applicable_rule("by-plan", &forged).unwrap().plan,
        Some("free")
    );
}

#[test]
fn a_number_claim_has_one_spelling() {
    let s = claims_set();
    let n = with_claims(&[("sub", Field::Number(42.0))]);
    let t = with_claims(&[("sub", Field::String("42".into()))]);
    assert_eq!(keys(&s, &n), keys(&s, &t));
    assert_eq!(keys(&s, &n), ["by-plan|42 (free)", "per-sub|42"]);
}

#[test]
fn a_long_claim_is_hashed_as_a_long_header_is() {
    let s = claims_set();
    let long = "a".repeat(10_000);
    let req = with_claims(&[("sub", Field::String(long.clone()))]);
    let a = s.applicable_rule("per-sub", &req).unwrap();
    assert!(a.key.as_str().len() < 48, "{}", a.key);
    assert_eq!(
        a.key,
        DescriptorKey::new("per-sub", [long.as_bytes()]),
        "the same bound as every key part"
    );
}

#[test]
fn any_metadata_filter_and_path() {
    let s = claims_set();
    let mut req = request("/v1/x", "GET", &[]);
    req.metadata = vec![(
        "acme.authn".into(),
        StructBuilder::new()
            .with(
                "tenant",
                Field::Struct(StructBuilder::new().with("id", Field::String("t1".into()))),
            )
            .encode(),
    )];
    assert_eq!(keys(&s, &req), ["per-tenant|t1"]);
    assert_eq!(s.needs().metadata, ["acme.authn", JWT_AUTHN]);
}

#[test]
fn claim_and_metadata_round_trip_through_the_served_form() {
    let s = claims_set();
    let served = serde_json::to_value(s.config().unwrap()).unwrap();
    assert_eq!(
        served["rules"][0]["key"][0],
        serde_json::json!({"claim": "sub"})
    );
    assert_eq!(
        served["rules"][1]["key"][0],
        serde_json::json!({"metadata": {"filter": "acme.authn", "path": ["tenant", "id"]}})
    );
    // The long form of a claim is the claim.
    let long: RulesConfig = serde_json::from_value(serde_json::json!({
        "version": 1,
        "rules": [{"name": "per-sub", "key": [{"metadata": {"filter": JWT_AUTHN, "path": ["payload", "sub"]}}],
                   "limit": {"requests": 10, "per": "1s"}}]
    }))
    .unwrap();
    assert_eq!(long.rules[0].key, s.config().unwrap().rules[0].key);
    let back: RulesConfig = serde_json::from_value(served).unwrap();
    assert_eq!(&back, s.config().unwrap());
}

#[test]
fn bad_metadata_and_plans_are_named() {
    let err = compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "a", "key": [{"metadata": {"filter": "", "path": ["x"]}}], "limit": {"requests": 1, "per": "1s"}},
            {"name": "b", "key": [{"claim": ""}], "limit": {"requests": 1, "per": "1s"}},
            {"name": "c", "key": ["method"], "plans": {"header": "x-plan", "claim": "plan", "default": "f",
             "limits": {"f": {"requests": 1, "per": "1s"}}}},
            {"name": "d", "key": ["method"], "match": {"cluster": "a*b"}, "limit": {"requests": 1, "per": "1s"}},
        ]
    }))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("rule a: field rules[0].key[0].metadata: filter `` is not a filter name"),
        "{err}"
    );
    assert!(
        err.contains("rule b: field rules[1].key[0].claim: field `` is not a field name"),
        "{err}"
    );
    assert!(
        err.contains(
            "rule c: field rules[2].plans: give exactly one of `header`, `claim` or `metadata`"
        ),
        "{err}"
    );
    assert!(
        err.contains("rule d: field rules[3].match.cluster: `a*b` is not a name or `*suffix`"),
        "{err}"
    );
}

fn scoped() -> RuleSet {
    compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "reviews", "match": {"cluster": "*|reviews.shop.svc.cluster.local"},
             "key": ["method"], "limit": {"requests": 10, "per": "1s"}},
            {"name": "shop", "match": {"cluster": "*.shop.svc.cluster.local"},
             "key": ["method"], "limit": {"requests": 20, "per": "1s"}},
            {"name": "one-route", "match": {"route": "search"},
             "key": ["method"], "limit": {"requests": 30, "per": "1s"}},
        ]
    }))
    .unwrap()
}

fn to(cluster: Option<&str>, route: Option<&str>) -> RequestInfo {
    let mut req = request("/x", "GET", &[]);
    req.cluster = cluster.map(str::to_string);
    req.route = route.map(str::to_string);
    req
}

#[test]
fn a_rule_scoped_to_a_destination_applies_to_it_only() {
    let s = scoped();
    assert!(s.needs().cluster && s.needs().route);
    let names = |req: &RequestInfo| -> Vec<String> {
        s.applicable(req)
            .unwrap()
            .iter()
            .map(|a| a.rule.name.clone())
            .collect()
    };
    assert_eq!(
        names(&to(
            Some("outbound|9080|v1|reviews.shop.svc.cluster.local"),
            None
        )),
        ["reviews", "shop"]
    );
    assert_eq!(
        names(&to(
            Some("outbound|9080||ratings.shop.svc.cluster.local"),
            None
        )),
        ["shop"]
    );
    assert!(names(&to(
        Some("outbound|9080||reviews.other.svc.cluster.local"),
        None
    ))
    .is_empty());
    // A suffix is a suffix of the whole name: `xreviews` is another service.
    assert_eq!(
        names(&to(
            Some("outbound|80||xreviews.shop.svc.cluster.local"),
            None
        )),
        ["shop"]
    );
    assert_eq!(names(&to(None, Some("search"))), ["one-route"]);
    assert!(names(&to(None, Some("search-v2"))).is_empty());
    // No cluster known: a scoped rule does not apply.
    assert!(names(&to(None, None)).is_empty());
}

#[test]
fn explain_says_why_a_destination_or_claim_rule_is_skipped() {
    let s = scoped();
    let e = s
        .explain(&to(
            Some("outbound|80||web.other.svc.cluster.local"),
            Some("home"),
        ))
        .unwrap();
    let reasons: Vec<String> = e
        .iter()
        .map(|x| match &x.verdict {
            Explained::Skipped(why) => why.clone(),
            Explained::Applies { .. } => "applies".into(),
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "upstream cluster `outbound|80||web.other.svc.cluster.local` is not `*|reviews.shop.svc.cluster.local`",
            "upstream cluster `outbound|80||web.other.svc.cluster.local` is not `*.shop.svc.cluster.local`",
            "route `home` is not `search`",
        ]
    );
    let c = claims_set();
    let e = c.explain(&request("/v1/x", "GET", &[])).unwrap();
    match &e[0].verdict {
        Explained::Skipped(why) => assert_eq!(why, "the request has no claim `sub` to key on"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn narrowing_a_destination_is_a_narrowing() {
    let old = scoped();
    let rule = |cluster: &str| {
        compile(serde_json::json!({"version": 1, "rules": [
            {"name": "shop", "match": {"cluster": cluster}, "key": ["method"], "limit": {"requests": 20, "per": "1s"}}]}))
        .unwrap()
    };
    let wide = rule("*.svc.cluster.local");
    let changes = |new: &RuleSet| -> Vec<review::Change> {
        review::review(&old, new)
            .into_iter()
            .map(|c| c.change)
            .collect()
    };
    assert!(changes(&wide).contains(&review::Change::MatchWidened));
    let narrow = rule("outbound|80||a.shop.svc.cluster.local");
    assert!(changes(&narrow).contains(&review::Change::MatchNarrowed));
}

#[test]
fn a_dotted_claim_keys_on_the_nested_claim_and_picks_a_nested_plan() {
    let s = compile(serde_json::json!({
        "version": 1,
        "rules": [
            {"name": "per-org", "key": [{"claim": "org.id"}],
             "plans": {"claim": "org.plan", "default": "free", "limits": {
                 "free": {"requests": 1, "per": "1m"}, "pro": {"requests": 100, "per": "1m"}}}},
        ]
    }))
    .unwrap();
    let org = StructBuilder::new()
        .with("id", Field::String("7".into()))
        .with("plan", Field::String("pro".into()));
    let nested = with_claims(&[("org", Field::Struct(org))]);
    assert_eq!(keys(&s, &nested), ["per-org|7 (pro)"]);
    // A top-level claim literally named `org.id` is not the nested one.
    let literal = with_claims(&[("org.id", Field::String("7".into()))]);
    assert!(keys(&s, &literal).is_empty());
    // The rules file says it back as written.
    let config = s.config().unwrap();
    let text = serde_json::to_string(&config.rules[0].key).unwrap();
    assert_eq!(text, r#"[{"claim":"org.id"}]"#);
}
