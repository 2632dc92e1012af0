//! A rule set compiled one rule at a time ([`RuleSetBuilder`]), and finished in
//! bounded steps: ordering the rules strictest first, sorting their paths into
//! the index, sorting their names. [`RuleSet::compile`] runs it at once; the
//! filter runs it a slice at a time between requests.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use super::compile::{compile_rule, SCHEMA_VERSION};
use super::config::{ChangesConfig, DefaultsConfig, RuleConfig, RulesConfig};
use super::error::{RuleError, RulesError};
use super::index::{Item, RuleIndex};
use super::stepsort::StepSort;
use super::{KeyPart, Limits, Needs, PlanSource, Rule, RuleSet};
use crate::fingerprint::fnv1a;

impl RuleSet {
    /// Validates and compiles a rules file. Returns every problem found, not just
    /// the first, so one round of edits fixes a file. The set keeps a copy of the
    /// normalised file, to serve it ([`RuleSet::config`]).
    pub fn compile(config: &RulesConfig) -> Result<RuleSet, RulesError> {
        Self::compile_shared(Arc::new(config.clone()))
    }

    /// [`RuleSet::compile`] keeping `config` itself rather than a copy (the
    /// agent holds one file, not one per holder).
    pub fn compile_shared(config: Arc<RulesConfig>) -> Result<RuleSet, RulesError> {
        Self::compile_with(&config, &[]).finish(version_of(&config), Some(config))
    }

    /// [`RuleSet::compile`] for a host that only matches requests: no copy of
    /// the file is kept, about half the set's memory for large sets.
    pub fn compile_unserved(config: &RulesConfig) -> Result<RuleSet, RulesError> {
        Self::compile_with(config, &[]).finish(version_of(config), None)
    }

    /// [`RuleSet::compile_shared`], with each rule's place in the file (its
    /// position in `rules` and its line): every error about a rule carries them.
    #[cfg(feature = "yaml")]
    pub(crate) fn compile_at(
        config: RulesConfig,
        origins: &[(usize, Option<usize>)],
    ) -> Result<RuleSet, RulesError> {
        let builder = Self::compile_with(&config, origins);
        let version = version_of(&config);
        builder.finish(version, Some(Arc::new(config)))
    }

    /// Every rule of `config` added to a builder, each with its position in
    /// the file's `rules` and its line (by position in `config.rules`; the
    /// position itself and an unknown line when missing).
    fn compile_with(config: &RulesConfig, origins: &[(usize, Option<usize>)]) -> RuleSetBuilder {
        let mut builder = RuleSetBuilder::new(config);
        for (i, rule) in config.rules.iter().enumerate() {
            let (index, line) = origins.get(i).copied().unwrap_or((i, None));
            builder.add_at(rule, index, line);
        }
        builder
    }
}

/// The rules version: a content hash of the normalised rules, so every agent that
/// loads the same file announces the same version.
fn version_of(config: &RulesConfig) -> String {
    let canonical = serde_json::to_vec(config).unwrap_or_default();
    format!("{:016x}", fnv1a(&canonical))
}

/// A rule set compiled one rule at a time, so a host that must not stall (the
/// filter, compiling 20,000 rules between requests) can spread the work over
/// several turns of its loop. [`RuleSet::compile`] is this builder run at once.
#[derive(Debug)]
pub struct RuleSetBuilder {
    errors: Vec<RuleError>,
    defaults: DefaultsConfig,
    changes: ChangesConfig,
    /// The names added and the line each was first defined at, to find a
    /// duplicate and say where the first one is.
    seen: HashMap<String, Option<usize>>,
    rules: Vec<Rule>,
    added: usize,
    /// How far finishing the set has come (see [`RuleSetBuilder::finish_part`]).
    stage: Stage,
    needs: Needs,
    index: Option<RuleIndex>,
    by_name: Option<Box<[usize]>>,
}

/// Finishing a set: each stage a sequence of bounded steps.
#[derive(Debug)]
enum Stage {
    /// Rules still arriving.
    Adding,
    /// Putting the rules strictest first (unless they came so).
    Ordering(StepSort<u32>),
    /// Sorting the path conditions for the index.
    Indexing(StepSort<Item>, Vec<usize>),
    /// Sorting the names.
    Naming(StepSort<u32>),
    Done,
}

impl RuleSetBuilder {
    /// Starts a set with the file's settings (`head.rules` is not read: rules
    /// come through [`RuleSetBuilder::add`]).
    pub fn new(head: &RulesConfig) -> Self {
        let mut errors = Vec::new();
        if head.version != SCHEMA_VERSION {
            errors.push(RuleError::new(
                None,
                "version",
                format!(
                    "unsupported schema version {}; this agent reads version {SCHEMA_VERSION}",
                    head.version
                ),
            ));
        }
        let max = head.changes.max_tightening;
        if !(max.is_finite() && (0.0..=1.0).contains(&max)) {
            errors.push(RuleError::new(
                None,
                "changes.max_tightening",
                format!("{max} is not a factor from 0 to 1 (0.5: a limit may be halved without approval)"),
            ));
        }
        if let Some(rate) = head.defaults.log_sample {
            if !(rate.is_finite() && (0.0..=1.0).contains(&rate)) {
                errors.push(RuleError::new(
                    None,
                    "defaults.log_sample",
                    format!("{rate} is not a share from 0 to 1 (0.01 keeps one allowed decision in a hundred)"),
                ));
            }
        }
        if let Err(e) = head.changes.shadow_first_ms() {
            errors.push(RuleError::new(
                None,
                "changes.shadow_first",
                format!("{e} (`0s` turns the trial in shadow off)"),
            ));
        }
        Self {
            errors,
            defaults: head.defaults.clone(),
            changes: head.changes.clone(),
            seen: HashMap::new(),
            rules: Vec::with_capacity(head.rules.len()),
            added: 0,
            stage: Stage::Adding,
            needs: Needs::default(),
            index: None,
            by_name: None,
        }
    }

    /// Compiles one rule (at `line` of its file, when known); its problems are
    /// kept for [`RuleSetBuilder::finish`].
    pub fn add(&mut self, rule: &RuleConfig, line: Option<usize>) {
        self.add_at(rule, self.added, line);
    }

    /// [`RuleSetBuilder::add`] for the rule at position `index` of its file's
    /// `rules`: each error's path (`rules[3].limit.per`) says so.
    pub(crate) fn add_at(&mut self, rule: &RuleConfig, index: usize, line: Option<usize>) {
        self.added += 1;
        let mut rule_errors = Vec::new();
        match self.seen.get(&rule.name) {
            Some(first) => rule_errors.push(RuleError::new(
                Some(&rule.name),
                "name",
                match first {
                    Some(at) => format!(
                        "duplicate rule name: `{}` is already the name of the rule at line {at}; names are unique in a file",
                        rule.name
                    ),
                    None => "duplicate rule name: names are unique in a file".to_string(),
                },
            )),
            None => {
                self.seen.insert(rule.name.clone(), line);
            }
        }
        match compile_rule(rule, &self.defaults) {
            Ok(r) => self.rules.push(r),
            Err(mut e) => rule_errors.append(&mut e),
        }
        self.errors.extend(rule_errors.into_iter().map(|mut e| {
            e.line = line;
            e.path = super::error::child(&format!("rules[{index}]"), &e.field);
            e
        }));
    }

    /// How many rules were added.
    pub fn len(&self) -> usize {
        self.added
    }

    /// Whether no rule was added.
    pub fn is_empty(&self) -> bool {
        self.added == 0
    }

    /// Does the next step of finishing the set (ordering the rules, sorting
    /// their paths into the index, sorting their names), each a fraction of a
    /// millisecond for 20,000 rules, so a host that must not stall does one a
    /// turn; true once none is left. [`RuleSetBuilder::finish`] does the rest.
    pub fn finish_part(&mut self) -> bool {
        if !self.errors.is_empty() || self.added == 0 {
            // Refused at `finish`: nothing to prepare.
            return true;
        }
        let rules = &mut self.rules;
        // Strictest first: the lowest rate per second, then the smallest burst.
        let strictness = |rules: &[Rule], a: &u32, b: &u32| {
            let limit = |i: &u32| rules.get(*i as usize).map(|r| r.limits.strictest());
            match (limit(a), limit(b)) {
                (Some(la), Some(lb)) => la
                    .rate_per_sec()
                    .total_cmp(&lb.rate_per_sec())
                    .then(la.burst().cmp(&lb.burst())),
                _ => Ordering::Equal,
            }
        };
        let by_name = |rules: &[Rule], a: &u32, b: &u32| {
            let name = |i: &u32| rules.get(*i as usize).map(|r| r.name.as_str());
            name(a).cmp(&name(b))
        };
        let positions = |n: usize| {
            (0..n)
                .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                .collect()
        };
        self.stage = match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Adding => {
                // Lines come strictest first from the agent: one pass checks it.
                let order: Vec<u32> = positions(rules.len());
                if order.is_sorted_by(|a, b| strictness(rules, a, b).is_le()) {
                    self.indexing()
                } else {
                    Stage::Ordering(StepSort::new(order))
                }
            }
            Stage::Ordering(mut sort) if !sort.done() => {
                sort.step(|a, b| strictness(rules, a, b));
                Stage::Ordering(sort)
            }
            Stage::Ordering(sort) => {
                let order = sort.finish(|a, b| strictness(rules, a, b));
                let mut slots: Vec<Option<Rule>> =
                    std::mem::take(rules).into_iter().map(Some).collect();
                *rules = order
                    .iter()
                    .filter_map(|&i| slots.get_mut(i as usize)?.take())
                    .collect();
                self.indexing()
            }
            Stage::Indexing(mut sort, any) if !sort.done() => {
                sort.step(|a, b| RuleIndex::order(rules, a, b));
                Stage::Indexing(sort, any)
            }
            Stage::Indexing(sort, any) => {
                let items = sort.finish(|a, b| RuleIndex::order(rules, a, b));
                self.index = Some(RuleIndex::from_sorted(rules, &items, any));
                Stage::Naming(StepSort::new(positions(rules.len())))
            }
            Stage::Naming(mut sort) if !sort.done() => {
                sort.step(|a, b| by_name(rules, a, b));
                Stage::Naming(sort)
            }
            Stage::Naming(sort) => {
                let order = sort.finish(|a, b| by_name(rules, a, b));
                self.by_name = Some(order.into_iter().map(|i| i as usize).collect());
                // Every name is added by now: free the copies in this step too.
                self.seen = HashMap::new();
                Stage::Done
            }
            Stage::Done => Stage::Done,
        };
        matches!(self.stage, Stage::Done)
    }

    /// The rules are in order: what uses them, and the index's first stage.
    fn indexing(&mut self) -> Stage {
        self.needs = needs(&self.rules);
        let (items, any) = RuleIndex::items(&self.rules);
        Stage::Indexing(StepSort::new(items), any)
    }

    /// The set, named `version`, keeping `config` to serve when given; or every
    /// problem found.
    pub fn finish(
        mut self,
        version: String,
        config: Option<Arc<RulesConfig>>,
    ) -> Result<RuleSet, RulesError> {
        if self.added == 0 {
            // Where a whole-file compile reports it: after the schema version.
            let at = self
                .errors
                .iter()
                .take_while(|e| e.field == "version")
                .count();
            self.errors.insert(
                at,
                RuleError::new(None, "rules", "at least one rule is required"),
            );
        }
        if !self.errors.is_empty() {
            return Err(RulesError {
                errors: self.errors,
            });
        }
        while !self.finish_part() {}
        Ok(RuleSet {
            rules: self.rules,
            version,
            config,
            changes: self.changes,
            needs: self.needs,
            index: self.index.unwrap_or_default(),
            by_name: self.by_name.unwrap_or_default(),
        })
    }
}

/// What `rules` read of a request beyond headers, path and method.
fn needs(rules: &[Rule]) -> Needs {
    let uses = |part: KeyPart| rules.iter().any(|r: &Rule| r.key.contains(&part));
    let mut metadata: Vec<String> = rules
        .iter()
        .flat_map(|r| {
            let plan = match &r.limits {
                Limits::Plans {
                    by: PlanSource::Metadata(m),
                    ..
                } => Some(&m.filter),
                _ => None,
            };
            r.key
                .iter()
                .filter_map(|p| match p {
                    KeyPart::Metadata(m) => Some(&m.filter),
                    _ => None,
                })
                .chain(plan)
        })
        .cloned()
        .collect();
    metadata.sort_unstable();
    metadata.dedup();
    Needs {
        client_ip: uses(KeyPart::ClientIp),
        route: uses(KeyPart::Route) || rules.iter().any(|r| r.matcher.route.is_some()),
        cluster: rules.iter().any(|r| r.matcher.cluster.is_some()),
        metadata,
    }
}
