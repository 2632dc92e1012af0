//! Control state in the store: the fleet override, rules trials, the versions
//! served, and the audit history of their changes. Every agent obeys it, so
//! the shared store guards it three ways:
//!
//! - a MAC under the deployment secret ([`meshlimit_core::secret::ControlMac`])
//!   on every record, checked on every read: write access to Redis alone
//!   cannot forge one. A record that does not verify is ignored (what that
//!   means for each kind is said where it is read), counted in
//!   `meshlimit_control_refused_total` and logged, by its Redis key (control
//!   keys hold no customer data);
//! - a size cap on every value read back, checked in Redis before the value is
//!   sent ([`MAX_VALUE_BYTES`], [`MAX_PLAN_BYTES`]): a huge value is refused
//!   and counted without reaching the agent's memory. Writes over the caps are
//!   refused too, so no agent writes what the others would refuse;
//! - an audit history ([`AuditEntry`]): every change appends who made it and
//!   what it was, in the same atomic step as the change, and is logged. A
//!   clear keeps the history; it holds the last [`AUDIT_KEEP`] changes.

use meshlimit_core::secret::ControlMac;
use serde::{Deserialize, Serialize};

use super::StoreError;

/// The most bytes of a control value other than a trial's plan: an override
/// (its `set_by` included), a version, a trial's clock field, an audit entry.
pub const MAX_VALUE_BYTES: usize = 4 * 1024;

/// The most bytes of a trial's plan (its kept rules, JSON): the largest
/// rules file's worth, written out in full.
pub const MAX_PLAN_BYTES: usize = 4 * meshlimit_core::rules::MAX_RULES_FILE_BYTES;

/// Audit entries the store keeps (older ones are dropped): at most
/// [`MAX_VALUE_BYTES`] each, so the history stays under 4 MiB.
pub const AUDIT_KEEP: usize = 1_000;

/// Milliseconds of Unix time: when a change is made or a trial is ended here.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One change to control state, as the audit history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When, Unix ms of the writer's clock.
    pub at_ms: u64,
    /// Who: the operator's declared name (`--reason`, else `$USER`), or
    /// `agent` for what an agent records (a trial's start, the versions).
    pub by: String,
    /// What changed, e.g. `override shadow`, `trial 0123456789abcdef held`.
    pub what: String,
}

impl AuditEntry {
    /// An entry of `what` by `by`, now.
    pub(crate) fn now(by: &str, what: String) -> AuditEntry {
        AuditEntry {
            at_ms: crate::control::now_ms(),
            by: by.to_string(),
            what,
        }
    }

    /// Logs the change (every backend, every change).
    pub(crate) fn log(&self, store: &str) {
        tracing::info!(
            store,
            by = %self.by,
            what = %self.what,
            at_ms = self.at_ms,
            "control state changed"
        );
    }
}

/// The kinds of control record, for the metric's `record` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    Override,
    /// A trial's plan and clock.
    Trial,
    /// A trial's hold or early end.
    TrialControl,
    /// The pointer to the trial started last.
    LastTrial,
    Versions,
    Audit,
}

impl Record {
    /// Every kind, for the metric's series.
    pub const ALL: [Record; 6] = [
        Record::Override,
        Record::Trial,
        Record::TrialControl,
        Record::LastTrial,
        Record::Versions,
        Record::Audit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Record::Override => "override",
            Record::Trial => "trial",
            Record::TrialControl => "trial_control",
            Record::LastTrial => "last_trial",
            Record::Versions => "versions",
            Record::Audit => "audit",
        }
    }
}

/// Why a record read back was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its MAC is missing or does not verify.
    Mac,
    /// Larger than its cap.
    Size,
    /// It verifies but does not parse (written by an incompatible version).
    Parse,
}

impl Refusal {
    /// Every reason, for the metric's series.
    pub const ALL: [Refusal; 3] = [Refusal::Mac, Refusal::Size, Refusal::Parse];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Mac => "mac",
            Refusal::Size => "size",
            Refusal::Parse => "parse",
        }
    }
}

/// Refuses to write `value` of `what` over `cap` bytes.
pub(crate) fn check_write(what: &str, value: &str, cap: usize) -> Result<(), StoreError> {
    if value.len() > cap {
        return Err(StoreError::Failed(format!(
            "{what} is {} bytes, over the store's cap of {cap}",
            value.len()
        )));
    }
    Ok(())
}

/// The audit text of an override set (`None`: cleared).
pub(crate) fn override_change(state: Option<&crate::fleet::Override>) -> String {
    match state {
        Some(o) => match &o.version {
            Some(v) => format!("override {} {v}", o.mode.as_str()),
            None => format!("override {}", o.mode.as_str()),
        },
        None => "override clear".into(),
    }
}

/// The audit text of a trial's start.
pub(crate) fn trial_started(
    version: &str,
    plan: &meshlimit_core::rules::trial::TrialPlan,
    period_ms: u64,
) -> String {
    format!(
        "trial {version} started over {}: {period_ms} ms, shadowed [{}], kept [{}]",
        plan.against,
        plan.shadowed.join(","),
        plan.kept
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// The audit text of an operator's action on a trial.
pub(crate) fn trial_controlled(version: &str, action: crate::trial::TrialAction) -> String {
    match action {
        crate::trial::TrialAction::End => format!("trial {version} ended"),
        crate::trial::TrialAction::Hold => format!("trial {version} held"),
    }
}

/// The audit text of the versions recorded.
pub(crate) fn versions_recorded(current: &str, previous: &str) -> String {
    format!("rules versions: current {current}, previous {previous}")
}

/// `body` with its MAC in front (`<MAC> <body>`), bound to the kind of record
/// and its Redis key, so a sealed value moved to another key does not verify.
pub(crate) fn seal(mac: &ControlMac, record: Record, key: &str, body: &str) -> String {
    let tag = mac.sign(&[record.as_str().as_bytes(), key.as_bytes(), body.as_bytes()]);
    format!("{tag} {body}")
}

/// The body of a value [`seal`]ed under `mac` for `record` at `key`; `None`
/// when its MAC is missing or does not verify.
pub(crate) fn open<'a>(
    mac: &ControlMac,
    record: Record,
    key: &str,
    text: &'a str,
) -> Option<&'a str> {
    let (tag, body) = text.split_once(' ')?;
    mac.verifies(
        &[record.as_str().as_bytes(), key.as_bytes(), body.as_bytes()],
        tag,
    )
    .then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshlimit_core::secret::Secret;

    fn mac(s: &str) -> ControlMac {
        Secret::new(s.repeat(32).as_bytes()).unwrap().control_mac()
    }

    #[test]
    fn a_sealed_value_opens_only_under_its_secret_record_and_key() {
        let m = mac("a");
        let sealed = seal(&m, Record::Override, "k", r#"{"mode":"shadow"}"#);
        assert_eq!(
            open(&m, Record::Override, "k", &sealed),
            Some(r#"{"mode":"shadow"}"#)
        );
        assert_eq!(open(&mac("b"), Record::Override, "k", &sealed), None);
        assert_eq!(open(&m, Record::LastTrial, "k", &sealed), None);
        assert_eq!(open(&m, Record::Override, "j", &sealed), None);
        // A body changed, or none sealed at all (what an older agent wrote).
        let forged = sealed.replace("shadow", "pin");
        assert_eq!(open(&m, Record::Override, "k", &forged), None);
        assert_eq!(
            open(&m, Record::Override, "k", r#"{"mode":"shadow"}"#),
            None
        );
    }

    #[test]
    fn writes_over_the_cap_are_refused() {
        assert!(check_write("x", &"a".repeat(MAX_VALUE_BYTES), MAX_VALUE_BYTES).is_ok());
        assert!(check_write("x", &"a".repeat(MAX_VALUE_BYTES + 1), MAX_VALUE_BYTES).is_err());
    }
}
