//! The control state in Redis (`crate::control`): each record sealed
//! or MAC'd under the deployment secret when written, checked when read, read
//! only within its size cap, and every change written with its audit entry in
//! one script.
//!
//! What a record that does not verify (or is over its cap) does, by kind:
//!
//! - the fleet override: none is in force. An override shadows or pins every
//!   rule of every agent; one nobody holding the secret set must not turn
//!   limiting off, so the rules file's modes apply;
//! - a trial's record (plan and clock): no trial is recorded. Its kept rules
//!   would replace the file's; without it, an agent starting the trial runs
//!   its own plan on its own clock and an agent joining one enforces the file
//!   as written (as when the store cannot be reached);
//! - a trial's hold or early end: ignored, the trial runs its recorded
//!   period. A forged hold would keep new limits in shadow for ever;
//! - the last-trial pointer and the versions served: none recorded, so
//!   `override end-trial|hold-trial|pin` refuse to guess (pin asks for
//!   `--rules-version`);
//! - an audit entry: shown as refused in the history, never as a change.

use meshlimit_core::rules::trial::TrialPlan;
use meshlimit_core::secret::ControlMac;

use super::{keys, script, RedisStore, StoreEvent};
use crate::control::{
    self, open, seal, AuditEntry, Record, Refusal, AUDIT_KEEP, MAX_PLAN_BYTES, MAX_VALUE_BYTES,
};
use crate::fleet::Override;
use crate::trial::{StoredTrial, TrialAction, TrialClock};
use crate::{Audited, Backend, StoreError};

/// A trial as the trial script answers it: the server's time, then (`None`:
/// a field over its cap) `start_ms`, `period_ms`, `ended_ms`, `held`,
/// `plan_mac`, `mac`, `control_mac`, `plan`.
#[derive(Debug, Clone)]
struct RawTrial {
    now_ms: u64,
    fields: Option<[Option<String>; 8]>,
}

/// The fields of a trial the MACs cover, as stored.
struct TrialFields<'a> {
    key: &'a str,
    start: &'a str,
    period: &'a str,
    plan_mac: &'a str,
}

impl RedisStore {
    fn mac(&self) -> &ControlMac {
        &self.shared.cfg.control
    }

    /// Counts and (when it starts) logs a refused record.
    fn refuse(&self, record: Record, why: Refusal, key: &str) {
        (self.shared.events)(StoreEvent::ControlRefused(record, why));
        let new = self
            .refusing
            .lock()
            .map(|mut r| r.insert(record.as_str()))
            .unwrap_or(true);
        if new {
            tracing::warn!(
                record = record.as_str(),
                reason = why.as_str(),
                key,
                "control state in the store ignored: it does not verify under the deployment secret or is over its size cap"
            );
        }
    }

    /// A read of `record` verified: a later refusal is logged again.
    fn verified(&self, record: Record) {
        if let Ok(mut r) = self.refusing.lock() {
            r.remove(record.as_str());
        }
    }

    /// `entry` sealed for the audit history.
    fn sealed_entry(&self, entry: &AuditEntry) -> Result<String, StoreError> {
        let json = serde_json::to_string(entry).map_err(|e| StoreError::Failed(e.to_string()))?;
        let sealed = seal(self.mac(), Record::Audit, keys::AUDIT, &json);
        control::check_write("an audit entry", &sealed, MAX_VALUE_BYTES)?;
        Ok(sealed)
    }

    /// A sealed control string's body, if within its cap and verified.
    async fn read_sealed(&self, record: Record, key: &str) -> Result<Option<String>, StoreError> {
        let get = redis::cmd("EVAL")
            .arg(script::CONTROL_GET_SCRIPT)
            .arg(1)
            .arg(key)
            .arg(MAX_VALUE_BYTES)
            .clone();
        let reply: Vec<String> = self.control(key, get).await?;
        match reply.as_slice() {
            [] => Ok(None),
            [ok, text] if ok == "ok" => match open(self.mac(), record, key, text) {
                Some(body) => {
                    self.verified(record);
                    Ok(Some(body.to_string()))
                }
                None => {
                    self.refuse(record, Refusal::Mac, key);
                    Ok(None)
                }
            },
            _ => {
                self.refuse(record, Refusal::Size, key);
                Ok(None)
            }
        }
    }

    pub(super) async fn read_override(&self) -> Result<Option<Override>, StoreError> {
        let key = keys::FLEET_OVERRIDE;
        let Some(json) = self.read_sealed(Record::Override, key).await? else {
            return Ok(None);
        };
        match serde_json::from_str(&json) {
            Ok(o) => Ok(Some(o)),
            Err(_) => {
                self.refuse(Record::Override, Refusal::Parse, key);
                Ok(None)
            }
        }
    }

    pub(super) async fn write_override(
        &self,
        state: Option<Override>,
        by: &str,
    ) -> Result<(), StoreError> {
        let key = keys::FLEET_OVERRIDE;
        let value = match &state {
            Some(o) => {
                let json =
                    serde_json::to_string(o).map_err(|e| StoreError::Failed(e.to_string()))?;
                seal(self.mac(), Record::Override, key, &json)
            }
            None => String::new(),
        };
        control::check_write("the override", &value, MAX_VALUE_BYTES)?;
        let entry = AuditEntry::now(by, control::override_change(state.as_ref()));
        let call = redis::cmd("EVAL")
            .arg(script::OVERRIDE_SET_SCRIPT)
            .arg(2)
            .arg(key)
            .arg(keys::AUDIT)
            .arg(value)
            .arg(self.sealed_entry(&entry)?)
            .arg(AUDIT_KEEP)
            .clone();
        self.control::<redis::Value>(key, call).await?;
        entry.log(self.name());
        Ok(())
    }

    /// One run of the trial script (`start`: its start arguments).
    async fn trial_call(
        &self,
        key: &str,
        with_plan: bool,
        start: Option<Vec<String>>,
    ) -> Result<RawTrial, StoreError> {
        let mut call = redis::cmd("EVAL");
        call.arg(script::TRIAL_SCRIPT)
            .arg(3)
            .arg(key)
            .arg(keys::LAST_TRIAL)
            .arg(keys::AUDIT)
            .arg(if with_plan { "1" } else { "0" })
            .arg(MAX_VALUE_BYTES)
            .arg(MAX_PLAN_BYTES);
        match start {
            Some(args) => call.arg(args),
            None => call.arg(""),
        };
        let reply: Vec<Option<String>> = self.control(key, call).await?;
        raw_trial(key, &reply)
    }

    pub(super) async fn read_trial(
        &self,
        version: &str,
        start: Option<(&TrialPlan, u64)>,
        with_plan: bool,
    ) -> Result<Option<StoredTrial>, StoreError> {
        let key = keys::trial(version);
        let mut raw = self.trial_call(&key, with_plan, None).await?;
        let none_recorded = matches!(&raw.fields, Some(f) if f[0].is_none());
        if let (Some((plan, period_ms)), true) = (start, none_recorded) {
            let (args, entry) = self.start_args(&key, version, plan, period_ms, raw.now_ms)?;
            let mac = args[4].clone();
            raw = self.trial_call(&key, with_plan, Some(args)).await?;
            // This agent's record stayed: its start is the one to audit.
            if matches!(&raw.fields, Some(f) if f[5].as_deref() == Some(mac.as_str())) {
                entry.log(self.name());
            }
        }
        Ok(self.open_trial(&key, raw, with_plan))
    }

    /// The trial script's start arguments (the record, its MACs, the pointer,
    /// its life and its sealed audit entry), by this agent at `now_ms`, and
    /// that entry.
    fn start_args(
        &self,
        key: &str,
        version: &str,
        plan: &TrialPlan,
        period_ms: u64,
        now_ms: u64,
    ) -> Result<(Vec<String>, AuditEntry), StoreError> {
        let json = serde_json::to_string(plan).map_err(|e| StoreError::Failed(e.to_string()))?;
        control::check_write("the trial's plan", &json, MAX_PLAN_BYTES)?;
        let (start, period) = (now_ms.to_string(), period_ms.to_string());
        let plan_mac = self.plan_mac(key, &json);
        let mac = self.trial_mac(&TrialFields {
            key,
            start: &start,
            period: &period,
            plan_mac: &plan_mac,
        });
        let pointer = seal(self.mac(), Record::LastTrial, keys::LAST_TRIAL, version);
        let entry = AuditEntry::now("agent", control::trial_started(version, plan, period_ms));
        let life = period_ms.saturating_add(crate::trial::KEEP_AFTER_MS);
        let args = vec![
            start,
            period,
            json,
            plan_mac,
            mac,
            pointer,
            life.to_string(),
            self.sealed_entry(&entry)?,
            AUDIT_KEEP.to_string(),
        ];
        Ok((args, entry))
    }

    fn plan_mac(&self, key: &str, plan: &str) -> String {
        self.mac()
            .sign(&[b"trial-plan", key.as_bytes(), plan.as_bytes()])
    }

    fn control_mac(&self, key: &str, start: &str, ended: &str, held: &str) -> String {
        self.mac().sign(&[
            b"trial-control",
            key.as_bytes(),
            start.as_bytes(),
            ended.as_bytes(),
            held.as_bytes(),
        ])
    }

    /// The trial in `raw`, if it verifies (see the module docs for what one
    /// that does not means).
    fn open_trial(&self, key: &str, raw: RawTrial, with_plan: bool) -> Option<StoredTrial> {
        let Some([start, period, ended, held, plan_mac, mac, control_mac, plan]) = raw.fields
        else {
            self.refuse(Record::Trial, Refusal::Size, key);
            return None;
        };
        let start = start?;
        let (period, plan_mac) = (period.unwrap_or_default(), plan_mac.unwrap_or_default());
        let fields = TrialFields {
            key,
            start: &start,
            period: &period,
            plan_mac: &plan_mac,
        };
        let record_ok = mac.is_some_and(|m| token_eq(&m, &self.trial_mac(&fields)));
        let plan_ok = !with_plan
            || plan
                .as_deref()
                .is_some_and(|p| token_eq(&plan_mac, &self.plan_mac(key, p)));
        if !(record_ok && plan_ok) {
            self.refuse(Record::Trial, Refusal::Mac, key);
            return None;
        }
        let parsed = (start.parse::<u64>(), period.parse::<u64>());
        let plan = plan.filter(|_| with_plan).map(|p| serde_json::from_str(&p));
        let (Ok(start_ms), Ok(period_ms)) = parsed else {
            self.refuse(Record::Trial, Refusal::Parse, key);
            return None;
        };
        let plan = match plan.transpose() {
            Ok(plan) => plan,
            Err(_) => {
                self.refuse(Record::Trial, Refusal::Parse, key);
                return None;
            }
        };
        self.verified(Record::Trial);
        let (ended_ms, held) = self.open_control(&fields, ended, held, control_mac);
        Some(StoredTrial {
            plan,
            clock: TrialClock {
                start_ms,
                period_ms,
                ended_ms,
                held,
            },
            now_ms: raw.now_ms,
        })
    }

    /// A trial's hold and early end, if they verify; else neither.
    fn open_control(
        &self,
        f: &TrialFields<'_>,
        ended: Option<String>,
        held: Option<String>,
        mac: Option<String>,
    ) -> (Option<u64>, bool) {
        if ended.is_none() && held.is_none() && mac.is_none() {
            return (None, false);
        }
        let (ended, held) = (ended.unwrap_or_default(), held.unwrap_or_default());
        let expected = self.control_mac(f.key, f.start, &ended, &held);
        if !mac.is_some_and(|m| token_eq(&m, &expected)) {
            self.refuse(Record::TrialControl, Refusal::Mac, f.key);
            return (None, false);
        }
        self.verified(Record::TrialControl);
        (ended.parse().ok(), !held.is_empty())
    }

    pub(super) async fn write_trial_control(
        &self,
        action: TrialAction,
        by: &str,
    ) -> Result<Option<String>, StoreError> {
        let Some(version) = self
            .read_sealed(Record::LastTrial, keys::LAST_TRIAL)
            .await?
        else {
            return Ok(None);
        };
        let key = keys::trial(&version);
        let raw = self.trial_call(&key, false, None).await?;
        let now_ms = raw.now_ms;
        let Some(trial) = self.open_trial(&key, raw, false) else {
            return Ok(None);
        };
        let start = trial.clock.start_ms.to_string();
        let (ended, held) = match action {
            TrialAction::End => (now_ms.to_string(), String::new()),
            TrialAction::Hold => (
                trial
                    .clock
                    .ended_ms
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
                "1".to_string(),
            ),
        };
        let mac = self.control_mac(&key, &start, &ended, &held);
        let entry = AuditEntry::now(by, control::trial_controlled(&version, action));
        let call = redis::cmd("EVAL")
            .arg(script::TRIAL_CONTROL_SCRIPT)
            .arg(2)
            .arg(&key)
            .arg(keys::AUDIT)
            .arg(&[start, ended, held, mac])
            .arg(match action {
                TrialAction::End => "end",
                TrialAction::Hold => "hold",
            })
            .arg(crate::trial::KEEP_AFTER_MS)
            .arg(self.sealed_entry(&entry)?)
            .arg(AUDIT_KEEP)
            .clone();
        let found: i64 = self.control(&key, call).await?;
        if found != 1 {
            return Ok(None);
        }
        entry.log(self.name());
        Ok(Some(version))
    }

    pub(super) async fn write_versions(
        &self,
        current: &str,
        previous: &str,
    ) -> Result<(), StoreError> {
        let key = keys::RULES_VERSIONS;
        control::check_write("a rules version", current, MAX_VALUE_BYTES)?;
        control::check_write("a rules version", previous, MAX_VALUE_BYTES)?;
        let mac = self.versions_mac(current, previous);
        let entry = AuditEntry::now("agent", control::versions_recorded(current, previous));
        let call = redis::cmd("EVAL")
            .arg(script::VERSIONS_SCRIPT)
            .arg(2)
            .arg(key)
            .arg(keys::AUDIT)
            .arg(&[current, previous, mac.as_str()])
            .arg(self.sealed_entry(&entry)?)
            .arg(AUDIT_KEEP)
            .clone();
        let recorded: i64 = self.control(key, call).await?;
        if recorded == 1 {
            entry.log(self.name());
        }
        Ok(())
    }

    fn versions_mac(&self, current: &str, previous: &str) -> String {
        self.mac().sign(&[
            b"versions",
            keys::RULES_VERSIONS.as_bytes(),
            current.as_bytes(),
            previous.as_bytes(),
        ])
    }

    pub(super) async fn read_previous_version(&self) -> Result<Option<String>, StoreError> {
        let key = keys::RULES_VERSIONS;
        let get = redis::cmd("EVAL")
            .arg(script::CONTROL_HGET_SCRIPT)
            .arg(1)
            .arg(key)
            .arg(MAX_VALUE_BYTES)
            .arg(&["current", "previous", "mac"])
            .clone();
        let reply: Vec<Option<String>> = self.control(key, get).await?;
        let [Some(ok), current, previous, mac] = reply.as_slice() else {
            self.refuse(Record::Versions, Refusal::Size, key);
            return Ok(None);
        };
        let (Some(current), Some(previous)) = (current, previous) else {
            return Ok(None);
        };
        let verifies = mac
            .as_deref()
            .is_some_and(|m| token_eq(m, &self.versions_mac(current, previous)));
        if ok != "ok" || !verifies {
            self.refuse(Record::Versions, Refusal::Mac, key);
            return Ok(None);
        }
        self.verified(Record::Versions);
        Ok(Some(previous.clone()))
    }

    pub(super) async fn read_history(&self, n: usize) -> Result<Vec<Audited>, StoreError> {
        let key = keys::AUDIT;
        let read = redis::cmd("EVAL")
            .arg(script::AUDIT_READ_SCRIPT)
            .arg(1)
            .arg(key)
            .arg(n.min(AUDIT_KEEP))
            .arg(MAX_VALUE_BYTES)
            .clone();
        let entries: Vec<String> = self.control(key, read).await?;
        Ok(entries
            .iter()
            .map(|text| {
                let why = if text.is_empty() {
                    Refusal::Size
                } else {
                    match open(self.mac(), Record::Audit, key, text) {
                        Some(json) => {
                            return serde_json::from_str(json).map_err(|_| Refusal::Parse)
                        }
                        None => Refusal::Mac,
                    }
                };
                self.refuse(Record::Audit, why, key);
                Err(why)
            })
            .collect())
    }

    fn trial_mac(&self, f: &TrialFields<'_>) -> String {
        self.mac().sign(&[
            b"trial",
            f.key.as_bytes(),
            f.start.as_bytes(),
            f.period.as_bytes(),
            f.plan_mac.as_bytes(),
        ])
    }
}

/// Compares two MACs in constant time.
fn token_eq(a: &str, b: &str) -> bool {
    meshlimit_core::secret::token_matches(a.as_bytes(), b)
}

/// Reads the trial script's reply.
fn raw_trial(key: &str, reply: &[Option<String>]) -> Result<RawTrial, StoreError> {
    let bad = || StoreError::Failed(format!("{key}: the trial script answered {reply:?}"));
    let now_ms = reply
        .first()
        .cloned()
        .flatten()
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(bad)?;
    let fields = match reply.get(1).cloned().flatten().as_deref() {
        Some("big") => None,
        Some("ok") => {
            let f = |i: usize| reply.get(i).cloned().flatten();
            Some([f(2), f(3), f(4), f(5), f(6), f(7), f(8), f(9)])
        }
        _ => return Err(bad()),
    };
    Ok(RawTrial { now_ms, fields })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use meshlimit_core::secret::{KeyIds, Secret};
    use meshlimit_tests::RedisServer;

    use super::*;
    use crate::redis::{BatchConfig, RedisConfig};

    /// The refusals the store reported, as (record, reason) labels.
    type Seen = Arc<Mutex<Vec<(&'static str, &'static str)>>>;

    fn store(redis: &RedisServer, seen: Seen) -> RedisStore {
        let secret = Secret::new(&[7; 32]).unwrap();
        let cfg = RedisConfig {
            nodes: vec![redis.addr()],
            cluster: false,
            connect: Default::default(),
            batch: BatchConfig {
                max_batch: 1,
                deadline: std::time::Duration::from_secs(2),
            },
            key_ids: KeyIds::placeholder(),
            control: secret.control_mac(),
        };
        RedisStore::new(cfg, Arc::new(|_, _, _| {})).with_events(Arc::new(move |e| {
            if let StoreEvent::ControlRefused(record, why) = e {
                seen.lock().unwrap().push((record.as_str(), why.as_str()));
            }
        }))
    }

    fn refused(seen: &Seen, record: &str, reason: &str) -> usize {
        let seen = seen.lock().unwrap();
        seen.iter().filter(|s| **s == (record, reason)).count()
    }

    #[tokio::test]
    async fn every_refused_read_is_counted_by_record_and_reason() {
        let redis = RedisServer::start();
        let seen = Seen::default();
        let store = store(&redis, seen.clone());
        let forged = r#"{"mode":"shadow","set_by":"mallory","at":1}"#;
        redis.cmd(&["SET", keys::FLEET_OVERRIDE, forged]);
        for _ in 0..2 {
            assert_eq!(store.read_override().await.unwrap(), None);
        }
        assert_eq!(refused(&seen, "override", "mac"), 2);
        let big = "x".repeat(MAX_VALUE_BYTES + 1);
        redis.cmd(&["HSET", keys::RULES_VERSIONS, "previous", &big]);
        assert_eq!(store.read_previous_version().await.unwrap(), None);
        assert_eq!(refused(&seen, "versions", "size"), 1);
        assert_eq!(seen.lock().unwrap().len(), 3);
    }
}
