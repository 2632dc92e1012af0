use std::fs;
use std::os::unix::fs::symlink;

use super::*;
use crate::rules_watch::RulesMetrics;
use crate::shutdown;
use crate::test_support::wait_until;
use crate::test_support::Registered;
use meshlimit_core::rules::config::Mode;
use meshlimit_tests::sample;

const GOOD_V1: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/api-ten-per-second.yaml"
));
const GOOD_V2: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/api-twenty-per-second.yaml"
));
const BROKEN: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/invalid/period-in-words.yaml"
));

/// A ConfigMap-like volume: `..<n>/rules.yaml`, `..data -> ..<n>`,
/// `rules.yaml -> ..data/rules.yaml`, updated by renaming a new `..data` link over
/// the old one, as the kubelet does.
struct ConfigMapDir {
    dir: tempfile::TempDir,
    generation: u32,
}

impl ConfigMapDir {
    fn new(content: &str) -> Self {
        let mut cm = ConfigMapDir {
            dir: tempfile::tempdir().unwrap(),
            generation: 0,
        };
        cm.update(content);
        symlink("..data/rules.yaml", cm.path()).unwrap();
        cm
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("rules.yaml")
    }

    fn update(&mut self, content: &str) {
        let root = self.dir.path();
        let old = fs::read_link(root.join("..data")).ok();
        self.generation += 1;
        let version = format!("..{}", self.generation);
        fs::create_dir(root.join(&version)).unwrap();
        fs::write(root.join(&version).join("rules.yaml"), content).unwrap();
        symlink(&version, root.join("..data_tmp")).unwrap();
        fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        if let Some(old) = old {
            fs::remove_dir_all(root.join(old)).unwrap();
        }
    }
}

fn reloads(metrics: &Registered<RulesMetrics>, result: &str) -> f64 {
    let text = metrics.render().unwrap();
    sample(
        &text,
        "meshlimit_rules_reloads_total",
        &[("result", result)],
    )
    .unwrap_or(0.0)
}

fn version(rules: &CurrentRules) -> Option<String> {
    rules.get().map(|s| s.version().to_string())
}

#[tokio::test]
async fn follows_a_configmap_symlink_swap_and_refuses_a_broken_file() {
    let mut cm = ConfigMapDir::new(GOOD_V1);
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(cm.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(watcher.poll(), Reload::Unchanged);
    let v1 = version(&rules).unwrap();

    let (trigger, shutdown) = shutdown::channel();
    let task = tokio::spawn(watcher.run(Duration::from_millis(10), shutdown));

    cm.update(GOOD_V2);
    // The rules are swapped in before the reload is counted and its version
    // shown: wait for the last of the three.
    wait_until("the new version, shown", || {
        version(&rules).is_some_and(|v| {
            v != v1
                && sample(
                    &metrics.render().unwrap(),
                    "meshlimit_rules_version_info",
                    &[("version", &v)],
                ) == Some(1.0)
        })
    })
    .await;
    let v2 = version(&rules).unwrap();
    assert_eq!(
        rules
            .get()
            .unwrap()
            .rule("api")
            .unwrap()
            .limits
            .strictest()
            .requests(),
        20
    );
    assert_eq!(reloads(&metrics, "ok"), 2.0);
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_rules_version_info", &[("version", &v2)]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_rules_version_info", &[("version", &v1)]),
        None
    );

    cm.update(BROKEN);
    wait_until("the refusal", || reloads(&metrics, "error") >= 1.0).await;
    assert_eq!(
        version(&rules),
        Some(v2),
        "the last good set stays in force"
    );
    let error = rules.last_error().unwrap();
    assert!(
        error.contains("rules.yaml:3:54: rule api: field rules[0].limit.per:"),
        "{error}"
    );
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_rules_last_reload_success", &[]),
        Some(0.0)
    );

    trigger.trigger();
    task.await.unwrap();
    // Refused once, not at every poll.
    assert_eq!(reloads(&metrics, "error"), 1.0);
}

#[test]
fn a_broken_file_at_start_leaves_no_rules_until_a_good_one() {
    let mut cm = ConfigMapDir::new(BROKEN);
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(cm.path(), rules.clone(), metrics.clone());
    assert_eq!(watcher.poll(), Reload::Refused);
    assert!(rules.get().is_none());
    assert!(rules.last_error().is_some());
    cm.update(GOOD_V1);
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert!(rules.last_error().is_none());
}

#[test]
fn a_missing_file_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.yaml");
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(&path, rules.clone(), metrics.clone());
    assert_eq!(watcher.poll(), Reload::Unreadable);
    assert_eq!(watcher.poll(), Reload::Unreadable);
    assert_eq!(reloads(&metrics, "error"), 1.0);
    assert!(rules.last_error().unwrap().contains("cannot read"));
    fs::write(&path, GOOD_V1).unwrap();
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
}

#[test]
fn an_oversized_file_is_not_read_whole_and_the_last_good_rules_stay() {
    let mut cm = ConfigMapDir::new(GOOD_V1);
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(cm.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    let v1 = version(&rules);
    // Valid YAML all the way (a comment), one byte over the cap.
    let big = format!(
        "{GOOD_V2}{}",
        "#".repeat(MAX_RULES_FILE_BYTES + 1 - GOOD_V2.len())
    );
    cm.update(&big);
    assert_eq!(watcher.poll(), Reload::Unreadable);
    assert_eq!(version(&rules), v1);
    let error = rules.last_error().unwrap();
    assert!(
        error.contains("rules.yaml: cannot read: larger than 4194304 bytes"),
        "{error}"
    );
    assert_eq!(reloads(&metrics, "error"), 1.0);
    // At the cap exactly, the file is read.
    cm.update(&big[..MAX_RULES_FILE_BYTES]);
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
}

#[test]
fn a_tenfold_cut_is_refused_at_reload_until_approved_against_the_running_version() {
    let mut cm = ConfigMapDir::new(GOOD_V2);
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(cm.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    let running = version(&rules).unwrap();
    // 20/s → 2/s: ×0.1, beyond the default ×0.5.
    let cut = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/api-two-per-second.yaml"
    ));
    cm.update(cut);
    assert_eq!(watcher.poll(), Reload::Refused);
    assert_eq!(version(&rules).as_deref(), Some(running.as_str()));
    let why = rules.last_error().unwrap();
    assert!(why.contains("rule api") && why.contains("×0.10"), "{why}");
    assert_eq!(reloads(&metrics, "error"), 1.0);
    // The same cut, approved against the running version: applied, first on
    // trial (the old limit enforcing, the new one in shadow beside it).
    cm.update(&format!(
        "{cut}changes: {{approve: [{{rule: api, against: \"{running}\"}}]}}\n"
    ));
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    let limit = |rule: &str| {
        let set = rules.get().unwrap();
        let r = set.rule(rule).unwrap();
        (r.mode, r.limits.strictest().requests())
    };
    assert_eq!(limit("api"), (Mode::Enforce, 20));
    assert_eq!(limit("api.trial"), (Mode::Shadow, 2));
}

/// The api rule's mode and limit in the rules in force.
fn limit_of(rules: &CurrentRules, rule: &str) -> Option<(Mode, u32)> {
    let set = rules.get()?;
    let r = set.rule(rule)?;
    Some((r.mode, r.limits.strictest().requests()))
}

#[test]
fn a_change_is_held_to_the_guards_in_force_not_to_its_own() {
    let cut = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/api-two-per-second.yaml"
    ));
    let mut cm = ConfigMapDir::new(GOOD_V2);
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(cm.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    let running = version(&rules).unwrap();
    // The attack: a tenfold cut whose own file lets any cut through.
    cm.update(&format!("{cut}changes: {{max_tightening: 0.05}}\n"));
    assert_eq!(watcher.poll(), Reload::Refused);
    assert_eq!(limit_of(&rules, "api"), Some((Mode::Enforce, 20)));
    // Approved, and turning its own trial off: the trial in force still runs.
    cm.update(&format!(
        "{cut}changes: {{approve: [{{rule: api, against: \"{running}\"}}], shadow_first: 0s}}\n"
    ));
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(limit_of(&rules, "api"), Some((Mode::Enforce, 20)));
    assert_eq!(limit_of(&rules, "api.trial"), Some((Mode::Shadow, 2)));
    // With the trial off in the rules in force, an approved cut enforces at once.
    let mut cm = ConfigMapDir::new(&format!("{GOOD_V2}changes: {{shadow_first: 0s}}\n"));
    let rules = Arc::new(CurrentRules::empty());
    let mut watcher = RulesWatcher::new(cm.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    let running = version(&rules).unwrap();
    cm.update(&format!(
        "{cut}changes: {{approve: [{{rule: api, against: \"{running}\"}}]}}\n"
    ));
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(limit_of(&rules, "api"), Some((Mode::Enforce, 2)));
    assert_eq!(limit_of(&rules, "api.trial"), None);
}

#[test]
fn only_a_change_over_running_rules_goes_on_trial_and_its_end_enforces_it() {
    let added = "version: 1\nchanges: {shadow_first: 10m}\nrules:\n  - {name: api, key: [method], limit: {requests: 10, per: 1s}}\n  - {name: new, key: [path], limit: {requests: 1, per: 1s}}\n";
    // A first load applies as written, whatever `shadow_first`.
    let mut cm = ConfigMapDir::new(added);
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(cm.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(
        rules.get().unwrap().rule("new").unwrap().mode,
        Mode::Enforce
    );
    assert_eq!(rules.trial(), None);
    // Over running rules: the added rule in shadow for the trial (this
    // agent's own clock, with no store shared), shown in the metrics.
    cm.update(&added.replace("name: new", "name: newer"));
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(
        rules.get().unwrap().rule("newer").unwrap().mode,
        Mode::Shadow
    );
    let view = rules.trial().unwrap();
    assert_eq!(view.rules, ["newer"]);
    assert_eq!(view.clock.period_ms, 600_000);
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(
            &text,
            "meshlimit_rules_trial",
            &[("version", &view.version)]
        ),
        Some(1.0)
    );
    let end = sample(
        &text,
        "meshlimit_rules_trial_end_seconds",
        &[("version", &view.version)],
    )
    .unwrap();
    assert!(
        (end - view.clock.planned_end_ms() as f64 / 1_000.0).abs() < 1e-3,
        "{end}"
    );
    // Its end: enforcing as written.
    let deadline = rules.trial_deadline().unwrap();
    let file = rules.file_set().unwrap().version().to_string();
    assert_eq!(
        rules.end_trial_if_due(deadline).as_deref(),
        Some(file.as_str())
    );
    assert_eq!(
        rules.get().unwrap().rule("newer").unwrap().mode,
        Mode::Enforce
    );
}

static TEST_NOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn test_now() -> u64 {
    TEST_NOW.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn an_expired_exception_stops_applying_by_itself() {
    use std::sync::atomic::Ordering::SeqCst;
    // 2026-12-01T00:00:00Z = 1,796,083,200.
    TEST_NOW.store(1_796_083_200 - 10, SeqCst);
    let cm = ConfigMapDir::new(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/api-and-a-trial-expiring.yaml"
    )));
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher =
        RulesWatcher::new(cm.path(), rules.clone(), metrics.clone()).with_clock(test_now);
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert!(rules.get().unwrap().rule("trial").is_some());
    assert_eq!(watcher.poll(), Reload::Unchanged);
    // The file is untouched; the clock passes the expiry.
    TEST_NOW.store(1_796_083_200, SeqCst);
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    let set = rules.get().unwrap();
    assert!(
        set.rule("trial").is_none(),
        "the expired rule still applies"
    );
    assert!(set.rule("api").is_some());
    assert_eq!(watcher.poll(), Reload::Unchanged);
}

#[test]
fn a_directory_merges_one_file_per_team_and_a_broken_file_holds_back_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    let team = |rule: &str, requests: u32| {
        format!(
            "version: 1\ndefaults: {{mode: shadow}}\nrules:\n  - {{name: {rule}, key: [method], limit: {{requests: {requests}, per: 1s}}}}\n"
        )
    };
    write("search.yaml", &team("search", 10));
    write("checkout.yaml", &team("checkout", 20));
    write("..data", "not a rules file: the ConfigMap's own");
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(dir.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    let limit_of = |name: &str| {
        rules
            .get()
            .unwrap()
            .rule(name)
            .map(|r| r.limits.strictest().requests())
    };
    assert_eq!(
        (limit_of("search"), limit_of("checkout")),
        (Some(10), Some(20))
    );
    // Each file's defaults stay with its own rules.
    assert_eq!(
        rules.get().unwrap().rule("search").unwrap().mode,
        meshlimit_core::rules::Mode::Shadow
    );
    assert_eq!(watcher.poll(), Reload::Unchanged);
    // Checkout breaks its file while search raises its limit: search's change
    // applies, checkout keeps its last good version, and the break is reported.
    write(
        "checkout.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/invalid/checkout-period-in-words.yaml"
        )),
    );
    write("search.yaml", &team("search", 15));
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(
        (limit_of("search"), limit_of("checkout")),
        (Some(15), Some(20))
    );
    assert!(
        rules.last_error().unwrap().contains("checkout.yaml"),
        "{:?}",
        rules.last_error()
    );
    assert_eq!(reloads(&metrics, "error"), 1.0);
    // A third file redefining `search` conflicts and is left out whole.
    write("zz-rogue.yaml", &team("search", 1));
    watcher.poll();
    assert_eq!(limit_of("search"), Some(15));
    let why = rules.last_error().unwrap();
    assert!(
        why.contains("zz-rogue.yaml") && why.contains("also defined in search.yaml"),
        "{why}"
    );
}

/// A team's file: one enforced rule, no trial, and `changes` as given.
fn team_file(rule: &str, requests: u32, changes: &str) -> String {
    format!(
        "version: 1\nchanges: {{shadow_first: 0s{changes}}}\nrules:\n  - {{name: {rule}, key: [method], limit: {{requests: {requests}, per: 1s}}}}\n"
    )
}

#[test]
fn a_file_that_sorts_first_cannot_take_another_teams_rule_name() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    write("search.yaml", &team_file("search", 10, ""));
    write("checkout.yaml", &team_file("checkout", 20, ""));
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(dir.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    // The attack: a file sorting before search.yaml redefines `search`.
    write("aa-rogue.yaml", &team_file("search", 15, ""));
    watcher.poll();
    assert_eq!(limit_of(&rules, "search"), Some((Mode::Enforce, 10)));
    assert_eq!(limit_of(&rules, "checkout"), Some((Mode::Enforce, 20)));
    let why = rules.last_error().unwrap();
    assert!(
        why.contains("aa-rogue.yaml") && why.contains("also defined in search.yaml"),
        "{why}"
    );
    // Once its owner lets the name go, the newcomer may take it.
    write("search.yaml", &team_file("search-v2", 10, ""));
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(limit_of(&rules, "search"), Some((Mode::Enforce, 15)));
    assert_eq!(limit_of(&rules, "search-v2"), Some((Mode::Enforce, 10)));
}

#[test]
fn each_file_guards_its_own_rules_with_its_own_approvals() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    // Team a lets any cut of its own rules through; team b keeps the default.
    write("a.yaml", &team_file("a", 100, ", max_tightening: 0.01"));
    write("b.yaml", &team_file("b", 100, ""));
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(dir.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    // b cut tenfold: held to b's guard, not a's looser one. b keeps its
    // version in force, and a's change of the same poll still applies.
    write("b.yaml", &team_file("b", 10, ""));
    write("a.yaml", &team_file("a", 150, ", max_tightening: 0.01"));
    watcher.poll();
    assert_eq!(limit_of(&rules, "b"), Some((Mode::Enforce, 100)));
    assert_eq!(limit_of(&rules, "a"), Some((Mode::Enforce, 150)));
    let why = rules.last_error().unwrap();
    assert!(why.contains("b.yaml") && why.contains("rule b"), "{why}");
    // An approval of b's cut in a's file does not count.
    let running = version(&rules).unwrap();
    let approve_b = format!(", approve: [{{rule: b, against: \"{running}\"}}]");
    write(
        "a.yaml",
        &team_file("a", 150, &format!(", max_tightening: 0.01{approve_b}")),
    );
    watcher.poll();
    assert_eq!(limit_of(&rules, "b"), Some((Mode::Enforce, 100)));
    assert_eq!(version(&rules).unwrap(), running);
    // b's own approval does; a's own loose guard lets a's cut through.
    write("a.yaml", &team_file("a", 2, ", max_tightening: 0.01"));
    write("b.yaml", &team_file("b", 10, &approve_b));
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(limit_of(&rules, "b"), Some((Mode::Enforce, 10)));
    assert_eq!(limit_of(&rules, "a"), Some((Mode::Enforce, 2)));
}

#[test]
fn the_watcher_and_the_set_in_force_share_one_copy_of_the_file() {
    let cm = ConfigMapDir::new(GOOD_V1);
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let mut watcher = RulesWatcher::new(cm.path(), rules.clone(), metrics.clone());
    assert!(matches!(watcher.poll(), Reload::Applied { .. }));
    assert_eq!(watcher.poll(), Reload::Unchanged);
    let kept = watcher.last_good.clone().unwrap();
    let served = rules.get().unwrap().shared_config().unwrap();
    assert!(Arc::ptr_eq(&kept, &served), "one RulesConfig, not two");
    let text = watcher.last_content.as_ref().unwrap();
    assert_eq!(
        text.capacity(),
        text.len(),
        "the read's spare capacity is not kept"
    );
}
