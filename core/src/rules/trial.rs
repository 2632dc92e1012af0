//! A rules change on trial. When the agent installs a new version over a
//! running one, the rules that would start refusing requests run in shadow for
//! `changes.shadow_first` before they enforce: a new enforcing rule (or one that
//! was in shadow) is served in shadow; an enforced rule whose limit tightened
//! keeps enforcing the rule as it ran, and its new version runs beside it in
//! shadow under the name `NAME.trial` (a name no rules file may use), so its
//! would-be rejections are counted as that rule's `shadow_limited`. Loosened,
//! unchanged and removed rules apply at once.
//!
//! [`plan`] says what is on trial (computed once, by the first agent, and
//! shared through the store so every agent serves the same set); [`compose`]
//! builds the set served while the trial lasts.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::config::{Mode, RuleConfig, RulesConfig};
use super::review::{limit_pairs, ratio};
use super::RuleSet;

/// What a tightened rule's trial copy is called after: `NAME.trial`. Rules
/// files may not name a rule so ([`reserved_name`]).
pub const TRIAL_SUFFIX: &str = ".trial";

/// The name of `rule`'s new version while it is on trial beside the old one.
pub fn trial_name(rule: &str) -> String {
    format!("{rule}{TRIAL_SUFFIX}")
}

/// Why a rules file may not name a rule `name`.
#[cfg(feature = "yaml")]
pub(super) fn reserved_name(name: &str) -> String {
    format!(
        "`{name}`: names ending in `{TRIAL_SUFFIX}` are reserved: the agent gives one to a \
         tightened rule's new limit while it runs in shadow beside the old one (changes.shadow_first)"
    )
}

/// What a new rules version puts on trial against the running one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialPlan {
    /// The rules version on trial (the file's).
    pub version: String,
    /// The version it replaced (the set in force then).
    pub against: String,
    /// Rules of `version` that newly enforce (added, or in shadow before): served
    /// in shadow until the trial ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadowed: Vec<String>,
    /// Enforced rules whose limit tightened, as they ran (their file's defaults
    /// written in): they keep enforcing, and the new version runs beside each
    /// in shadow as `NAME.trial`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<RuleConfig>,
}

impl TrialPlan {
    /// Nothing to try: the new version applies at once.
    pub fn is_empty(&self) -> bool {
        self.shadowed.is_empty() && self.kept.is_empty()
    }

    /// The rules whose `shadow_limited` decisions are the trial's would-be
    /// rejections: the shadowed rules and each tightened rule's `NAME.trial`.
    pub fn trial_rules(&self) -> Vec<String> {
        self.shadowed
            .iter()
            .cloned()
            .chain(self.kept.iter().map(|r| trial_name(&r.name)))
            .collect()
    }
}

/// What installing `new` over `running` (the set in force, its trial copies
/// included) puts on trial.
pub fn plan(running: &RuleSet, new: &RuleSet) -> TrialPlan {
    let mut out = TrialPlan {
        version: new.version().to_string(),
        against: running.version().to_string(),
        shadowed: Vec::new(),
        kept: Vec::new(),
    };
    let running_config = running.config();
    for rule in new.rules().iter().filter(|r| r.mode == Mode::Enforce) {
        let Some(was) = running.rule(&rule.name).filter(|w| w.mode == Mode::Enforce) else {
            out.shadowed.push(rule.name.clone());
            continue;
        };
        let tightened = limit_pairs(was, rule)
            .iter()
            .any(|(_, before, after)| ratio(after, before) < 1.0);
        if !tightened {
            continue;
        }
        let as_ran = running_config.and_then(|c| {
            c.rules
                .iter()
                .find(|r| r.name == rule.name)
                .map(|r| r.clone().with_defaults(&c.defaults))
        });
        match as_ran {
            Some(r) => out.kept.push(r),
            // A set that kept no file cannot give the rule back: the new
            // version runs in shadow alone (never stricter than before).
            None => out.shadowed.push(rule.name.clone()),
        }
    }
    out
}

/// `new` (a file as written) with `plan` applied: the set served while the
/// trial lasts.
pub fn compose(new: &RulesConfig, plan: &TrialPlan) -> RulesConfig {
    let shadowed: HashSet<&str> = plan.shadowed.iter().map(String::as_str).collect();
    let kept: HashMap<&str, &RuleConfig> = plan.kept.iter().map(|r| (r.name.as_str(), r)).collect();
    let in_shadow = |r: &RuleConfig, name: String| RuleConfig {
        name,
        mode: Some(Mode::Shadow),
        ..r.clone()
    };
    let mut rules = Vec::with_capacity(new.rules.len() + plan.kept.len());
    for rule in &new.rules {
        if shadowed.contains(rule.name.as_str()) {
            rules.push(in_shadow(rule, rule.name.clone()));
        } else if let Some(old) = kept.get(rule.name.as_str()) {
            rules.push((*old).clone());
            rules.push(in_shadow(rule, trial_name(&rule.name)));
        } else {
            rules.push(rule.clone());
        }
    }
    RulesConfig {
        rules,
        ..new.clone()
    }
}

#[cfg(test)]
mod tests;
