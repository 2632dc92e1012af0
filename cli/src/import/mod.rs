//! `meshlimit import --from envoy-ratelimit|limitador FILE`: a peer's
//! rate limit configuration turned into a meshlimit rules file.
//!
//! Both peers limit Envoy *descriptors*: lists of `(key, value)` entries that
//! Envoy's route `rate_limits` actions (or Kuadrant's wasm-shim) build from the
//! request. meshlimit reads the request itself, so each descriptor key must be
//! said to stand for a request part (`--map KEY=TARGET`): a key without a value
//! becomes a key part, a key with a value a `match` condition. `remote_address`
//! is the client IP unless mapped otherwise; every other key needs a `--map`.
//!
//! What cannot be said in meshlimit's rules is refused, naming the file, the
//! entry and the field; what can only be said approximately is listed, as
//! comments at the head of the output and on stderr. The output is compiled
//! before it is written, so it always passes `check-rules`.
//!
//! The peer's text is data, never YAML: a comment or message carries it with
//! every character that does not print escaped ([`meshlimit_core::printable`]), a value
//! holding such a character is refused, and the written text is read back by
//! the agent's own parser and must give exactly the rules compiled, or
//! nothing is written.

mod envoy;
mod limitador;
mod mapping;
mod rule;

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::io::Write;

use meshlimit_core::rules::config::{LimitConfig, RuleConfig, RulesConfig};
use meshlimit_core::rules::{check_yaml_text, parse_rules, RuleSet, RulesError, SCHEMA_VERSION};

use crate::args::{ImportArgs, ImportFormat};
use crate::{CliError, Reported};
pub use mapping::MapError;
pub(crate) use mapping::{Condition, Mapping, Target};
use meshlimit_core::printable::{hidden, one_line};
use rule::{rule_of, Names};

/// The most limits read from one peer's file: envoyproxy/ratelimit's
/// descriptors at every depth, or Limitador's limits. Far above the largest
/// configurations seen (hundreds), and its rules file far below the rules
/// file cap (about 150 bytes a rule). The file itself is at most
/// [`meshlimit_core::rules::MAX_RULES_FILE_BYTES`], and its YAML nests at most
/// 64 deep (the reader's budget).
pub const MAX_LIMITS: usize = 10_000;

/// A unit of the importer's work over siblings, names and refusals: counted
/// in tests, which hold it linear in the input.
#[cfg(test)]
fn step() {
    tests::STEPS.with(|s| s.set(s.get() + 1));
}

#[cfg(not(test))]
fn step() {}

/// One entry a peer's limit requires of a request's descriptor.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) key: String,
    /// `None`: any value, one bucket per value.
    pub(crate) value: Option<String>,
    /// The value is a pattern (`*` matches any text: envoyproxy/ratelimit).
    pub(crate) pattern: bool,
    /// Every value the pattern matches shares one bucket.
    pub(crate) shared: bool,
    /// Where it is written (`descriptors[0]`, `limits[2]`) and in which field
    /// (`key`, `conditions[1]`), for errors.
    pub(crate) at: String,
    pub(crate) field: String,
}

/// A peer's limit, read: what it requires, its rate, and where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Draft {
    /// Where it is in the peer's file (`descriptors[0].descriptors[1]`, `limits[2]`).
    pub(crate) at: String,
    /// A readable name for the rule.
    pub(crate) name: String,
    pub(crate) entries: Vec<Entry>,
    pub(crate) limit: LimitConfig,
    pub(crate) shadow: bool,
}

/// A refusal: which file, which entry, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ImportError {
    pub(crate) file: String,
    pub(crate) at: String,
    pub(crate) field: String,
    pub(crate) message: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.at.is_empty(), self.field.is_empty()) {
            (true, true) => write!(f, "{}: {}", self.file, self.message),
            (true, false) => write!(f, "{}: field {}: {}", self.file, self.field, self.message),
            (false, true) => write!(f, "{}: {}: {}", self.file, self.at, self.message),
            (false, false) => write!(
                f,
                "{}: {}: field {}: {}",
                self.file, self.at, self.field, self.message
            ),
        }
    }
}

/// What an import found: the rules, the approximations made, the refusals.
#[derive(Debug, Default)]
pub(crate) struct Imported {
    pub rules: Vec<RuleConfig>,
    pub(crate) notes: BTreeSet<String>,
    pub(crate) errors: Vec<ImportError>,
}

/// Collects errors and notes while one file is read.
pub(crate) struct Report<'f> {
    pub(crate) file: &'f str,
    pub(crate) errors: Vec<ImportError>,
    /// The errors recorded, to refuse each once without a scan of `errors`.
    seen: HashSet<ImportError>,
    pub(crate) notes: BTreeSet<String>,
}

impl<'f> Report<'f> {
    fn new(file: &'f str) -> Self {
        Self {
            file,
            errors: Vec::new(),
            seen: HashSet::new(),
            notes: BTreeSet::new(),
        }
    }

    /// Records a refusal, escaped to one printable line; the same one twice
    /// (a parent entry of two limits) once.
    pub(crate) fn refuse(&mut self, at: &str, field: &str, message: impl Into<String>) {
        let e = ImportError {
            file: one_line(self.file).into_owned(),
            at: one_line(at).into_owned(),
            field: one_line(field).into_owned(),
            message: one_line(&message.into()).into_owned(),
        };
        if self.seen.insert(e.clone()) {
            self.errors.push(e);
        }
    }

    /// Records an approximation, escaped to one printable line: it is written
    /// as a comment of the rules file.
    pub(crate) fn note(&mut self, text: impl Into<String>) {
        self.notes.insert(one_line(&text.into()).into_owned());
    }
}

/// Converts `text` (the peer's file, named `file` in messages).
pub(crate) fn convert(format: ImportFormat, file: &str, text: &str, mapping: &Mapping) -> Imported {
    let mut report = Report::new(file);
    if let Err(e) = check_yaml_text(file, text) {
        report.refuse(
            "",
            "",
            e.to_string().trim_start_matches(&format!("{file}: ")),
        );
        return finish(report, Vec::new());
    }
    let drafts = match format {
        ImportFormat::EnvoyRatelimit => envoy::read(text, &mut report),
        ImportFormat::Limitador => limitador::read(text, &mut report),
    };
    // Both peers count fixed windows: every rule is `algorithm: fixed_window`
    // (`rule_of`). envoyproxy/ratelimit aligns its windows to the clock, as
    // meshlimit does; Limitador starts a key's window at its first request.
    if !drafts.is_empty() && format == ImportFormat::Limitador {
        report.note(
            "Limitador starts a counter's window at its first request; meshlimit's \
             `fixed_window` windows are aligned to the clock (a `1m` window is a calendar \
             minute), so a window may end sooner than Limitador's would",
        );
    }
    let mut names = Names::default();
    let rules = drafts
        .iter()
        .filter_map(|d| rule_of(d, mapping, &mut names, &mut report))
        .collect();
    finish(report, rules)
}

fn finish(report: Report<'_>, rules: Vec<RuleConfig>) -> Imported {
    Imported {
        rules,
        notes: report.notes,
        errors: report.errors,
    }
}

/// The period text for `seconds`: the largest whole unit (`90s`, `2m`, `1h`, `7d`).
pub(crate) fn period(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Why converted rules are not written: each is a bug of the importer, caught
/// before the file exists.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("the converted rules do not compile: {0}")]
    Compile(RulesError),
    #[error("the converted rules cannot be written as YAML: {0}")]
    Yaml(#[from] serde_saphyr::ser::Error),
    #[error("the written rules do not read back: {0}")]
    Reread(RulesError),
    #[error("the written rules read back as other rules than those converted")]
    Differs,
    #[error("the written rules hold a character that does not print (U+{0:04X})")]
    Hidden(u32),
}

/// The rules file text: the approximations as comments, then the rules.
pub(crate) fn render(imported: &Imported, from: &str) -> Result<String, RenderError> {
    let config = rules_config(imported.rules.clone());
    // The output must be a valid rules file: compiled here, as the agent will.
    let compiled = RuleSet::compile(&config).map_err(RenderError::Compile)?;
    let yaml = serde_saphyr::to_string(&config)?;
    let mut out = format!(
        "# Imported by `meshlimit import` from {}.\n",
        one_line(from)
    );
    if imported.notes.is_empty() {
        out.push_str("# No approximations.\n");
    } else {
        out.push_str("# Approximations (read each before enforcing these rules):\n");
        for note in &imported.notes {
            // Escaped when noted (`Report::note`).
            out.push_str(&format!("# - {note}\n"));
        }
    }
    out.push_str(&yaml.replace("defaults: {}\n", ""));
    reread(&out, &compiled)?;
    Ok(out)
}

/// Reads `text` back as the agent reads a rules file: it must hold no hidden
/// character and give exactly the rules of `compiled`.
fn reread(text: &str, compiled: &RuleSet) -> Result<(), RenderError> {
    if let Some(c) = text.chars().find(|c| *c != '\n' && hidden(*c)) {
        return Err(RenderError::Hidden(u32::from(c)));
    }
    let read = parse_rules("imported rules", text).map_err(RenderError::Reread)?;
    match (read.config(), compiled.config()) {
        (Some(read), Some(compiled)) if read == compiled => Ok(()),
        _ => Err(RenderError::Differs),
    }
}

/// A rules file as `import` writes it, and the configuration it was
/// compiled from.
#[derive(Debug)]
pub struct Written {
    pub text: String,
    pub config: RulesConfig,
}

/// What `import` writes for a peer's `text` with these `--map`s, without
/// files: `None` where it writes nothing (a bad `--map`, a refusal, no
/// limit), an error where the converted rules fail to be written (a bug).
/// The fuzz targets (`fuzz/`) call it.
pub fn written(
    format: ImportFormat,
    text: &str,
    maps: &[String],
) -> Result<Option<Written>, RenderError> {
    let Ok(mapping) = Mapping::from_options(maps) else {
        return Ok(None);
    };
    let imported = convert(format, "peer.yaml", text, &mapping);
    if !imported.errors.is_empty() || imported.rules.is_empty() {
        return Ok(None);
    }
    let text = render(&imported, &format!("{} `peer.yaml`", format.as_str()))?;
    let config = rules_config(imported.rules);
    Ok(Some(Written { text, config }))
}

/// A rules file of `rules` alone: this build's version, no defaults.
fn rules_config(rules: Vec<RuleConfig>) -> RulesConfig {
    RulesConfig {
        version: SCHEMA_VERSION,
        defaults: Default::default(),
        rules,
        changes: Default::default(),
    }
}

/// The command: the rules written, or [`Reported::Refused`] (every reason on
/// `err`); a bad `--map` is a [`MapError`].
pub fn import(
    args: &ImportArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), CliError> {
    let mapping = Mapping::from_options(&args.map)?;
    // The path as given for the importer (which escapes what it reports), and
    // as shown in this command's own messages.
    let path = args.file.display().to_string();
    let file = one_line(&path).into_owned();
    let text = match meshlimit_agent::rules_watch::read_rules_file(&args.file) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "{file}: cannot read: {e}");
            return Err(Reported::Refused.into());
        }
    };
    let imported = convert(args.from, &path, &text, &mapping);
    if !imported.errors.is_empty() {
        for e in &imported.errors {
            let _ = writeln!(err, "{e}");
        }
        let n = counted(imported.errors.len(), "refusal");
        let _ = writeln!(err, "{file}: not imported ({n}); nothing written");
        return Err(Reported::Refused.into());
    }
    if imported.rules.is_empty() {
        let _ = writeln!(err, "{file}: no limit to import");
        return Err(Reported::Refused.into());
    }
    let from = format!("{} `{}`", args.from.as_str(), path);
    let text = match render(&imported, &from) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "{file}: nothing written, a bug of the importer: {e}");
            return Err(Reported::Refused.into());
        }
    };
    for note in &imported.notes {
        let _ = writeln!(err, "{file}: approximation: {note}");
    }
    match &args.out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                let _ = writeln!(err, "{}: cannot write: {e}", path.display());
                return Err(Reported::Refused.into());
            }
        }
        None => {
            let _ = write!(out, "{text}");
        }
    }
    let n = counted(imported.rules.len(), "rule");
    let _ = writeln!(err, "{file}: {n} imported");
    Ok(())
}

/// `1 rule`, `2 rules`.
fn counted(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests;
