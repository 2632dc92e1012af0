//! End to end, a verified identity and a destination scope: real Envoy with its
//! `jwt_authn` filter in front of the real meshlimit filter
//! (`tests/envoy/jwt.yaml`), the real agent. The test makes an ES256 key, puts
//! its public half in Envoy's local JWKS and signs its own tokens; rules key on
//! the token's `sub` claim, pick their plan by its `plan` claim, and are scoped
//! to one upstream cluster or one route. Each test prints what it saw.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use meshlimit_tests::{repo_root, AgentOptions, Stack};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

const ISSUER: &str = "https://issuer.meshlimit.test";

const RULES: &str = include_str!("../../fixtures/rules/jwt-claims-and-destinations.yaml");

/// An ES256 signing key and the JWKS Envoy verifies its tokens with.
struct Issuer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
}

impl Issuer {
    fn new() -> Issuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Issuer { key, rng }
    }

    /// The public key as a JWKS (the point is 0x04 || X || Y).
    fn jwks(&self) -> String {
        let point = self.key.public_key().as_ref();
        assert_eq!(point.len(), 65);
        serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "alg": "ES256", "kid": "k1", "use": "sig",
            "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..]),
        }]})
        .to_string()
    }

    /// A signed token carrying `claims` (and the issuer, an hour's life).
    fn token(&self, claims: serde_json::Value) -> String {
        let signing_input = unsigned(
            &serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": "k1"}),
            claims,
        );
        let sig = self.key.sign(&self.rng, signing_input.as_bytes()).unwrap();
        format!("{signing_input}.{}", B64.encode(sig.as_ref()))
    }
}

/// `header.payload` of a token with `claims`, the issuer and (unless the
/// claims have one) an expiry an hour away added.
fn unsigned(header: &serde_json::Value, mut claims: serde_json::Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    claims["iss"] = ISSUER.into();
    if claims.get("exp").is_none() {
        claims["exp"] = (now + 3600).into();
    }
    format!(
        "{}.{}",
        B64.encode(header.to_string()),
        B64.encode(claims.to_string())
    )
}

/// The agent with `RULES`, Envoy from `tests/envoy/jwt.yaml` trusting `issuer`.
fn stack(issuer: &Issuer) -> (Stack, tempfile::TempDir) {
    let base = std::fs::read_to_string(repo_root().join("tests/envoy/jwt.yaml")).unwrap();
    let stand_in: Vec<&str> = base
        .lines()
        .filter(|l| l.contains("inline_string") && l.contains("replaced-by-the-test"))
        .collect();
    assert_eq!(stand_in.len(), 1, "the stand-in JWKS");
    let indent = &stand_in[0][..stand_in[0].find("inline_string").unwrap()];
    let with_key = base.replace(
        stand_in[0],
        &format!("{indent}inline_string: '{}'", issuer.jwks()),
    );
    let dir = tempfile::tempdir().unwrap();
    let bootstrap = dir.path().join("jwt.yaml");
    std::fs::write(&bootstrap, with_key).unwrap();
    let stack = Stack::start_with(AgentOptions::new(RULES), |c| c.bootstrap(bootstrap.clone()));
    (stack, dir)
}

fn statuses(stack: &Stack, n: usize, path: &str, token: Option<&str>) -> Vec<u16> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    stack.statuses(n, path, &headers)
}

#[test]
fn each_verified_user_has_a_bucket_and_a_plan_claim_picks_the_limit() {
    let issuer = Issuer::new();
    let (stack, _dir) = stack(&issuer);
    let alice = issuer.token(serde_json::json!({"sub": "alice"}));
    let bob = issuer.token(serde_json::json!({"sub": "bob"}));
    let carol = issuer.token(serde_json::json!({"sub": "carol", "plan": "pro"}));

    let a = statuses(&stack, 3, "/reviews/1", Some(&alice));
    let b = statuses(&stack, 3, "/reviews/1", Some(&bob));
    let c = statuses(&stack, 5, "/reviews/1", Some(&carol));
    // A plan header sent by the client picks nothing: plans follow the claim.
    let forged_plan = stack.statuses(
        1,
        "/reviews/1",
        &[("authorization", &format!("Bearer {bob}")), ("plan", "pro")],
    );
    let anonymous = statuses(&stack, 5, "/reviews/1", None);
    println!("alice (free) {a:?}, bob (free) {b:?}, carol (pro) {c:?}, bob with a plan header {forged_plan:?}, no token {anonymous:?}");
    assert_eq!(a, [200, 200, 429], "alice: the free plan's 2");
    assert_eq!(b, [200, 200, 429], "bob: a bucket of his own");
    assert_eq!(c, [200, 200, 200, 200, 429], "carol: the pro plan's 4");
    assert_eq!(forged_plan, [429]);
    // No verified identity: the rule does not apply.
    assert_eq!(anonymous, [200; 5]);
    assert_eq!(stack.decisions("reviews-per-user", "allowed"), 8);
    assert_eq!(stack.decisions("reviews-per-user", "limited"), 4);
}

#[test]
fn a_forged_or_unsigned_token_is_refused_before_meshlimit() {
    let issuer = Issuer::new();
    let (stack, _dir) = stack(&issuer);
    let other = Issuer::new();
    // Signed by a key Envoy does not trust, under the trusted key's id.
    let forged = other.token(serde_json::json!({"sub": "alice"}));
    // No signature at all.
    let none = format!(
        "{}.",
        unsigned(
            &serde_json::json!({"alg": "none", "typ": "JWT"}),
            serde_json::json!({"sub": "alice"})
        )
    );
    // Signed by the trusted key, but long expired (November 2023).
    let expired = issuer.token(serde_json::json!({"sub": "alice", "exp": 1_700_000_000u64}));
    // A good token whose payload was swapped for another user's.
    let good = issuer.token(serde_json::json!({"sub": "alice"}));
    let mut parts: Vec<&str> = good.split('.').collect();
    let swapped_payload = B64.encode(
        serde_json::json!({"sub": "mallory", "iss": ISSUER, "exp": 4_000_000_000u64}).to_string(),
    );
    parts[1] = &swapped_payload;
    let swapped = parts.join(".");
    let seen: Vec<(&str, Vec<u16>)> = [
        ("forged", &forged),
        ("unsigned", &none),
        ("swapped", &swapped),
        ("expired", &expired),
    ]
    .into_iter()
    .map(|(what, t)| (what, statuses(&stack, 3, "/reviews/1", Some(t))))
    .collect();
    println!("{seen:?}");
    for (what, s) in &seen {
        assert_eq!(s, &[401, 401, 401], "{what}");
    }
    // None reached the rule: nothing was counted, and alice's bucket is whole.
    let counted: u64 = [
        "allowed",
        "limited",
        "shadow_limited",
        "failed_open",
        "failed_closed",
        "failed_local",
    ]
    .iter()
    .map(|o| stack.decisions("reviews-per-user", o))
    .sum();
    assert_eq!(counted, 0);
    assert_eq!(
        statuses(&stack, 3, "/reviews/1", Some(&good)),
        [200, 200, 429]
    );
}

#[test]
fn a_rule_scoped_to_a_cluster_or_route_limits_that_destination_only() {
    let issuer = Issuer::new();
    let (stack, _dir) = stack(&issuer);
    let dave = issuer.token(serde_json::json!({"sub": "dave"}));
    let reviews = statuses(&stack, 3, "/reviews/1", Some(&dave));
    let ratings = statuses(&stack, 2, "/ratings/1", Some(&dave));
    let elsewhere = statuses(&stack, 5, "/web/1", Some(&dave));
    println!(
        "dave: reviews {reviews:?}, ratings {ratings:?}, another namespace's service {elsewhere:?}"
    );
    assert_eq!(reviews, [200, 200, 429], "the reviews cluster's rule");
    assert_eq!(
        ratings,
        [200, 429],
        "the ratings route's rule, its own bucket"
    );
    assert_eq!(elsewhere, [200; 5], "no rule is scoped to web.other");
}
