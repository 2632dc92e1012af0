//! The shipped rules where they are deployed, through Istio-shaped Envoys:
//! the gateway rules (`deploy/rules.yaml`) at an ingress gateway with one
//! trusted proxy in front (`tests/envoy/istio-gateway.yaml`), and the Istio
//! overlay's sidecar rules (`deploy/overlays/istio/rules.yaml`) on a
//! sidecar's inbound side (`tests/envoy/istio-sidecar.yaml`).

use meshlimit_tests::{count, repo_root, try_request, AgentOptions, Stack};

const GATEWAY: &str = "tests/envoy/istio-gateway.yaml";
const SIDECAR: &str = "tests/envoy/istio-sidecar.yaml";

fn shipped(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap()
}

fn stack_on(bootstrap: &str, rules: &str) -> Stack {
    Stack::start_with(AgentOptions::new(rules), |c| c.bootstrap(bootstrap))
}

/// `POST /login` from an outside client: the gateway's trusted proxy
/// appended `client` to X-Forwarded-For, after whatever the client wrote.
fn login(stack: &Stack, forwarded_for: &str) -> u16 {
    let url = stack.envoy.url("/login");
    let headers = [("x-forwarded-for", forwarded_for)];
    try_request("POST", &url, &headers, Some(b""))
        .unwrap()
        .status
}

#[test]
fn at_the_gateway_the_shipped_per_ip_rules_limit_each_outside_client_on_its_own() {
    let stack = stack_on(GATEWAY, &shipped("deploy/rules.yaml"));
    // login-per-ip: 5 logins a minute per client address, exact.
    let a: Vec<u16> = (0..6).map(|_| login(&stack, "198.51.100.1")).collect();
    assert_eq!(a, [200, 200, 200, 200, 200, 429], "client a");
    // Entries the client writes left of what the trusted proxy saw change nothing.
    assert_eq!(
        login(&stack, "10.9.9.9, 198.51.100.1"),
        429,
        "client a, forged"
    );
    // Another outside client has a bucket of its own.
    let b: Vec<u16> = (0..5).map(|_| login(&stack, "198.51.100.2")).collect();
    assert_eq!(count(&b, 200), 5, "client b: {b:?}");
}

#[test]
fn at_a_sidecar_the_istio_overlays_rules_limit_per_api_key_and_see_the_inbound_cluster() {
    let stack = stack_on(SIDECAR, &shipped("deploy/overlays/istio/rules.yaml"));
    // demo-per-api-key: 10 a minute per API key, exact.
    let alice = stack.statuses(11, "/demo", &[("x-api-key", "alice")]);
    assert_eq!(count(&alice, 200), 10, "{alice:?}");
    assert_eq!(alice[10], 429, "{alice:?}");
    assert_eq!(stack.get("/demo", &[("x-api-key", "bob")]).status, 200);
    // per-endpoint is scoped to the port's inbound cluster, `inbound|9080||`,
    // as Istio names it on a sidecar's inbound side: it applies here.
    assert_eq!(stack.get("/v1/items", &[]).status, 200);
    assert_eq!(stack.decisions("per-endpoint", "allowed"), 1);
}
