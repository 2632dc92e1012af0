use std::collections::HashMap;
use std::time::Duration;

use meshlimit_core::wire::{DecisionRecord, DecisionSource, WIRE_VERSION};
use meshlimit_core::Outcome;

use super::*;
use crate::test_support::Registered;
use meshlimit_tests::sample;

fn record(key_id: &str, decision: Outcome, sample_rate: f64) -> DecisionRecord {
    DecisionRecord {
        at_ms: 1_796_133_723_123,
        rule: "per-key".into(),
        rules_version: "v1".into(),
        decision,
        key_id: key_id.into(),
        key: None,
        source: DecisionSource::Store,
        tokens: Some(0),
        retry_after_ms: (decision == Outcome::Limited).then_some(900),
        sample_rate,
        request_id: Some("req-1".into()),
    }
}

fn batch(records: Vec<DecisionRecord>) -> DecisionsRequest {
    DecisionsRequest {
        v: WIRE_VERSION,
        filter_id: "envoy-1/vm1".into(),
        records,
        dropped: 0,
    }
}

fn metrics() -> Registered<DecisionLogMetrics> {
    Registered::new(DecisionLogMetrics::new)
}

/// Waits (bounded) until the writer has written `n` lines in all.
fn written(m: &Registered<DecisionLogMetrics>, n: f64) {
    for _ in 0..500 {
        let text = m.render().unwrap();
        if sample(&text, "meshlimit_decision_log_records_total", &[]) == Some(n) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the writer did not write {n} lines");
}

#[test]
fn rotation_caps_the_files_and_keeps_every_line_whole() {
    let dir = std::env::temp_dir().join(format!("declog-rot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("decisions.log");
    let m = metrics();
    let target = Target::Files {
        path: path.clone(),
        max_bytes: 4_096,
        files: 3,
    };
    let log = DecisionLog::start(Some(target), "node-a", m.clone()).unwrap();
    for i in 0..200 {
        log.accept(batch(vec![record(
            &format!("{i:032x}"),
            Outcome::Limited,
            1.0,
        )]));
    }
    written(&m, 200.0);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["decisions.log", "decisions.log.1", "decisions.log.2"]
    );
    let mut last = String::new();
    for name in &names {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(text.len() <= 4_096, "{name}: {} bytes", text.len());
        for l in text.lines() {
            let line: LogLine = serde_json::from_str(l).unwrap();
            assert_eq!(line.node, "node-a");
            assert_eq!(line.filter, "envoy-1/vm1");
        }
        if name == "decisions.log" {
            last = text.lines().last().unwrap_or_default().to_string();
        }
    }
    // The newest line is in the current file.
    assert!(last.contains(&format!("{:032x}", 199)), "{last}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_line_names_every_field_and_the_key_only_in_clear_when_given() {
    let line = LogLine::new(record("ab", Outcome::Limited, 1.0), "n", "f");
    let v: serde_json::Value = serde_json::to_value(&line).unwrap();
    assert_eq!(v["time"], "2026-12-01T14:02:03.123Z");
    assert_eq!(v["decision"], "limited");
    assert_eq!(v["source"], "store");
    assert_eq!(v["retry_after_ms"], 900);
    assert_eq!(v["request_id"], "req-1");
    assert!(v.get("key").is_none());
}

#[test]
fn the_queue_is_bounded_and_drops_are_counted() {
    let m = metrics();
    // A writer that cannot keep up: nothing reads the queue.
    let (tx, _rx) = std::sync::mpsc::sync_channel(QUEUE_LINES);
    let log = stalled(tx, m.clone());
    let mut b = batch(vec![record("k", Outcome::Limited, 1.0); QUEUE_LINES + 5]);
    b.dropped = 7;
    log.accept(b);
    let text = m.render().unwrap();
    let dropped = |at| sample(&text, "meshlimit_decision_log_dropped_total", &[("at", at)]);
    assert_eq!(dropped("agent"), Some(5.0));
    assert_eq!(dropped("filter"), Some(7.0));
}

/// A log whose writer never takes a line off `tx`'s queue.
fn stalled(
    tx: std::sync::mpsc::SyncSender<Vec<u8>>,
    metrics: Arc<DecisionLogMetrics>,
) -> DecisionLog {
    DecisionLog {
        node: "n".into(),
        tx: Some(tx),
        queued: Arc::new(AtomicUsize::new(0)),
        recent: Mutex::new(Recent::default()),
        metrics,
    }
}

#[test]
fn a_flood_of_maximal_records_holds_no_more_than_the_byte_bounds() {
    let m = metrics();
    let (tx, _rx) = std::sync::mpsc::sync_channel(QUEUE_LINES);
    let log = stalled(tx, m.clone());
    // Every field at the API's bound (a key of 1 KiB, a request id of 128
    // bytes, a filter id of 256): about 1.7 KiB a line, 1.5 KiB a kept record.
    let maximal = DecisionRecord {
        rule: "r".repeat(70),
        rules_version: "v".repeat(64),
        key: Some("k".repeat(1_024)),
        request_id: Some("q".repeat(128)),
        ..record(&"a".repeat(32), Outcome::Limited, 1.0)
    };
    for _ in 0..100 {
        log.accept(DecisionsRequest {
            filter_id: "f".repeat(256),
            ..batch(vec![maximal.clone(); 128])
        });
    }
    let held = log.held_bytes();
    assert!(held.queued <= QUEUE_BYTES, "{held:?}");
    assert!(held.queued > QUEUE_BYTES - 4_096, "{held:?}");
    assert!(held.recent <= RECENT_BYTES, "{held:?}");
    assert!(held.recent > RECENT_BYTES - 4_096, "{held:?}");
    let text = m.render().unwrap();
    let dropped = sample(
        &text,
        "meshlimit_decision_log_dropped_total",
        &[("at", "agent")],
    );
    assert!(dropped.is_some_and(|d| d > 10_000.0), "{dropped:?}");
}

#[test]
fn recent_records_and_hot_keys_are_bounded() {
    let log = DecisionLog::start(None, "n", metrics().clone()).unwrap();
    for i in 0..(RECENT_RECORDS + HOT_KEYS) {
        log.accept(batch(vec![record(&format!("k{i}"), Outcome::Allowed, 0.5)]));
    }
    for _ in 0..30 {
        log.accept(batch(vec![record("hot", Outcome::Limited, 1.0)]));
    }
    let recent = log.recent("per-key", "hot");
    assert_eq!(recent.len(), RECENT_SHOWN);
    assert!(log.recent("per-key", "k0").is_empty());
    let r = lock(&log.recent);
    assert_eq!(r.ring.len(), RECENT_RECORDS);
    let counted: usize = r.hot.values().map(HashMap::len).sum();
    assert_eq!(counted, r.hot_keys);
    assert!(r.hot_keys <= HOT_KEYS, "{} keys counted", r.hot_keys);
    drop(r);
    let hot = log.hot("per-key");
    assert_eq!(hot[0].key_id, "hot");
    assert_eq!(hot[0].rejections, 30);
    assert!(hot.len() <= HOT_SHOWN);
    assert!(log.hot("other").is_empty());
}

#[test]
fn a_hot_keys_decisions_weigh_each_sampled_record_by_its_rate() {
    let log = DecisionLog::start(None, "n", metrics().clone()).unwrap();
    // Three allowed records kept at a quarter stand for twelve decisions; two
    // rejections (always kept) for two.
    for _ in 0..3 {
        log.accept(batch(vec![record("k", Outcome::Allowed, 0.25)]));
    }
    for _ in 0..2 {
        log.accept(batch(vec![record("k", Outcome::Limited, 1.0)]));
    }
    let hot = log.hot("per-key");
    assert_eq!((hot[0].decisions, hot[0].rejections), (14, 2));
}

#[test]
fn a_key_taking_an_evicted_hot_keys_place_takes_its_counts() {
    let log = DecisionLog::start(None, "n", metrics().clone()).unwrap();
    // Every place taken, each key rejected twice; a new key then takes the
    // place of one of them with its counts (Space-Saving: upper bounds).
    for i in 0..HOT_KEYS {
        for _ in 0..2 {
            log.accept(batch(vec![record(&format!("k{i}"), Outcome::Limited, 1.0)]));
        }
    }
    log.accept(batch(vec![record("new", Outcome::Limited, 1.0)]));
    let hot = log.hot("per-key");
    assert_eq!(hot[0].key_id, "new");
    assert_eq!((hot[0].decisions, hot[0].rejections), (3, 3));
}

#[test]
fn a_record_claiming_no_sample_rate_counts_once() {
    let log = DecisionLog::start(None, "n", metrics().clone()).unwrap();
    log.accept(batch(vec![record("k", Outcome::Allowed, 0.0)]));
    let hot = log.hot("per-key");
    assert_eq!((hot[0].decisions, hot[0].rejections), (1, 0));
}

#[test]
fn a_written_line_reads_back_as_the_same_line() {
    let record = DecisionRecord {
        key: Some("clear \"key\"".into()),
        ..record("ab", Outcome::Limited, 1.0)
    };
    let written = serde_json::to_string(&LineRef {
        node: "n",
        filter: "f",
        record: &record,
    })
    .unwrap();
    let line: LogLine = serde_json::from_str(&written).unwrap();
    assert_eq!(line, LogLine::new(record, "n", "f"));
    assert_eq!(serde_json::to_string(&line).unwrap(), written);
    assert!(
        written.starts_with(r#"{"time":"2026-12-01T14:02:03.123Z","node":"n","filter":"f","#),
        "{written}"
    );
}

/// A fresh directory for one test's log files.
fn log_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn files(path: &std::path::Path, max_bytes: u64, files: u32) -> Target {
    Target::Files {
        path: path.to_path_buf(),
        max_bytes,
        files,
    }
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn log_files_are_their_owners_only_whatever_the_umask() {
    let dir = log_dir();
    let path = dir.path().join("decisions.log");
    let m = metrics();
    let log = DecisionLog::start(Some(files(&path, 4_096, 3)), "n", m.clone()).unwrap();
    assert_eq!(mode(&path), 0o600);
    for i in 0..100 {
        log.accept(batch(vec![record(
            &format!("{i:032x}"),
            Outcome::Limited,
            1.0,
        )]));
    }
    written(&m, 100.0);
    for name in ["decisions.log", "decisions.log.1", "decisions.log.2"] {
        assert_eq!(mode(&dir.path().join(name)), 0o600, "{name}");
    }
    // A file an earlier run left readable by others is restricted on open.
    let old = dir.path().join("old.log");
    std::fs::write(&old, "{}\n").unwrap();
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    DecisionLog::start(Some(files(&old, 4_096, 3)), "n", metrics().clone()).unwrap();
    assert_eq!(mode(&old), 0o600);
}

#[test]
fn a_link_at_the_log_path_is_refused_never_followed() {
    let dir = log_dir();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let path = dir.path().join("decisions.log");
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    let e = DecisionLog::start(Some(files(&path, 4_096, 3)), "n", metrics().clone())
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .ends_with("decisions.log: a symbolic link; the decision log does not follow links"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // A link to nothing is not created through either.
    let dangling = dir.path().join("dangling.log");
    let nowhere = dir.path().join("nowhere");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    assert!(DecisionLog::start(Some(files(&dangling, 4_096, 3)), "n", metrics().clone()).is_err());
    assert!(!nowhere.exists());
}

#[test]
fn a_link_at_a_rotated_name_or_planted_at_the_path_is_refused_and_the_lines_counted() {
    // (files kept, the name linked, linked after the log is open).
    for (kept, name, later) in [
        (3, "decisions.log.1", false),
        (3, "decisions.log.2", false),
        (3, "decisions.log", true),
        // One file: rotation starts it again in place, where a truncating
        // open through a link would empty the file it points at.
        (1, "decisions.log", true),
    ] {
        let dir = log_dir();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let link = dir.path().join(name);
        let path = dir.path().join("decisions.log");
        if !later {
            std::os::unix::fs::symlink(&victim, &link).unwrap();
        }
        let m = metrics();
        let log = DecisionLog::start(Some(files(&path, 4_096, kept)), "n", m.clone()).unwrap();
        if later {
            std::fs::remove_file(&link).unwrap();
            std::os::unix::fs::symlink(&victim, &link).unwrap();
        }
        for i in 0..100 {
            log.accept(batch(vec![record(
                &format!("{i:032x}"),
                Outcome::Limited,
                1.0,
            )]));
        }
        // The lines that fit before the first rotation are written; every
        // later one is dropped and counted, the link left as it was.
        let mut dropped = None;
        for _ in 0..500 {
            let t = m.render().unwrap();
            let w = sample(&t, "meshlimit_decision_log_records_total", &[]).unwrap_or(0.0);
            dropped = sample(
                &t,
                "meshlimit_decision_log_dropped_total",
                &[("at", "agent")],
            );
            if w + dropped.unwrap_or(0.0) >= 100.0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(dropped.unwrap_or(0.0) > 50.0, "{name}: {dropped:?}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious\n",
            "{name}"
        );
        let kept_link = std::fs::symlink_metadata(&link).unwrap();
        assert!(kept_link.file_type().is_symlink(), "{name}");
    }
}

#[test]
fn a_line_holds_no_character_that_does_not_print() {
    let dir = log_dir();
    let path = dir.path().join("decisions.log");
    let m = metrics();
    let log = DecisionLog::start(Some(files(&path, 1 << 20, 2)), "n", m.clone()).unwrap();
    let sent = DecisionRecord {
        key: Some("k\u{2028}{\"forged\":1}\u{202e}x\u{85}".into()),
        request_id: Some("r\u{2029}\u{2066}\u{7f}".into()),
        ..record("ab", Outcome::Limited, 1.0)
    };
    log.accept(batch(vec![sent.clone()]));
    written(&m, 1.0);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        !text
            .trim_end_matches('\n')
            .chars()
            .any(meshlimit_core::printable::hidden),
        "{text}"
    );
    let line: LogLine = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(line.record, sent);
}

#[test]
fn a_request_id_is_marked_as_the_clients_word() {
    let with = LogLine::new(record("ab", Outcome::Limited, 1.0), "n", "f");
    let v: serde_json::Value = serde_json::to_value(&with).unwrap();
    assert_eq!(v["request_id_from"], "client");
    let without = LogLine::new(
        DecisionRecord {
            request_id: None,
            ..record("ab", Outcome::Limited, 1.0)
        },
        "n",
        "f",
    );
    let v: serde_json::Value = serde_json::to_value(&without).unwrap();
    assert!(v.get("request_id_from").is_none(), "{v}");
}

#[test]
fn a_log_file_removed_by_hand_is_started_again_at_rotation() {
    for kept in [1, 3] {
        let dir = log_dir();
        let path = dir.path().join("decisions.log");
        let m = metrics();
        let log = DecisionLog::start(Some(files(&path, 4_096, kept)), "n", m.clone()).unwrap();
        std::fs::remove_file(&path).unwrap();
        for i in 0..100 {
            log.accept(batch(vec![record(
                &format!("{i:032x}"),
                Outcome::Limited,
                1.0,
            )]));
        }
        written(&m, 100.0);
        assert_eq!(mode(&path), 0o600, "{kept} files");
    }
}
