//! What the filter reads from Envoy to key and scope a rule: claims, cluster, route, method, address.

use super::*;

/// The dynamic metadata Envoy's jwt_authn filter leaves for a token whose
/// payload carries `claims` (`payload_in_metadata: payload`), beside another
/// filter's, as the proxy hands it over: a serialized protobuf Metadata.
fn verified(vm: &Vm, claims: &[(&str, &str)]) {
    use meshlimit_core::metadata::{encode_metadata, Field, StructBuilder, JWT_AUTHN};
    let mut payload = StructBuilder::new();
    for (name, value) in claims {
        payload = payload.with(name, Field::String((*value).into()));
    }
    let ns = StructBuilder::new()
        .with("payload", Field::Struct(payload))
        .encode();
    let other = StructBuilder::new().with("user", Field::String("eve".into()));
    let all = encode_metadata(&[
        ("acme.authn".to_string(), other.encode()),
        (JWT_AUTHN.to_string(), ns),
    ]);
    vm.host.set_host_property_bytes(&["metadata"], &all);
}

#[test]
fn a_verified_claim_keys_and_plans_the_rule_and_a_cluster_scopes_it() {
    let mut vm = Vm::with_rules(serde_json::json!({"version": 1, "rules": [
        {"name": "per-sub", "match": {"cluster": "*|reviews.shop.svc.cluster.local"},
         "key": [{"claim": "sub"}],
         "plans": {"claim": "plan", "default": "free", "limits": {
             "free": {"requests": 1, "per": "1s"}, "pro": {"requests": 100, "per": "1s"}}}},
    ]}));
    let to_reviews = "outbound|9080||reviews.shop.svc.cluster.local";
    vm.host
        .set_host_property(&["xds", "cluster_name"], to_reviews);
    let asked = |vm: &mut Vm| {
        let (_, action) = vm.get("ignored");
        assert_eq!(action, Action::Pause);
        vm.turn();
        let call = vm.only_call();
        let asked: LeaseRequest = serde_json::from_slice(&call.body).unwrap();
        vm.answer(&call, None, b"");
        (asked.items[0].key.clone(), asked.items[0].plan.clone())
    };
    verified(&vm, &[("sub", "alice"), ("plan", "pro")]);
    assert_eq!(
        asked(&mut vm),
        (DescriptorKey::new("per-sub", ["alice"]), Some("pro".into()))
    );
    verified(&vm, &[("sub", "bob")]);
    assert_eq!(
        asked(&mut vm),
        (DescriptorKey::new("per-sub", ["bob"]), Some("free".into()))
    );
    // No verified `sub`: the rule does not apply, the request goes on, no call.
    verified(&vm, &[("iss", "x")]);
    assert_eq!(vm.get("k").1, Action::Continue);
    assert!(vm.host.take_calls().is_empty());
    // Another service's cluster: the rule does not apply either.
    verified(&vm, &[("sub", "alice")]);
    vm.host.set_host_property(
        &["xds", "cluster_name"],
        "outbound|9080||ratings.shop.svc.cluster.local",
    );
    assert_eq!(vm.get("k").1, Action::Continue);
    vm.turn();
    assert!(vm.host.take_calls().is_empty());
}

#[test]
fn the_method_client_address_and_route_are_read_from_the_request() {
    let mut vm = Vm::with_rules(serde_json::json!({"version": 1, "rules": [
        {"name": "per-method-ip", "match": {"route": "search"}, "key": ["method", "client_ip"],
         "limit": {"requests": 10, "per": "1s"}},
    ]}));
    vm.host
        .set_host_property(&["source", "address"], "10.0.0.7:5555");
    vm.host.set_host_property(&["xds", "route_name"], "search");
    let asked = |vm: &mut Vm, method: &str| {
        let (_, action) = vm.request(&[
            (":method", method),
            (":path", "/search"),
            (":authority", "api.example.com"),
            ("x-forwarded-for", "203.0.113.9"),
        ]);
        assert_eq!(action, Action::Pause);
        vm.turn();
        let call = vm.only_call();
        let asked: LeaseRequest = serde_json::from_slice(&call.body).unwrap();
        vm.answer(&call, None, b"");
        asked.items[0].key.clone()
    };
    // The downstream address counts, not what the client wrote in
    // X-Forwarded-For (no trusted hops).
    assert_eq!(
        asked(&mut vm, "POST"),
        DescriptorKey::new("per-method-ip", ["POST", "10.0.0.7"])
    );
    assert_eq!(
        asked(&mut vm, "GET"),
        DescriptorKey::new("per-method-ip", ["GET", "10.0.0.7"])
    );
    // On another route, or none, the rule does not apply.
    for route in ["other", ""] {
        vm.host.set_host_property(&["xds", "route_name"], route);
        let (_, action) = vm.get("k");
        assert_eq!(action, Action::Continue, "route {route:?}");
        vm.turn();
        assert!(vm.host.take_calls().is_empty());
    }
}
