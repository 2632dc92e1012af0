//! End to end with a real gRPC client (grpcio, tests/grpc/call.py) through real
//! Envoy: a limited gRPC call gets RESOURCE_EXHAUSTED, a fail-closed one
//! UNAVAILABLE, each with meshlimit's fields as metadata.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use meshlimit_tests::{python_bin, repo_root, Stack};
use serde_json::Value;

const RULES: &str = r#"
version: 1
rules:
  - name: grpc-per-key
    match: { path_prefix: /meshlimit.test.Limited/ }
    key: [{ header: x-api-key }]
    limit: { requests: 2, per: 1h, burst: 2 }
    accuracy: exact
  - name: grpc-closed
    match: { path_prefix: /meshlimit.test.Closed/ }
    key: [{ header: x-api-key }]
    limit: { requests: 2, per: 1h, burst: 2 }
    on_failure: closed
"#;

/// `count` unary calls of `method` through Envoy with `x-api-key: key`; one
/// JSON object per call (code, details, initial and trailing metadata).
fn calls(stack: &Stack, method: &str, key: &str, count: usize) -> Vec<Value> {
    calls_with(stack, method, &[&format!("x-api-key={key}")], count)
}

/// `count` unary calls of `method` with these `name=value` metadata.
fn calls_with(stack: &Stack, method: &str, metadata: &[&str], count: usize) -> Vec<Value> {
    let script = repo_root().join("tests").join("grpc").join("call.py");
    let mut cmd = Command::new(python_bin());
    cmd.arg(&script)
        .arg(format!("127.0.0.1:{}", stack.envoy.port()))
        .arg(method);
    for m in metadata {
        cmd.arg("--metadata").arg(m);
    }
    let out = cmd
        .arg("--count")
        .arg(count.to_string())
        .output()
        .unwrap_or_else(|e| panic!("run {} (make tools): {e}", python_bin().display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "call.py failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), count, "{stdout}");
    answers
}

/// A metadata value, from the trailing metadata (a trailers-only answer's
/// headers) or the initial.
fn metadata<'a>(answer: &'a Value, name: &str) -> Option<&'a str> {
    ["trailing_metadata", "initial_metadata"]
        .iter()
        .flat_map(|m| answer[*m].as_array().into_iter().flatten())
        .find(|kv| kv[0] == name)
        .and_then(|kv| kv[1].as_str())
}

#[test]
fn a_limited_grpc_call_is_resource_exhausted_with_the_rule_in_its_metadata() {
    // About the answer's form, not the deadline: the harness's patient lease
    // deadline keeps a slow first call from being let through on the
    // failure policy, uncounted by the store.
    let stack = Stack::start(RULES);
    let answers = calls(&stack, "/meshlimit.test.Limited/Call", "alice", 3);
    eprintln!("{answers:#?}");
    // The backend is not a gRPC server: admitted calls fail some other way.
    for a in &answers[..2] {
        assert_ne!(a["code"], "RESOURCE_EXHAUSTED", "{a}");
    }
    let limited = &answers[2];
    assert_eq!(limited["code"], "RESOURCE_EXHAUSTED", "{limited}");
    assert_eq!(
        limited["details"],
        format!(
            "rate limited by rule grpc-per-key; retry after {} s",
            metadata(limited, "retry-after").unwrap()
        ),
        "{limited}"
    );
    assert_eq!(metadata(limited, "x-meshlimit-rule"), Some("grpc-per-key"));
    assert_eq!(metadata(limited, "x-envoy-ratelimited"), Some("true"));
    assert_eq!(
        metadata(limited, "ratelimit-policy"),
        Some("\"grpc-per-key\";q=2;w=3600")
    );
    let retry: u64 = metadata(limited, "retry-after").unwrap().parse().unwrap();
    // One token of a 2-per-hour bucket comes back after 30 minutes.
    assert!((1..=1800).contains(&retry), "retry-after {retry}");
    assert_eq!(
        metadata(limited, "ratelimit"),
        Some(format!("\"grpc-per-key\";r=0;t={retry}").as_str())
    );
    assert_eq!(stack.decisions("grpc-per-key", "limited"), 1);

    // On the wire (a gRPC content type is what Envoy goes by, over HTTP/1.1
    // too): trailers-only, every gRPC field once, meshlimit's fields, no body.
    let r = meshlimit_tests::post(
        &stack.envoy.url("/meshlimit.test.Limited/Call"),
        &[("content-type", "application/grpc"), ("x-api-key", "alice")],
        "",
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header_all("content-type"), ["application/grpc"], "{r:?}");
    assert_eq!(r.header_all("grpc-status"), ["8"], "{r:?}");
    assert_eq!(r.header_all("x-meshlimit-rule"), ["grpc-per-key"], "{r:?}");
    assert_eq!(r.header_all("x-envoy-ratelimited"), ["true"], "{r:?}");
    assert_eq!(r.header_all("retry-after").len(), 1, "{r:?}");
    assert!(
        r.header("grpc-message")
            .unwrap()
            .starts_with("rate limited by rule grpc-per-key"),
        "{r:?}"
    );
    assert_eq!(r.body, "");
    // The same path without the gRPC content type is plain HTTP: the 429.
    let r = stack.get("/meshlimit.test.Limited/Call", &[("x-api-key", "alice")]);
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.header("grpc-status"), None);
    assert_eq!(r.json()["error"], "rate_limited");
    assert_eq!(stack.decisions("grpc-per-key", "limited"), 3);

    // Another key has its own bucket.
    let bob = calls(&stack, "/meshlimit.test.Limited/Call", "bob", 1);
    assert_ne!(bob[0]["code"], "RESOURCE_EXHAUSTED", "{}", bob[0]);

    // The key header sent twice: INVALID_ARGUMENT, not a 400.
    let twice = calls_with(
        &stack,
        "/meshlimit.test.Limited/Call",
        &["x-api-key=a", "x-api-key=b"],
        1,
    );
    assert_eq!(twice[0]["code"], "INVALID_ARGUMENT", "{}", twice[0]);
    assert!(
        twice[0]["details"]
            .as_str()
            .unwrap()
            .starts_with("ambiguous request: header `x-api-key`"),
        "{}",
        twice[0]
    );
}

#[test]
fn a_fail_closed_grpc_call_is_unavailable_with_the_rule_in_its_metadata() {
    let mut stack = Stack::start(RULES);
    stack.agent.kill();
    let answers = calls(&stack, "/meshlimit.test.Closed/Call", "alice", 2);
    eprintln!("{answers:#?}");
    for a in &answers {
        assert_eq!(a["code"], "UNAVAILABLE", "{a}");
        assert_eq!(
            a["details"], "rate limiter unavailable; rule grpc-closed fails closed",
            "{a}"
        );
        assert_eq!(metadata(a, "x-meshlimit-rule"), Some("grpc-closed"));
        assert_eq!(metadata(a, "x-envoy-ratelimited"), Some("true"));
        assert_eq!(metadata(a, "retry-after"), Some("1"));
    }
    assert_eq!(stack.decisions("grpc-closed", "failed_closed"), 2);

    // Without the gRPC content type: the 503 as before.
    let r = stack.get("/meshlimit.test.Closed/Call", &[("x-api-key", "alice")]);
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.json()["error"], "limiter_unavailable");
}
