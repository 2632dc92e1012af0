//! The rules compiled into an index by path, so a request looks only at the rules
//! that can match it: with 20,000 rules a request costs a few lookups, not 20,000
//! matcher calls.
//!
//! The index only narrows: it finds every rule whose path condition can hold for
//! a path (exact paths by hash; prefixes and directories by one binary search in a
//! sorted table and a walk up its parent links; rules without a path condition
//! kept in their own list), and the candidates are then checked, in the set's
//! strictest-first order, by the same matcher a linear scan runs. So which rules
//! apply, their order, and which request is an error, are the linear scan's by
//! construction (and a property test compares the two).

use std::collections::{BTreeMap, HashMap};

use super::{PathMatch, Rule};

/// Rule positions (in the set's strictest-first order) grouped by path condition.
#[derive(Debug, Clone, Default)]
pub(super) struct RuleIndex {
    /// `path: /x` rules, by their normalised path.
    exact: HashMap<Box<str>, Box<[usize]>>,
    /// `path_prefix` rules, one entry per distinct normalised prefix, sorted by it.
    prefixes: Box<[PrefixEntry]>,
    /// Rules with no path condition (method- or header-only, or none): every
    /// request is a candidate for them.
    any: Box<[usize]>,
}

#[derive(Debug, Clone)]
struct PrefixEntry {
    path: Box<str>,
    /// The longest other entry that is a prefix of this one.
    parent: Option<usize>,
    /// Rules written without a trailing slash: any path starting with `path`.
    prefix: Box<[usize]>,
    /// Rules written with a trailing slash: `path` and the paths below it.
    directory: Box<[usize]>,
}

impl RuleIndex {
    pub(super) fn build(rules: &[Rule]) -> Self {
        let mut exact: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut by_prefix: BTreeMap<&str, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
        let mut any = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            match &rule.matcher.path {
                PathMatch::Any => any.push(i),
                PathMatch::Exact(p) => exact.entry(p).or_default().push(i),
                PathMatch::Prefix(p) => by_prefix.entry(p).or_default().0.push(i),
                PathMatch::Directory(d) => by_prefix.entry(d).or_default().1.push(i),
            }
        }
        // In sorted order every prefix of an entry comes before it and stays on the
        // stack until an entry it is not a prefix of: the stack's top is the parent.
        let mut prefixes: Vec<PrefixEntry> = Vec::with_capacity(by_prefix.len());
        let mut stack: Vec<usize> = Vec::new();
        for (path, (prefix, directory)) in by_prefix {
            while let Some(&top) = stack.last() {
                if prefixes
                    .get(top)
                    .is_some_and(|e| path.starts_with(&*e.path))
                {
                    break;
                }
                stack.pop();
            }
            let parent = stack.last().copied();
            stack.push(prefixes.len());
            prefixes.push(PrefixEntry {
                path: path.into(),
                parent,
                prefix: prefix.into(),
                directory: directory.into(),
            });
        }
        Self {
            exact: exact
                .into_iter()
                .map(|(p, rs)| (p.into(), rs.into()))
                .collect(),
            prefixes: prefixes.into(),
            any: any.into(),
        }
    }

    /// Positions of the rules whose path condition holds for `path` (a normalised
    /// path), in no particular order. Rules without a path condition are not
    /// included: they are [`RuleIndex::pathless`].
    pub(super) fn by_path(&self, path: &str, out: &mut Vec<usize>) {
        if let Some(rules) = self.exact.get(path) {
            out.extend_from_slice(rules);
        }
        // Every entry that is a prefix of `path` is at most `path`, so it is a
        // prefix of the greatest entry at most `path` (anything between a prefix of
        // `path` and `path` starts with that prefix): that entry and its parents.
        let after = self.prefixes.partition_point(|e| &*e.path <= path);
        let Some(mut at) = after.checked_sub(1) else {
            return;
        };
        let Some(nearest) = self.prefixes.get(at) else {
            return;
        };
        // The entry's parents are its prefixes: those no longer than what it shares
        // with `path` are prefixes of `path`.
        let shared = common_prefix_len(nearest.path.as_bytes(), path.as_bytes());
        loop {
            let Some(entry) = self.prefixes.get(at) else {
                return;
            };
            if entry.path.len() <= shared {
                out.extend_from_slice(&entry.prefix);
                if !entry.directory.is_empty() && in_directory(&entry.path, path) {
                    out.extend_from_slice(&entry.directory);
                }
            }
            match entry.parent {
                Some(p) => at = p,
                None => return,
            }
        }
    }

    /// Positions of the rules without a path condition, ascending.
    pub(super) fn pathless(&self) -> &[usize] {
        &self.any
    }
}

/// Whether `path`, which starts with `dir`, is `dir` or below it (the matcher's
/// own test, repeated here so the index hands over no needless candidates).
fn in_directory(dir: &str, path: &str) -> bool {
    path.len() == dir.len() || dir.ends_with('/') || path.as_bytes().get(dir.len()) == Some(&b'/')
}

fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
