use super::*;

#[test]
fn access_log_times_parse_to_nanoseconds() {
    assert_eq!(instant_ns("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
    assert_eq!(instant_ns("1970-01-01T00:00:00.000000123Z"), Some(123));
    assert_eq!(instant_ns("1970-01-01T00:00:02Z"), Some(2_000_000_000));
    assert_eq!(instant_ns("yesterday"), None);
}

fn rules(yaml: &str) -> RuleSet {
    meshlimit_core::rules::parse_rules("rules.yaml", yaml).expect("valid rules")
}

fn line(ms: u64, path: &str, key: &str) -> String {
    format!(
        r#"{{"start_time":"1970-01-01T00:00:00.{ms:03}Z","method":"GET","path":"{path}","x-api-key":"{key}"}}"#
    )
}

#[test]
fn a_request_an_enforcing_rule_is_already_denying_spends_no_other_tokens() {
    // `search` (2/h) is stricter than `any` (4/h): evaluated first.
    let set = rules(
        r#"
version: 1
rules:
  - name: any
    key: [{ header: x-api-key }]
    limit: { requests: 4, per: 1h }
    accuracy: exact
  - name: search
    match: { path_prefix: /search }
    key: [{ header: x-api-key }]
    limit: { requests: 2, per: 1h }
    accuracy: exact
"#,
    );
    // The third search is denied by `search` while `any` takes its third
    // token (both go to the store); the fourth is rejected by the cached
    // denial and spends nothing of `any`, whose last token the request to
    // /other then gets.
    let log: Vec<String> = (0..4)
        .map(|i| line(i, "/search", "k"))
        .chain([line(5, "/other", "k")])
        .collect();
    let r = replay(log.join("\n").as_bytes(), &set, None).unwrap();
    assert_eq!(r.requests, 5);
    assert_eq!(r.new.by_rule.get("search"), Some(&(4, 2)));
    assert_eq!(r.new.by_rule.get("any"), Some(&(5, 0)));
}

#[test]
fn a_window_rule_is_replayed_as_its_window() {
    // 3 per 100 ms in windows aligned to the epoch (the log's clock): the
    // fourth request in the first window is rejected, and so is one 90 ms in
    // (a bucket of the same rate would have refilled two by then); the next
    // window admits again.
    let set = rules(
        r#"
version: 1
rules:
  - name: fixed
    key: [{ header: x-api-key }]
    algorithm: fixed_window
    limit: { requests: 3, per: 100ms }
    accuracy: exact
"#,
    );
    let log: Vec<String> = [0, 10, 20, 30, 90, 100, 110]
        .into_iter()
        .map(|ms| line(ms, "/", "k"))
        .collect();
    let r = replay(log.join("\n").as_bytes(), &set, None).unwrap();
    assert_eq!(r.new.by_rule.get("fixed"), Some(&(7, 2)));
}

#[test]
fn a_decision_log_replays_each_keys_decisions_under_its_rule() {
    let set = rules(meshlimit_tests::EXACT_TWO_PER_HOUR);
    let record = |ms: u64, key_id: &str, decision: &str| {
        format!(
            r#"{{"time":"x","node":"n","filter":"f","at_ms":{ms},"rule":"per-key","rules_version":"v","decision":"{decision}","key_id":"{key_id}","source":"store","sample_rate":1.0}}"#
        )
    };
    let log = [
        record(1, "aa", "allowed"),
        record(2, "aa", "allowed"),
        record(3, "aa", "limited"),
        record(4, "bb", "allowed"),
        r#"{"time":"x","node":"n","filter":"f","at_ms":5,"rule":"gone","rules_version":"v","decision":"allowed","key_id":"aa","source":"store","sample_rate":0.01}"#.to_string(),
        "not json".to_string(),
    ];
    let loose = rules(
        "version: 1\nrules:\n  - name: per-key\n    key: [{ header: x-api-key }]\n    limit: { requests: 3, per: 1h }\n",
    );
    let r = replay(log.join("\n").as_bytes(), &set, Some(&loose)).unwrap();
    assert_eq!((r.requests, r.skipped, r.sampled), (4, 2, 0));
    assert_eq!(r.new.by_rule.get("per-key"), Some(&(4, 1)));
    let aa = KeyName::Id {
        rule: "per-key".into(),
        key_id: "aa".into(),
    };
    assert_eq!(r.new.by_key.get(&aa), Some(&1));
    assert_eq!(r.baseline.as_ref().map(|b| b.by_key.len()), Some(0));
    let mut text = Vec::new();
    report(&r, &set, &KeyIds::placeholder(), false, &mut text);
    let text = String::from_utf8(text).unwrap_or_default();
    assert!(
        text.contains("newly limited: rule per-key key aa: 1 rejected (baseline 0)"),
        "{text}"
    );
    assert!(!text.contains("were sampled"), "{text}");
}

#[test]
fn sampled_decision_log_lines_are_counted_and_said() {
    let set = rules(meshlimit_tests::EXACT_TWO_PER_HOUR);
    let record = |ms: u64, rate: f64| {
        format!(
            r#"{{"time":"x","node":"n","filter":"f","at_ms":{ms},"rule":"per-key","rules_version":"v","decision":"allowed","key_id":"aa","source":"store","sample_rate":{rate}}}"#
        )
    };
    let log = [record(1, 0.5), record(2, 1.0), record(3, 0.25)];
    let r = replay(log.join("\n").as_bytes(), &set, None).unwrap();
    assert_eq!((r.requests, r.sampled), (3, 2));
    let mut text = Vec::new();
    report(&r, &set, &KeyIds::placeholder(), false, &mut text);
    let text = String::from_utf8(text).unwrap_or_default();
    assert!(
        text.contains("2 decision log lines were sampled (log_sample below 1)"),
        "{text}"
    );
}

#[test]
fn a_key_rejected_as_often_under_the_baseline_is_not_newly_limited() {
    let set = rules(meshlimit_tests::EXACT_TWO_PER_HOUR);
    let log: Vec<String> = (0..3)
        .map(|ms| {
            format!(
                r#"{{"time":"x","node":"n","filter":"f","at_ms":{ms},"rule":"per-key","rules_version":"v","decision":"allowed","key_id":"aa","source":"store","sample_rate":1.0}}"#
            )
        })
        .collect();
    let r = replay(log.join("\n").as_bytes(), &set, Some(&set)).unwrap();
    assert_eq!(r.new.by_rule.get("per-key"), Some(&(3, 1)));
    let mut text = Vec::new();
    report(&r, &set, &KeyIds::placeholder(), false, &mut text);
    let text = String::from_utf8(text).unwrap_or_default();
    assert!(!text.contains("newly limited: rule"), "{text}");
}

#[test]
fn a_request_sending_its_key_twice_is_counted_ambiguous() {
    let set = rules(
        "version: 1\nrules:\n  - name: q\n    key: [{ query: k }]\n    limit: { requests: 2, per: 1h }\n",
    );
    let log = [line(0, "/?k=a&k=b", "x"), line(1, "/?k=a", "x")];
    let r = replay(log.join("\n").as_bytes(), &set, None).unwrap();
    assert_eq!((r.requests, r.new.ambiguous), (2, 1));
    assert_eq!(r.new.by_rule.get("q"), Some(&(1, 0)));
}

#[test]
fn each_request_is_judged_by_the_limit_in_force_at_its_time() {
    // 2 an hour; 100 a second from 00:10 to 00:20 of every hour.
    let set = rules(
        r#"
version: 1
rules:
  - name: sched
    key: [{ header: x-api-key }]
    limit: { requests: 2, per: 1h }
    accuracy: exact
    schedule:
      - { minutes: "00m10s-00m20s", requests: 100, per: 1s }
"#,
    );
    let at = |secs: u64| {
        format!(
            r#"{{"start_time":"2026-12-01T10:00:{secs:02}.000Z","method":"GET","path":"/","x-api-key":"k"}}"#
        )
    };
    // Five before the window (2 pass), five in it (the denial ends at its
    // opening, the bucket refills at 100/s: all pass), five after (what
    // the key held is cut to the burst of 2: 2 pass).
    let log: Vec<String> = (1..6).chain(12..17).chain(25..30).map(at).collect();
    let r = replay(log.join("\n").as_bytes(), &set, None).unwrap();
    assert_eq!(r.requests, 15);
    assert_eq!(r.new.by_rule.get("sched"), Some(&(15, 6)));
}

#[test]
fn a_line_past_the_cap_stops_the_replay_naming_it() {
    let set = rules("version: 1\nrules:\n  - name: any\n    key: [client_ip]\n    limit: { requests: 1, per: 1s }\n");
    let fits = "x".repeat(MAX_LINE_BYTES);
    let log = format!("{}\n{fits}\r\n{fits}", line(0, "/", "k"));
    let r = replay(log.as_bytes(), &set, None).unwrap();
    assert_eq!((r.requests, r.skipped), (1, 2));
    let long = format!(
        "{}\n{fits}\n{fits}x\n{}",
        line(0, "/", "k"),
        line(1, "/", "k")
    );
    let e = replay(long.as_bytes(), &set, None).unwrap_err();
    assert!(matches!(e, ReplayError::LineTooLong { line: 3 }), "{e}");
    assert_eq!(
        e.to_string(),
        "line 3: longer than 65536 bytes, the longest line replay reads"
    );
    // Read no further than the cap: an endless line is refused, not held.
    let endless = std::io::BufReader::new(std::io::repeat(b'x'));
    let e = replay(endless, &set, None).unwrap_err();
    assert!(matches!(e, ReplayError::LineTooLong { line: 1 }), "{e}");
}

#[test]
fn a_log_past_the_line_cap_stops_the_replay() {
    let set = rules("version: 1\nrules:\n  - name: any\n    key: [client_ip]\n    limit: { requests: 1, per: 1s }\n");
    let log: Vec<String> = (0..4).map(|i| line(i, "/", "k")).collect();
    let text = log.join("\n");
    assert_eq!(
        replay_at_most(text.as_bytes(), 4, &set, None)
            .unwrap()
            .requests,
        4
    );
    let e = replay_at_most(text.as_bytes(), 3, &set, None).unwrap_err();
    assert!(matches!(e, ReplayError::TooManyLines { max: 3 }), "{e}");
    assert_eq!(MAX_LINES, 10_000_000);
}
