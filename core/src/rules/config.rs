//! Serde types that mirror the rules file (see the README's rules reference). They
//! hold what people wrote; `compile` turns them into a validated [`super::RuleSet`].
//! Unknown fields are errors: a typo in a limit must not become "no limit".

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The whole rules file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    pub version: u32,
    #[serde(default)]
    pub defaults: DefaultsConfig,
    pub rules: Vec<RuleConfig>,
}

/// Fields that apply to every rule that omits them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Accuracy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

/// One rule as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    pub name: String,
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<MatchConfig>,
    pub key: Vec<KeyPartConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plans: Option<PlansConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Accuracy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

/// Conditions that must all hold for a rule to apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, HeaderMatchConfig>,
}

/// `{ present: true }` or `{ equals: value }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatchConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
}

/// A token bucket as written: `requests` per `per`, `burst` capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitConfig {
    pub requests: u32,
    pub per: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// Per-plan limits chosen by a header's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlansConfig {
    pub header: String,
    pub default: String,
    pub limits: BTreeMap<String, LimitConfig>,
}

/// One part of a rule's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPartConfig {
    Header(String),
    Method,
    ClientIp,
    Path,
    Route,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Enforce,
    Shadow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    Open,
    Closed,
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accuracy {
    Fast,
    Exact,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Region,
    Global,
}

// A key part is either a bare word (`method`) or a one-entry map (`header: x-api-key`).
// Written by hand so that a mistake gets a message naming the choices, not serde's
// "did not match any variant".
impl<'de> Deserialize<'de> for KeyPartConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        const EXPECTED: &str =
            "expected one of `method`, `client_ip`, `path`, `route` or `header: NAME`";
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            Map(BTreeMap<String, String>),
        }
        match Raw::deserialize(d).map_err(|_| D::Error::custom(EXPECTED))? {
            Raw::Word(w) => match w.as_str() {
                "method" => Ok(Self::Method),
                "client_ip" => Ok(Self::ClientIp),
                "path" => Ok(Self::Path),
                "route" => Ok(Self::Route),
                other => Err(D::Error::custom(format!(
                    "unknown key part `{other}`: {EXPECTED}"
                ))),
            },
            Raw::Map(m) => match (m.len(), m.get("header")) {
                (1, Some(name)) => Ok(Self::Header(name.clone())),
                _ => Err(D::Error::custom(EXPECTED)),
            },
        }
    }
}

impl Serialize for KeyPartConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Self::Header(name) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("header", name)?;
                m.end()
            }
            Self::Method => s.serialize_str("method"),
            Self::ClientIp => s.serialize_str("client_ip"),
            Self::Path => s.serialize_str("path"),
            Self::Route => s.serialize_str("route"),
        }
    }
}
