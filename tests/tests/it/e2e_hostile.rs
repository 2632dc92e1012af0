//! End to end: hostile headers never bypass a limit and never trap the VM.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use meshlimit_tests::{Stack, EXACT_TWO_PER_HOUR};

/// Sends a raw HTTP/1.1 request (bytes a well-behaved client library refuses to
/// send) and returns the status code.
fn raw_status(port: u16, api_key: &[u8]) -> u16 {
    let mut req = b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-api-key: ".to_vec();
    req.extend_from_slice(api_key);
    req.extend_from_slice(b"\r\n\r\n");
    meshlimit_tests::raw_status(port, &req)
}

#[test]
fn non_utf8_and_huge_header_values_are_limited_like_any_other() {
    // The harness's patient lease deadline: this test is about hostile
    // input, and a missed deadline would hand the decision to the fail-local
    // policy.
    let stack = Stack::start(EXACT_TWO_PER_HOUR);
    let port = stack.envoy.port();
    for key in [
        b"caf\xe9-\xff\xfe".to_vec(),
        vec![b'a'; 30_000],
        b"x|y%41{tag}".to_vec(),
    ] {
        let statuses: Vec<u16> = (0..4).map(|_| raw_status(port, &key)).collect();
        assert_eq!(statuses, [200, 200, 429, 429], "key of {} bytes", key.len());
    }
    // Two values that differ only in their invalid bytes are two keys: spending
    // the first's burst leaves the second untouched.
    assert_eq!(
        [raw_status(port, b"k\xf0"), raw_status(port, b"k\xf0")],
        [200, 200]
    );
    assert_eq!(raw_status(port, b"k\xf1"), 200);
    // No VM trapped along the way.
    let traps = stack
        .envoy
        .stats()
        .lines()
        .filter(|l| l.contains("vm_reload") || l.contains("failed"))
        .filter(|l| !l.ends_with(": 0"))
        .filter(|l| l.contains("wasm"))
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert!(traps.is_empty(), "{traps:?}");
}
