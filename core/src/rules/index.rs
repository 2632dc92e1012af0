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

use std::cmp::Ordering;
use std::ops::Range;

use super::{PathMatch, Rule};

/// Rule positions (in the set's strictest-first order) grouped by path condition.
///
/// Laid out flat: every indexed path in one string and every list of positions
/// in one vector, entries naming their ranges. Building it is one sort and one
/// pass, with no allocation per rule, and dropping it frees four blocks: with
/// 20,000 rules both matter to a filter swapping sets between requests.
#[derive(Debug, Clone, Default)]
pub(super) struct RuleIndex {
    /// The indexed paths, one after another.
    paths: String,
    /// The entries' rule positions, one list after another.
    positions: Vec<usize>,
    /// `path: /x` rules, one entry per distinct normalised path, sorted by it.
    exact: Box<[ExactEntry]>,
    /// `path_prefix` rules, one entry per distinct normalised prefix, sorted by it.
    prefixes: Box<[PrefixEntry]>,
    /// Rules with no path condition (method- or header-only, or none): every
    /// request is a candidate for them.
    any: Box<[usize]>,
}

/// A range of [`RuleIndex::paths`] or [`RuleIndex::positions`].
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: u32,
    end: u32,
}

#[derive(Debug, Clone)]
struct ExactEntry {
    path: Span,
    rules: Span,
}

#[derive(Debug, Clone)]
struct PrefixEntry {
    path: Span,
    /// The longest other entry that is a prefix of this one.
    parent: Option<u32>,
    /// Rules written without a trailing slash: any path starting with `path`.
    prefix: Span,
    /// Rules written with a trailing slash: `path` and the paths below it.
    directory: Span,
}

/// How a rule's path condition is indexed; the order groups a path's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Exact,
    Prefix,
    Directory,
}

impl Span {
    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Counts fit in `u32`: a rules file is at most 4 MiB.
fn at(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A rule's path condition to index: its kind and the rule's position.
pub(super) type Item = (Kind, u32);

/// The path a rule's condition names (empty for none).
fn path_of(rule: &Rule) -> &str {
    match &rule.matcher.path {
        PathMatch::Any => "",
        PathMatch::Exact(p) | PathMatch::Prefix(p) | PathMatch::Directory(p) => p,
    }
}

impl RuleIndex {
    /// What to index: an item per rule with a path condition, and the rules
    /// without one. The items are then sorted by [`RuleIndex::order`] (a step
    /// at a time, by the builder) and laid out by [`RuleIndex::from_sorted`].
    pub(super) fn items(rules: &[Rule]) -> (Vec<Item>, Vec<usize>) {
        let mut any = Vec::new();
        let mut items = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            let kind = match &rule.matcher.path {
                PathMatch::Any => {
                    any.push(i);
                    continue;
                }
                PathMatch::Exact(_) => Kind::Exact,
                PathMatch::Prefix(_) => Kind::Prefix,
                PathMatch::Directory(_) => Kind::Directory,
            };
            items.push((kind, at(i)));
        }
        (items, any)
    }

    /// Exact paths first, then prefixes, each by path; within a path by kind
    /// (prefix rules before directory rules), then position.
    pub(super) fn order(rules: &[Rule], a: &Item, b: &Item) -> Ordering {
        let exact_first = |k: Kind| k != Kind::Exact;
        let path = |i: u32| rules.get(i as usize).map_or("", path_of);
        exact_first(a.0)
            .cmp(&exact_first(b.0))
            .then_with(|| path(a.1).cmp(path(b.1)))
            .then_with(|| a.0.cmp(&b.0))
            .then(a.1.cmp(&b.1))
    }

    /// The index from its items sorted by [`RuleIndex::order`]: one pass.
    pub(super) fn from_sorted(rules: &[Rule], items: &[Item], any: Vec<usize>) -> Self {
        let mut index = RuleIndex {
            positions: Vec::with_capacity(items.len()),
            ..RuleIndex::default()
        };
        let path = |i: u32| rules.get(i as usize).map_or("", path_of);
        let (mut exact, mut prefixes) = (Vec::new(), Vec::<PrefixEntry>::new());
        // In sorted order every prefix of an entry comes before it and stays on
        // the stack until an entry it is not a prefix of: the top is the parent.
        let mut stack: Vec<usize> = Vec::new();
        let mut rest = items;
        while let Some(&(kind, first)) = rest.first() {
            let text = path(first);
            let group = |rest: &mut &[Item], k: Kind, index: &mut RuleIndex| {
                let n = rest
                    .iter()
                    .take_while(|item| item.0 == k && path(item.1) == text)
                    .count();
                let (taken, left) = rest.split_at(n);
                *rest = left;
                let start = at(index.positions.len());
                index
                    .positions
                    .extend(taken.iter().map(|item| item.1 as usize));
                Span {
                    start,
                    end: at(index.positions.len()),
                }
            };
            let span = Span {
                start: at(index.paths.len()),
                end: at(index.paths.len() + text.len()),
            };
            index.paths.push_str(text);
            if kind == Kind::Exact {
                let rules = group(&mut rest, Kind::Exact, &mut index);
                exact.push(ExactEntry { path: span, rules });
                continue;
            }
            let prefix = group(&mut rest, Kind::Prefix, &mut index);
            let directory = group(&mut rest, Kind::Directory, &mut index);
            while let Some(&top) = stack.last() {
                let top_path = prefixes.get(top).map(|e| index.text(e.path));
                if top_path.is_some_and(|t| text.starts_with(t)) {
                    break;
                }
                stack.pop();
            }
            let parent = stack.last().map(|&p| at(p));
            stack.push(prefixes.len());
            prefixes.push(PrefixEntry {
                path: span,
                parent,
                prefix,
                directory,
            });
        }
        index.exact = exact.into();
        index.prefixes = prefixes.into();
        index.any = any.into();
        index
    }

    fn text(&self, span: Span) -> &str {
        self.paths.get(span.range()).unwrap_or_default()
    }

    fn rules(&self, span: Span) -> &[usize] {
        self.positions.get(span.range()).unwrap_or_default()
    }

    /// Positions of the rules whose path condition holds for `path` (a normalised
    /// path), in no particular order. Rules without a path condition are not
    /// included: they are [`RuleIndex::pathless`].
    pub(super) fn by_path(&self, path: &str, out: &mut Vec<usize>) {
        if let Ok(i) = self.exact.binary_search_by(|e| self.text(e.path).cmp(path)) {
            if let Some(e) = self.exact.get(i) {
                out.extend_from_slice(self.rules(e.rules));
            }
        }
        // Every entry that is a prefix of `path` is at most `path`, so it is a
        // prefix of the greatest entry at most `path` (anything between a prefix of
        // `path` and `path` starts with that prefix): that entry and its parents.
        let after = self
            .prefixes
            .partition_point(|e| self.text(e.path).cmp(path) != Ordering::Greater);
        let Some(mut at) = after.checked_sub(1) else {
            return;
        };
        let Some(nearest) = self.prefixes.get(at) else {
            return;
        };
        // The entry's parents are its prefixes: those no longer than what it shares
        // with `path` are prefixes of `path`.
        let shared = common_prefix_len(self.text(nearest.path).as_bytes(), path.as_bytes());
        loop {
            let Some(entry) = self.prefixes.get(at) else {
                return;
            };
            let entry_path = self.text(entry.path);
            if entry_path.len() <= shared {
                out.extend_from_slice(self.rules(entry.prefix));
                let directory = self.rules(entry.directory);
                if !directory.is_empty() && in_directory(entry_path, path) {
                    out.extend_from_slice(directory);
                }
            }
            match entry.parent {
                Some(p) => at = p as usize,
                None => return,
            }
        }
    }

    /// Whether some rule has a path condition (else every rule is in
    /// [`RuleIndex::pathless`]).
    pub(super) fn has_paths(&self) -> bool {
        !self.exact.is_empty() || !self.prefixes.is_empty()
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
