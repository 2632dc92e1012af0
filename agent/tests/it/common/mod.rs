//! Helpers shared by the agent's tests: an `App` over the memory store and
//! requests sent straight to `App::handle`.

// Not every module uses every helper.
#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Request, StatusCode};
use meshlimit_agent::api::Auth;
use meshlimit_agent::{App, CurrentRules, LeaseSettings};
use meshlimit_core::rules::parse_rules;
use meshlimit_core::secret::Secret;
use meshlimit_core::wire::*;
use meshlimit_core::{DescriptorKey, Outcome};
use meshlimit_store::MemoryStore;

pub const RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/login-and-search.yaml"
));

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

/// The deployment secret of these tests.
pub const SECRET: &str = "agent-api-tests-secret-0123456789abcdef";

pub fn secret() -> Secret {
    Secret::new(SECRET.as_bytes()).unwrap()
}

/// The built agent binary, as an operator runs it: no `MESHLIMIT_*` variable
/// from the test's environment but this deployment's secret.
pub fn agent_command(args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_meshlimit-agent"));
    cmd.args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MESHLIMIT_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("MESHLIMIT_SECRET", SECRET);
    cmd
}

/// The operator token of these tests: a value of its own, not derived from
/// the secret.
pub const OPERATOR_TOKEN: &str = "operator-token-of-the-agent-api-tests-0123456789";

/// The `authorization` value an operator of this deployment sends.
pub fn operator_bearer() -> String {
    format!("Bearer {OPERATOR_TOKEN}")
}

/// The `authorization` value a filter of this deployment sends.
pub fn bearer() -> String {
    format!("Bearer {}", secret().agent_token())
}

pub fn app(rules: Option<&str>) -> App {
    let current = Arc::new(CurrentRules::empty());
    if let Some(yaml) = rules {
        current.install(Arc::new(parse_rules("rules.yaml", yaml).unwrap()));
    }
    App::standalone(
        current,
        Arc::new(MemoryStore::new()),
        LeaseSettings::default(),
        Auth::new(&secret()),
    )
    .unwrap()
}

/// A request as the node's filter sends it: with its credentials (unless
/// `headers` brings its own `authorization`).
pub async fn call(
    app: &App,
    method: &str,
    path: &str,
    body: impl Into<Bytes>,
    headers: &[(&str, &str)],
) -> Reply {
    let bearer = bearer();
    let mut all = headers.to_vec();
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
    {
        all.push(("authorization", bearer.as_str()));
    }
    call_raw(app, method, path, body, &all).await
}

/// A request with exactly `headers`: what any pod on the network can send.
pub async fn call_raw(
    app: &App,
    method: &str,
    path: &str,
    body: impl Into<Bytes>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app.handle(req.body(Full::new(body.into())).unwrap()).await;
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

pub async fn get(app: &App, path: &str) -> Reply {
    call(app, "GET", path, Bytes::new(), &[]).await
}

pub async fn post<T: serde::Serialize>(app: &App, path: &str, body: &T) -> Reply {
    call(app, "POST", path, serde_json::to_vec(body).unwrap(), &[]).await
}

pub fn item(rule: &str, part: &str, cost: u32) -> LeaseItem {
    LeaseItem {
        rule: rule.into(),
        key: DescriptorKey::new(rule, [part]),
        cost,
        plan: None,
        want: None,
    }
}

pub fn lease_request(items: Vec<LeaseItem>) -> LeaseRequest {
    LeaseRequest {
        v: WIRE_VERSION,
        rules_version: String::new(),
        items,
    }
}

pub async fn lease(app: &App, items: Vec<LeaseItem>) -> Vec<LeaseAnswer> {
    let reply = post(app, LEASE_PATH, &lease_request(items)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    serde_json::from_str::<LeaseResponse>(&reply.body)
        .unwrap()
        .items
}

pub async fn metrics(app: &App) -> String {
    let reply = get(app, "/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.body
}

pub fn sync_request(
    filter: &str,
    version: Option<&str>,
    decisions: &[(&str, Outcome, u64)],
) -> SyncRequest {
    SyncRequest {
        v: WIRE_VERSION,
        fetches_rules: false,
        filter_id: filter.into(),
        rules_version: version.map(str::to_string),
        decisions: decisions
            .iter()
            .map(|(rule, outcome, count)| DecisionCount {
                rule: (*rule).into(),
                outcome: *outcome,
                count: *count,
            })
            .collect(),
    }
}

pub async fn sync(app: &App, req: &SyncRequest) -> SyncResponse {
    let reply = post(app, SYNC_PATH, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    serde_json::from_str(&reply.body).unwrap()
}

/// Runs `cmd` to its end: exit code, stdout, stderr.
pub fn run(cmd: &mut std::process::Command) -> (i32, String, String) {
    let std::process::Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

/// Writes `content` as `dir/rules.yaml`; its path.
pub fn rules_file(dir: &std::path::Path, content: &str) -> String {
    let path = dir.join("rules.yaml");
    std::fs::write(&path, content).unwrap();
    path.display().to_string()
}
