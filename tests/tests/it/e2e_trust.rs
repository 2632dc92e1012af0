//! End to end, as an attacker tries it: real Envoy (each shipped connection-manager
//! shape), the real filter and the real agent. No spelling of a request, no
//! forged header and no call from another pod gets around a limit.
//! Each test prints the figure it holds, for the closing notes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use meshlimit_tests::{
    count, eventually, get, try_request, AgentOptions, Envoy, EnvoyConfig, RedisServer, Stack,
};

const PER_IP: &str = r#"
version: 1
rules:
  - name: per-ip
    key: [client_ip]
    limit: { requests: 3, per: 1h }
    accuracy: exact
"#;

/// The Envoy bootstraps shipped or reproduced for tests: the root one (plain
/// Envoy at the edge), an Istio sidecar's inbound listener with meshlimit's
/// EnvoyFilter, and an Istio ingress gateway with one trusted proxy in front.
const BOOTSTRAPS: [&str; 3] = [
    "envoy.yaml",
    "tests/envoy/istio-sidecar.yaml",
    "tests/envoy/istio-gateway.yaml",
];

fn stack_on(bootstrap: &str, rules: &str) -> Stack {
    Stack::start_with(AgentOptions::new(rules), |c| c.bootstrap(bootstrap))
}

#[test]
fn forged_forwarded_for_never_mints_a_fresh_client_ip() {
    for bootstrap in BOOTSTRAPS {
        let stack = stack_on(bootstrap, PER_IP);
        // One-entry forgeries, each a different "client". Behind the gateway's
        // trusted proxy the last entry is what that proxy saw; a client can only
        // write entries to its left.
        let gateway = bootstrap.contains("gateway");
        let mut admitted = 0;
        for i in 0..8 {
            let xff = if gateway {
                format!("10.9.9.{i}, 203.0.113.7")
            } else {
                format!("10.9.9.{i}")
            };
            admitted += usize::from(stack.get("/", &[("x-forwarded-for", &xff)]).status == 200);
        }
        // Many-entry forgeries.
        for i in 0..4 {
            let xff = format!("1.1.1.{i}, 2.2.2.{i}, 3.3.3.{i}, 203.0.113.7");
            admitted += usize::from(stack.get("/", &[("x-forwarded-for", &xff)]).status == 200);
        }
        println!("{bootstrap}: {admitted} of 12 forged requests admitted (limit 3)");
        assert_eq!(admitted, 3, "{bootstrap}");
        if gateway {
            // The trusted proxy's own entry does name another client.
            let other = stack.get("/", &[("x-forwarded-for", "1.1.1.1, 203.0.113.8")]);
            assert_eq!(other.status, 200, "{bootstrap}");
        }
    }
}

const LOGIN: &str = r#"
version: 1
rules:
  - name: login
    match: { path: /login, methods: [POST] }
    key: [{ header: x-api-key }]
    limit: { requests: 2, per: 1h }
    accuracy: exact
  - name: by-host
    key: [{ header: host }]
    limit: { requests: 3, per: 1h }
    accuracy: exact
    match: { path_prefix: /host-limited/ }
"#;

/// Agent on `redis` with one exact rule of `requests` an hour per API key.
fn stack_on_redis(redis: &RedisServer, requests: u32) -> Stack {
    let rules = format!(
        "version: 1\nrules:\n  - {{ name: per-key, key: [{{ header: x-api-key }}], \
         limit: {{ requests: {requests}, per: 1h }}, accuracy: exact }}\n"
    );
    // The harness's patient deadlines: a missed one would hand the decision
    // to the rule's failure policy, which is not what these tests are about.
    Stack::start_with(AgentOptions::new(&rules).store(redis.url()), |c| c)
}

fn post_status(stack: &Stack, path: &str, headers: &[(&str, &str)]) -> u16 {
    try_request("POST", &stack.envoy.url(path), headers, Some(b""))
        .map(|r| r.status)
        .unwrap_or(0)
}

/// Every spelling of `/login` after the key is used up: none is a 200.
fn spellings_after_the_limit(stack: &Stack) -> Vec<(&'static str, u16)> {
    let key = [("x-api-key", "k")];
    assert_eq!(post_status(stack, "/login", &key), 200);
    assert_eq!(post_status(stack, "/login", &key), 200);
    [
        "/login",
        "/login/",
        "//login",
        "/%6Cogin",
        "/./login",
        "/login;x=1",
        "/x/../login",
        "/login?a=1",
        "/%2Flogin",
    ]
    .into_iter()
    .map(|p| (p, post_status(stack, p, &key)))
    .collect()
}

#[test]
fn no_spelling_of_a_path_walks_around_its_rule() {
    let stack = stack_on("envoy.yaml", LOGIN);
    let seen = spellings_after_the_limit(&stack);
    println!("envoy.yaml: {seen:?}");
    for (path, status) in &seen {
        // 429 from the filter, or Envoy's own redirect of an escaped slash to
        // its unescaped form (which then meets the rule): never served.
        assert!(*status == 429 || *status == 307, "{path}: {status}");
    }
}

#[test]
fn the_filter_normalises_paths_on_a_host_that_does_not() {
    // The root bootstrap without any of Envoy's path settings: the filter alone.
    let root = std::fs::read_to_string(meshlimit_tests::repo_root().join("envoy.yaml")).unwrap();
    let plain: String = root
        .lines()
        .filter(|l| {
            ![
                "normalize_path:",
                "merge_slashes:",
                "path_with_escaped_slashes_action:",
            ]
            .iter()
            .any(|k| l.trim_start().starts_with(k))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let bootstrap = dir.path().join("plain.yaml");
    std::fs::write(&bootstrap, plain).unwrap();
    let stack = Stack::start_with(AgentOptions::new(LOGIN), |c| c.bootstrap(&bootstrap));
    let seen = spellings_after_the_limit(&stack);
    println!("no Envoy normalisation: {seen:?}");
    for (path, status) in &seen {
        assert_eq!(*status, 429, "{path}");
    }
}

#[test]
fn no_spelling_of_a_header_walks_around_its_rule() {
    let stack = stack_on("envoy.yaml", LOGIN);
    let used_up = [("x-api-key", "victim")];
    assert_eq!(post_status(&stack, "/login", &used_up), 200);
    assert_eq!(post_status(&stack, "/login", &used_up), 200);
    // The used-up key beside a fresh one: refused as ambiguous, not keyed on
    // either value alone.
    let twice = post_status(
        &stack,
        "/login",
        &[("x-api-key", "fresh"), ("x-api-key", "victim")],
    );
    // An underscore spelling: Envoy refuses the request outright.
    let underscore = post_status(&stack, "/login", &[("x_api_key", "victim")]);
    println!("repeated header: {twice}, x_api_key: {underscore}");
    assert_eq!(twice, 400);
    assert_eq!(underscore, 400);
    // `header: host` is Envoy's :authority: the rule applies and limits.
    let hosts: Vec<u16> = (0..5)
        .map(|_| {
            get(
                &stack.envoy.url("/host-limited/x"),
                &[("host", "api.example.com")],
            )
            .status
        })
        .collect();
    assert_eq!(hosts, [200, 200, 200, 429, 429]);
}

#[test]
fn another_pod_cannot_take_tokens_report_or_read_rules() {
    let stack = stack_on(
        "envoy.yaml",
        r#"
version: 1
rules:
  - name: customer
    key: [{ header: x-customer-id }]
    limit: { requests: 5, per: 1h }
    accuracy: exact
"#,
    );
    let agent = &stack.agent;
    // The attack as the first review ran it: the victim's whole burst leased,
    // a forged sync, the rules read, each without credentials and with wrong ones.
    let theft = r#"{"v":1,"items":[{"rule":"customer","key":"customer|victim","cost":5}]}"#;
    let sync = r#"{"v":1,"filter_id":"x","rules_version":"fake","decisions":[{"rule":"customer","outcome":"failed_open","count":1000000}]}"#;
    let wrong = format!("Bearer {}", "f".repeat(64));
    let mut statuses = Vec::new();
    for (method, path, body) in [
        ("POST", "/v1/lease", Some(theft)),
        ("POST", "/v1/sync", Some(sync)),
        ("GET", "/v1/rules", None),
    ] {
        for auth in [None, Some(wrong.as_str())] {
            let mut headers = vec![("content-type", "application/json")];
            headers.extend(auth.map(|a| ("authorization", a)));
            let r =
                try_request(method, &agent.url(path), &headers, body.map(str::as_bytes)).unwrap();
            assert!(!r.body.contains("customer"), "{path} leaked: {}", r.body);
            statuses.push(r.status);
        }
    }
    println!("unauthenticated: {statuses:?}");
    assert_eq!(statuses, [401, 403, 401, 403, 401, 403]);
    // The victim still has every token, and the ratio did not move.
    let victim = stack.statuses(6, "/", &[("x-customer-id", "victim")]);
    assert_eq!(victim, [200, 200, 200, 200, 200, 429]);
    let ratio = meshlimit_tests::sample(
        &agent.metrics(),
        "meshlimit_fail_open_ratio",
        &[("rule", "customer")],
    );
    assert_eq!(ratio, Some(0.0));
    // The real filter, with the secret, is served (it got its rules and leases).
    let wrong_secret = Envoy::start_with(
        EnvoyConfig::new(agent.port()).secret(Some("not-the-deployment-secret-0123456789")),
    );
    let r = get(&wrong_secret.url("/"), &[("x-customer-id", "victim2")]);
    // A filter with another secret never got rules from this agent: it lets
    // traffic through untouched (no rules) and the agent counted its refusals.
    assert_eq!(r.status, 200);
    let text = agent.metrics();
    let forbidden = meshlimit_tests::sample(
        &text,
        "meshlimit_bad_requests_total",
        &[("reason", "forbidden")],
    )
    .unwrap_or(0.0);
    assert!(forbidden >= 3.0, "{text}");
}

#[test]
fn keys_in_metrics_and_redis_are_ids_never_the_key() {
    let redis = RedisServer::start();
    let stack = stack_on_redis(&redis, 1);
    let secret_key = "sk_live_0123456789";
    let statuses = stack.statuses(4, "/", &[("x-api-key", secret_key)]);
    assert_eq!(statuses, [200, 429, 429, 429]);
    eventually(Duration::from_secs(5), "top rejected keys", || {
        stack
            .agent
            .metrics()
            .contains("meshlimit_top_rejected_keys{")
    });
    let text = stack.agent.metrics();
    assert!(!text.contains(secret_key), "metrics name the key in clear");
    assert!(
        !stack.agent.stderr().contains(secret_key),
        "the log names it"
    );
    let keys: Vec<String> = match redis.cmd(&["KEYS", "*"]) {
        meshlimit_tests::Resp::Array(Some(items)) => {
            items.iter().filter_map(|r| r.text()).collect()
        }
        other => panic!("KEYS answered {other:?}"),
    };
    assert!(!keys.is_empty());
    println!("redis keys: {keys:?}");
    assert!(
        keys.iter().all(|k| !k.contains(secret_key)),
        "a Redis key name carries it: {keys:?}"
    );
}

#[test]
fn a_slot_collision_never_resets_the_fail_local_bucket() {
    // One shared-data slot for every key: every pair of keys collides. With the
    // agent down the per-IP rule's fail-local bucket (limit 4 × 2 / 1 node = 8)
    // must hold even while another key's state is written into the slot between
    // each request.
    let rules = r#"
version: 1
rules:
  - name: per-ip
    key: [client_ip]
    limit: { requests: 4, per: 1h }
  - name: per-key
    key: [{ header: x-api-key }]
    limit: { requests: 1000, per: 1s }
"#;
    let mut stack = Stack::start_with(AgentOptions::new(rules), |c| c.plugin("slots", 1));
    stack.agent.kill();
    let mut admitted = 0;
    for i in 0..40 {
        let key = format!("colliding-{i}");
        admitted += usize::from(stack.get("/", &[("x-api-key", &key)]).status == 200);
    }
    // The per-IP bucket keeps the slot while it refills, so the per-key rule
    // finds no room and denies: a collision costs availability, never a grant.
    println!("agent down, one slot: {admitted} of 40 admitted (ceiling 8)");
    assert!(admitted <= 8, "{admitted}");
}

#[test]
fn redis_down_keeps_the_agent_ready_and_the_node_ceiling_in_force() {
    let mut redis = RedisServer::start();
    let stack = stack_on_redis(&redis, 5);
    redis.kill();
    let ready = get(&stack.agent.url("/readyz"), &[]);
    assert_eq!(ready.status, 200, "{ready:?}");
    // The node's fail-local ceiling: 5 × 2 (safety) / 1 live agent. A cold key
    // starts with the whole of it (the rule refills 5 an hour), so exactly 10
    // pass: more is the ceiling broken, fewer a policy that does not admit.
    let statuses = stack.statuses(20, "/", &[("x-api-key", "k")]);
    println!(
        "redis down: {} of 20 admitted (ceiling 10)",
        count(&statuses, 200)
    );
    assert_eq!(count(&statuses, 200), 10, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 10, "{statuses:?}");
    assert_eq!(get(&stack.agent.url("/readyz"), &[]).status, 200);
}

#[test]
fn a_fail_closed_503_is_not_retried_by_the_callers_envoy() {
    let mut stack = Stack::start_with(
        AgentOptions::new(
            r#"
version: 1
rules:
  - name: closed
    key: [method]
    limit: { requests: 100, per: 1s }
    on_failure: closed
"#,
        ),
        |c| c,
    );
    stack.agent.kill();
    // The caller's Envoy: the root bootstrap without the filter, routing to the
    // limited Envoy (through the cluster the harness points at `agent_port`)
    // and retrying 503s as an Istio sidecar does by default.
    let root = std::fs::read_to_string(meshlimit_tests::repo_root().join("envoy.yaml")).unwrap();
    let caller_yaml = root.replacen(
        "route: { cluster: backend }",
        "route: { cluster: meshlimit_agent, retry_policy: { retry_on: \"5xx,retriable-status-codes\", retriable_status_codes: [503], num_retries: 3 } }",
        1,
    );
    assert_ne!(caller_yaml, root);
    let dir = tempfile::tempdir().unwrap();
    let bootstrap = dir.path().join("caller.yaml");
    std::fs::write(&bootstrap, caller_yaml).unwrap();
    let before = stack
        .envoy
        .stat("http.ingress.downstream_rq_total")
        .unwrap_or(0);
    let caller = Envoy::start_with(
        EnvoyConfig::new(stack.envoy.port())
            .bootstrap(&bootstrap)
            .without_filter(),
    );
    let r = get(&caller.url("/"), &[]);
    let after = stack
        .envoy
        .stat("http.ingress.downstream_rq_total")
        .unwrap_or(0);
    println!(
        "fail-closed through a retrying caller: {} and {} request(s) reached the limited Envoy",
        r.status,
        after - before
    );
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-envoy-ratelimited"), Some("true"));
    assert_eq!(after - before, 1, "the caller retried the 503");
}

const BURST_RULES: &str = r#"
version: 1
rules:
  - name: burst-closed
    match: { path_prefix: /burst/ }
    key: [path]
    limit: { requests: 100000, per: 1s }
    on_failure: closed
  - name: wide-closed
    match: { path_prefix: /wide/ }
    key: [path, { header: x-a }, { header: x-b }, { header: x-c }, { header: x-d }, { header: x-e }, { header: x-f }]
    limit: { requests: 100000, per: 1s }
    on_failure: closed
"#;

/// The statuses of `n` GETs sent at once on one HTTP/2 connection (one write
/// of every stream's HEADERS: tests/http2/streams.py), the i-th to `prefix`
/// followed by i.
fn streams_at_once(envoy: &Envoy, prefix: &str, headers: &[String], n: usize) -> Vec<u16> {
    let script = meshlimit_tests::repo_root().join("tests/http2/streams.py");
    let mut cmd = std::process::Command::new(meshlimit_tests::python_bin());
    cmd.arg(&script)
        .arg(format!("127.0.0.1:{}", envoy.port()))
        .arg(prefix)
        .arg(n.to_string());
    for h in headers {
        cmd.arg("--header").arg(h);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "streams.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let statuses: Vec<u16> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(statuses.len(), n);
    statuses
}

/// A client that opens many streams of new keys at once cannot push the
/// requests batched with its own onto their failure policy: a filter's lease
/// calls stop at the agent's limits, by items and by bytes, and no request
/// builds a key the agent refuses.
#[test]
fn two_hundred_streams_of_new_keys_at_once_never_fail_closed() {
    let stack = Stack::start(BURST_RULES);
    let statuses = streams_at_once(&stack.envoy, "/burst/k", &[], 200);
    eprintln!(
        "200 streams of new keys: {} answers of 503",
        count(&statuses, 503)
    );
    assert_eq!(count(&statuses, 200), 200, "{statuses:?}");

    // Keys near the agent's size limit (seven parts of about 120 bytes, of
    // quotes that JSON doubles), and keys past it once escaped (`%` is
    // written `%25`, so those are fingerprinted whole).
    for fill in ['"', '%'] {
        let value: String = std::iter::repeat_n(fill, 120).collect();
        let headers: Vec<String> = ["x-a", "x-b", "x-c", "x-d", "x-e", "x-f"]
            .iter()
            .map(|h| format!("{h}={value}"))
            .collect();
        let prefix = format!("/wide/{}", "p".repeat(100));
        let statuses = streams_at_once(&stack.envoy, &prefix, &headers, 200);
        eprintln!(
            "200 streams of long keys ({fill}): {} answers of 503",
            count(&statuses, 503)
        );
        assert_eq!(count(&statuses, 200), 200, "{statuses:?}");
    }
}
