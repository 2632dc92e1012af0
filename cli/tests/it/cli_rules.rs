//! The rules-authoring commands, run as a platform team would: `explain`,
//! `check-rules --against`, expiry warnings and `replay`.

use crate::common;

use std::process::Command;

use common::{rules_file, run};

/// The `meshlimit` binary with this deployment's secret and nothing else from the
/// test's environment.
fn meshlimit(args: &[&str]) -> Command {
    common::cli_command(args)
}

#[test]
fn explain_shows_the_rules_a_request_meets_and_why_the_others_do_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(
        dir.path(),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/explain-three-rules.yaml"
        )),
    );
    let args = [
        "explain",
        "--rules",
        &rules,
        "--method",
        "post",
        "--path",
        "//login/",
        "-H",
        "X-Api-Key: k-1",
        "--client-ip",
        "10.0.0.7",
    ];
    let (code, out, err) = run(&mut meshlimit(&args));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains(": POST /login at "), "{out}");
    assert!(
        lines[1].starts_with(
            "1. login-per-ip  applies  key login-per-ip|10.0.0.7  limit 5 per 1m (burst 5)"
        ) && lines[1].contains("accuracy exact  on_failure closed"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("2. per-key  applies  key per-key|k-1  limit 100 per 1s")
            && lines[2].ends_with("on_failure local  cold_start admit"),
        "{out}"
    );
    assert!(
        !lines[1].contains("cold_start"),
        "the default is not said: {out}"
    );
    assert_eq!(
        lines[3],
        "3. search  skipped: path `/login` does not start with `/v1/search`"
    );
    let (code, json, _) = run(&mut meshlimit(&[&args[..], &["--format", "json"]].concat()));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["request"]["path"], "/login");
    let rows = v["rules"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["key"], "login-per-ip|10.0.0.7");
    assert_eq!(rows[0]["limit"]["per_seconds"], 60.0);
    assert_eq!(rows[1]["applies"], true);
    assert_eq!(
        (
            rows[0]["cold_start"].as_str(),
            rows[1]["cold_start"].as_str()
        ),
        (Some("wait"), Some("admit"))
    );
    assert_eq!(rows[2]["applies"], false);
    assert_eq!(rows[2]["mode"], "shadow");
    assert!(rows[2]["reason"].as_str().unwrap().contains("/v1/search"));
    // A key header sent twice: the filter's 400, said as such.
    let twice = [
        "explain",
        "--rules",
        &rules,
        "--path",
        "/",
        "-H",
        "x-api-key: a",
        "-H",
        "x_api_key: b",
    ];
    let (code, _, err) = run(&mut meshlimit(&twice));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sent more than once"), "{err}");
}

#[test]
fn explain_takes_claims_metadata_and_the_destination() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(
        dir.path(),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/jwt-claims-and-destinations.yaml"
        )),
    );
    let explain = |more: &[&str]| {
        let args = [
            &["explain", "--rules", &rules, "--path", "/reviews/1"][..],
            more,
        ]
        .concat();
        let (code, out, err) = run(&mut meshlimit(&args));
        assert_eq!(code, 0, "{err}");
        out
    };
    let reviews = "outbound|9080||reviews.shop.svc.cluster.local";
    let out = explain(&[
        "--claim",
        "sub=alice",
        "--claim",
        "plan=pro",
        "--cluster",
        reviews,
        "--route",
        "reviews",
    ]);
    assert!(
        out.contains("1. ratings-per-user  skipped: route `reviews` is not `ratings`"),
        "{out}"
    );
    assert!(
        out.contains("2. reviews-per-user  applies  key reviews-per-user|alice  limit 4 per 1h (burst 4) plan pro"),
        "{out}"
    );
    // The long form names the same value; no claim, no key.
    let out = explain(&[
        "--metadata",
        "envoy.filters.http.jwt_authn:payload.sub=bob",
        "--route",
        "ratings",
    ]);
    assert!(
        out.contains("1. ratings-per-user  applies  key ratings-per-user|bob"),
        "{out}"
    );
    assert!(
        out.contains("2. reviews-per-user  skipped: the request has no upstream cluster"),
        "{out}"
    );
    let out = explain(&["--cluster", reviews]);
    assert!(
        out.contains("reviews-per-user  skipped: the request has no claim `sub` to key on"),
        "{out}"
    );
    // A malformed flag is a usage error naming the form.
    let (code, _, err) = run(&mut meshlimit(&[
        "explain",
        "--rules",
        &rules,
        "--path",
        "/",
        "--metadata",
        "sub=alice",
    ]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("FILTER:FIELD.FIELD=VALUE"), "{err}");
}

#[test]
fn check_rules_against_lists_every_change_and_refuses_an_unapproved_cut() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let old = write(
        "old.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/against-old.yaml"
        )),
    );
    let new_rules = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/against-new.yaml"
    ));
    let new = write("new.yaml", new_rules);
    let (code, out, err) = run(&mut meshlimit(&["check-rules", &new, "--against", &old]));
    assert_eq!(code, 1, "{out}{err}");
    // One verdict, first: never `ok` and then a refusal.
    assert!(
        out.starts_with(&format!("{new}: refused: valid (")),
        "{out}"
    );
    assert!(!out.contains(": ok ("), "{out}");
    assert!(
        out.contains("to approve rule api's cut: changes: { approve: [{ rule: api, against: \""),
        "{out}"
    );
    assert!(
        out.contains(
            "~ rule api: limit 100 per 1 s (burst 100) → 10 per 1 s (burst 10), ×0.10 — refused"
        ),
        "{out}"
    );
    assert!(out.contains("+ rule fresh: added (shadow)"), "{out}");
    assert!(out.contains("- rule gone: removed"), "{out}");
    // JSON for CI: the same changes, the refusal flagged.
    let (code, json, _) = run(&mut meshlimit(&[
        "check-rules",
        &new,
        "--against",
        &old,
        "--format",
        "json",
    ]));
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let changes = v["changes"].as_array().unwrap();
    let api = changes.iter().find(|c| c["rule"] == "api").unwrap();
    assert_eq!(api["change"], "limit");
    assert_eq!(api["refused"], true);
    assert!((api["factor"].as_f64().unwrap() - 0.1).abs() < 1e-9);
    assert_eq!(changes.len(), 3);
    // Approved against the old file's version: exit 0.
    let version = v["against"]["version"].as_str().unwrap().to_string();
    let approved = write(
        "approved.yaml",
        &format!("{new_rules}changes: {{approve: [{{rule: api, against: \"{version}\"}}]}}\n"),
    );
    let (code, out, err) = run(&mut meshlimit(&[
        "check-rules",
        &approved,
        "--against",
        &old,
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("refused"), "{out}");
}

#[test]
fn check_rules_against_holds_a_cut_to_the_old_files_guard_not_the_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let old_rules = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/against-old.yaml"
    ));
    let new_rules = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/against-new.yaml"
    ));
    let old = write("old.yaml", old_rules);
    // A tenfold cut whose own file lets any cut through: refused.
    let loose = write(
        "loose.yaml",
        &format!("{new_rules}changes: {{max_tightening: 0.05}}\n"),
    );
    let (code, out, err) = run(&mut meshlimit(&["check-rules", &loose, "--against", &old]));
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("×0.10 — refused"), "{out}");
    // Against an old file that allows it: accepted.
    let old_loose = write(
        "old-loose.yaml",
        &format!("{old_rules}changes: {{max_tightening: 0.05}}\n"),
    );
    let new = write("new.yaml", new_rules);
    let (code, out, err) = run(&mut meshlimit(&[
        "check-rules",
        &new,
        "--against",
        &old_loose,
    ]));
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn check_rules_warns_of_rules_that_expire_soon_or_have_expired() {
    let dir = tempfile::tempdir().unwrap();
    let soon = {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        // Three days ahead, as a date (midnight UTC).
        let days = now / 86_400 + 3;
        let instant = meshlimit_core::rules::expiry::format_instant(days * 86_400);
        instant[..10].to_string()
    };
    let rules = rules_file(
        dir.path(),
        &format!(
            "version: 1\nrules:\n  - {{name: api, key: [method], limit: {{requests: 10, per: 1s}}}}\n  - {{name: trial, owner: growth, expires: \"{soon}\", key: [method], limit: {{requests: 99, per: 1s}}}}\n  - {{name: old, expires: \"2020-01-01\", key: [method], limit: {{requests: 99, per: 1s}}}}\n  - {{name: later, expires: \"2999-01-01\", key: [method], limit: {{requests: 99, per: 1s}}}}\n"
        ),
    );
    let (code, _, err) = run(&mut meshlimit(&["check-rules", &rules]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "warning: rule trial (owner growth) expires at {soon}, in "
        )),
        "{err}"
    );
    assert!(
        err.contains("warning: rule old expired at 2020-01-01 and no longer applies"),
        "{err}"
    );
    assert!(!err.contains("later"), "{err}");
    let (_, bad_err) = {
        let bad = rules_file(
            dir.path(),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../tests/fixtures/rules/invalid/expires-not-a-date.yaml"
            )),
        );
        let (code, _, err) = run(&mut meshlimit(&["check-rules", &bad]));
        (code, err)
    };
    assert!(
        bad_err
            .contains(":3:17: rule api: field rules[0].expires: `tomorrow` is not a UTC instant"),
        "{bad_err}"
    );
}

/// A rules fixture's text (`tests/fixtures/rules/NAME`).
macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/",
            $name
        ))
    };
}

#[test]
fn explain_shows_a_rules_schedule_and_the_window_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(dir.path(), fixture!("top-of-the-hour-rush.yaml"));
    let explain = |at: &str, format: &str| {
        let (code, out, err) = run(&mut meshlimit(&[
            "explain",
            "--rules",
            &rules,
            "--path",
            "/v1/reports/daily",
            "-H",
            "x-api-key: k-1",
            "--at",
            at,
            "--format",
            format,
        ]));
        assert_eq!(code, 0, "{err}");
        out
    };
    // Saturday 10:00:10 UTC: the top-of-the-hour window.
    let out = explain("2026-12-05T10:00:10Z", "text");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].ends_with(": GET /v1/reports/daily at 2026-12-05T10:00:10Z"),
        "{out}"
    );
    assert!(
        lines[1].starts_with(
            "1. reports-per-api-key  applies  key reports-per-api-key|k-1  limit 100 per 1s (burst 1000)"
        ),
        "{out}"
    );
    assert_eq!(lines[2], "     schedule: window 0 in force", "{out}");
    assert_eq!(
        lines[3],
        "     [0] top-of-hour  minutes 00m00s-00m30s UTC  limit 100 per 1s (burst 1000)  (in force)"
    );
    assert_eq!(
        lines[4],
        "     [1] business-hours  hours 09:00-17:00 UTC on mon, tue, wed, thu, fri  limit 200 per 1s (burst 200)"
    );
    // Saturday 10:00:30: past the window, the rule's own limit.
    let out = explain("2026-12-05T10:00:30Z", "text");
    assert!(out.contains("limit 100 per 1s (burst 100)"), "{out}");
    assert!(
        out.contains("     schedule: no window in force, the rule's own limit applies"),
        "{out}"
    );
    assert!(!out.contains("(in force)"), "{out}");
    // Tuesday 10:00:30, as JSON: business hours.
    let v: serde_json::Value =
        serde_json::from_str(&explain("2026-12-01T10:00:30Z", "json")).unwrap();
    assert_eq!(v["at"], "2026-12-01T10:00:30Z");
    let row = &v["rules"][0];
    assert_eq!(row["window"], 1);
    assert_eq!(row["limit"]["requests"], 200);
    assert_eq!(row["schedule"][0]["name"], "top-of-hour");
    assert_eq!(row["schedule"][0]["minutes"], "00m00s-00m30s");
    assert_eq!(row["schedule"][0]["days"], serde_json::Value::Null);
    assert_eq!(row["schedule"][0]["limit"]["burst"], 1000);
    assert_eq!(row["schedule"][1]["hours"], "09:00-17:00");
    assert_eq!(row["schedule"][1]["days"][4], "fri");
    // A bad instant is a usage error naming the form.
    let (code, _, err) = run(&mut meshlimit(&[
        "explain", "--rules", &rules, "--path", "/", "--at", "10am",
    ]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("`10am` is not a UTC instant"), "{err}");
}

#[test]
fn check_rules_refuses_a_broken_schedule_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(dir.path(), fixture!("invalid/schedule-span-in-words.yaml"));
    let (code, _, err) = run(&mut meshlimit(&["check-rules", &rules]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(":9:9: rule reports-per-api-key: field rules[0].schedule[0].minutes: `first 30 seconds` is not a span"),
        "{err}"
    );
    assert!(
        err.contains(
            ":21:5: rule by-plan: field rules[1].schedule: a rule with `plans` cannot have a schedule"
        ),
        "{err}"
    );
}

#[test]
fn check_rules_against_lists_a_schedule_change_and_refuses_its_tightening() {
    let dir = tempfile::tempdir().unwrap();
    let old = rules_file(dir.path(), fixture!("top-of-the-hour-rush.yaml"));
    let new = dir.path().join("new.yaml");
    std::fs::write(
        &new,
        "version: 1\nrules:\n  - name: reports-per-api-key\n    match: { path_prefix: /v1/reports }\n    key: [{ header: x-api-key }]\n    limit: { requests: 100, per: 1s, burst: 100 }\n    schedule:\n      - { name: business-hours, days: [mon, tue, wed, thu, fri], hours: \"09:00-17:00\", requests: 200, burst: 200 }\n",
    )
    .unwrap();
    let new = new.display().to_string();
    let (code, out, err) = run(&mut meshlimit(&["check-rules", &new, "--against", &old]));
    assert_eq!(code, 1, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("~ rule reports-per-api-key: schedule [top-of-hour: minutes 00m00s-00m30s UTC: 100 per 1 s (burst 1000); business-hours: hours 09:00-17:00 UTC on mon, tue, wed, thu, fri: 200 per 1 s (burst 200)] → [business-hours: hours 09:00-17:00 UTC on mon, tue, wed, thu, fri: 200 per 1 s (burst 200)]; tightest at Mon 00:00:00 UTC: 100 per 1 s (burst 1000) → 100 per 1 s (burst 100), ×0.10 — refused"),
        "{all}"
    );
    let (_, json, _) = run(&mut meshlimit(&[
        "check-rules",
        &new,
        "--against",
        &old,
        "--format",
        "json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let c = &v["changes"][0];
    assert_eq!(c["change"], "schedule");
    assert_eq!(c["refused"], true);
    assert!((c["factor"].as_f64().unwrap() - 0.1).abs() < 1e-9, "{c}");
}

#[test]
fn replay_shows_what_a_tighter_rule_would_reject_of_recorded_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let rules = |requests: u32| {
        format!("version: 1\nrules:\n  - {{name: per-key, key: [{{header: x-api-key}}], limit: {{requests: {requests}, per: 1s}}}}\n")
    };
    let old = write("old.yaml", &rules(30));
    let new = write("new.yaml", &rules(5));
    // 60 s of an access log: k1 every 50 ms (20/s), k2 every 500 ms (2/s), and
    // a line of noise. Envoy writes `-` for a header the request lacked.
    let mut log = String::from("not json\n");
    for ms in (0..60_000u64).step_by(50) {
        let t = format!(
            "2026-12-01T14:{:02}:{:02}.{:03}Z",
            ms / 60_000,
            (ms / 1000) % 60,
            ms % 1000
        );
        log.push_str(&format!(
            "{{\"start_time\":\"{t}\",\"method\":\"GET\",\"path\":\"/v1/x?q=1\",\"x-api-key\":\"k1\",\"x-other\":\"-\"}}\n"
        ));
        if ms % 500 == 0 {
            log.push_str(&format!(
                "{{\"start_time\":\"{t}\",\"method\":\"GET\",\"path\":\"/v1/x\",\"x-api-key\":\"k2\"}}\n"
            ));
        }
    }
    let log = write("access.log", &log);
    let (code, out, err) = run(&mut meshlimit(&[
        "replay",
        "--rules",
        &new,
        "--baseline",
        &old,
        &log,
        "--format",
        "json",
    ]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests"], 1320);
    assert_eq!(v["skipped_lines"], 1);
    let rule = &v["rules"][0];
    assert_eq!(rule["applied"], 1320);
    // k1 offers 1,200 in 60 s; a bucket of 5 at 5/s admits 5 + 5 × 59.95 ≈ 305.
    let rejected = rule["would_reject"].as_u64().unwrap();
    assert!((893..=897).contains(&rejected), "{rejected}");
    assert_eq!(rule["baseline_would_reject"], 0);
    let keys = v["newly_limited_keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "only k1: {keys:?}");
    assert_eq!(keys[0]["would_reject"].as_u64(), Some(rejected));
    assert_eq!(keys[0]["key_id"].as_str().unwrap().len(), 32);
    // Text for people.
    let (_, text, _) = run(&mut meshlimit(&[
        "replay",
        "--rules",
        &new,
        "--baseline",
        &old,
        &log,
    ]));
    assert!(
        text.contains(&format!(
            "rule per-key: applied to 1320, would reject {rejected} (baseline 0)"
        )),
        "{text}"
    );
    assert!(text.contains("newly limited: rule per-key key "), "{text}");
}

/// The shipped rules pass `--profile` for where they run and fail it where
/// they cannot work: the gateway rules' per-IP rules at a sidecar, the
/// sidecar rules' inbound cluster at a gateway. Each refusal names the rule,
/// the field and what to do instead.
#[test]
fn check_rules_profile_refuses_what_cannot_work_where_the_file_runs() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let gateway = format!("{root}/deploy/rules.yaml");
    let sidecar = format!("{root}/deploy/overlays/istio/rules.yaml");
    for (file, profile) in [(&gateway, "gateway"), (&sidecar, "sidecar")] {
        let (code, out, err) = run(&mut meshlimit(&["check-rules", "--profile", profile, file]));
        assert_eq!(code, 0, "{file} as {profile}: {out}{err}");
    }
    let (code, _, err) = run(&mut meshlimit(&[
        "check-rules",
        "--profile",
        "sidecar",
        &gateway,
    ]));
    assert_eq!(code, 1, "{err}");
    for rule in ["per-ip", "login-per-ip"] {
        assert!(
            err.lines().any(|l| l.contains(&format!("rule {rule}:"))
                && l.contains("key[0]")
                && l.contains("calling pod")),
            "{rule}: {err}"
        );
    }
    let (code, _, err) = run(&mut meshlimit(&[
        "check-rules",
        "--profile",
        "gateway",
        &sidecar,
    ]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("rule per-endpoint:")
            && err.contains("match.cluster")
            && err.contains("*|SERVICE"),
        "{err}"
    );
}
