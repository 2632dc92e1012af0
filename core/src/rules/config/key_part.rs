//! A rule's key parts as written: a bare word (`method`, `client_ip`, `path`,
//! `route`, `authority`), or a one-entry map (`header: NAME`, `query: NAME`,
//! `claim: NAME`, `metadata: {filter, path}`), read and written by hand so a
//! mistake names the choices.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::MetadataPath;

/// One part of a rule's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPartConfig {
    Header(String),
    /// A query parameter, by its (decoded, case-sensitive) name.
    Query(String),
    Method,
    ClientIp,
    Path,
    Route,
    /// The request's host, as `match.authority` reads it.
    Authority,
    /// A value of Envoy's dynamic metadata (`metadata: {filter, path}`), or a
    /// verified JWT's claim (`claim: NAME`, the same as `metadata: {filter:
    /// envoy.filters.http.jwt_authn, path: [payload, NAME]}`; `claim: org.id`
    /// is `path: [payload, org, id]`, the claim `id` inside `org`).
    Metadata(MetadataPath),
}

/// `metadata: { filter: NAME, path: [FIELD, ...] }` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MetadataConfig {
    /// The filter whose dynamic metadata holds the value
    /// (`envoy.filters.http.jwt_authn`).
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 128)))]
    pub filter: String,
    /// The fields from the filter's namespace down to the value (`[payload, sub]`).
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = 8), inner(length(min = 1, max = 128)))
    )]
    pub path: Vec<String>,
}

impl From<MetadataConfig> for MetadataPath {
    fn from(m: MetadataConfig) -> Self {
        MetadataPath {
            filter: m.filter,
            path: m.path,
        }
    }
}

impl From<&MetadataPath> for MetadataConfig {
    fn from(m: &MetadataPath) -> Self {
        MetadataConfig {
            filter: m.filter.clone(),
            path: m.path.clone(),
        }
    }
}

// A key part is either a bare word (`method`) or a one-entry map (`header: x-api-key`,
// `query: api_key`).
// Written by hand so that a mistake gets a message naming the choices, not serde's
// "did not match any variant".
impl<'de> Deserialize<'de> for KeyPartConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        const EXPECTED: &str = "expected one of `method`, `client_ip`, `path`, `route`, `authority`, `header: NAME`, `query: NAME`, `claim: NAME` or `metadata: {filter: NAME, path: [FIELD, ...]}`";
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            Map(BTreeMap<String, String>),
            Metadata { metadata: MetadataConfig },
        }
        match Raw::deserialize(d).map_err(|_| D::Error::custom(EXPECTED))? {
            Raw::Word(w) => match w.as_str() {
                "method" => Ok(Self::Method),
                "client_ip" => Ok(Self::ClientIp),
                "path" => Ok(Self::Path),
                "route" => Ok(Self::Route),
                "authority" => Ok(Self::Authority),
                other => Err(D::Error::custom(format!(
                    "unknown key part `{other}`: {EXPECTED}"
                ))),
            },
            Raw::Map(m) => match m.iter().next() {
                Some((k, name)) if m.len() == 1 && k == "header" => Ok(Self::Header(name.clone())),
                Some((k, name)) if m.len() == 1 && k == "query" => Ok(Self::Query(name.clone())),
                Some((k, name)) if m.len() == 1 && k == "claim" => {
                    Ok(Self::Metadata(MetadataPath::claim(name)))
                }
                _ => Err(D::Error::custom(EXPECTED)),
            },
            Raw::Metadata { metadata } => Ok(Self::Metadata(metadata.into())),
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
            Self::Query(name) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("query", name)?;
                m.end()
            }
            Self::Metadata(path) => {
                let mut m = s.serialize_map(Some(1))?;
                match path.as_claim() {
                    Some(claim) => m.serialize_entry("claim", &claim)?,
                    None => m.serialize_entry("metadata", &MetadataConfig::from(path))?,
                }
                m.end()
            }
            Self::Method => s.serialize_str("method"),
            Self::ClientIp => s.serialize_str("client_ip"),
            Self::Path => s.serialize_str("path"),
            Self::Route => s.serialize_str("route"),
            Self::Authority => s.serialize_str("authority"),
        }
    }
}

/// Written by hand, like its `Deserialize`: a bare word, `{header: NAME}`,
/// `{query: NAME}`, `{claim: NAME}` or `{metadata: {filter, path}}`.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for KeyPartConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KeyPartConfig".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "One part of a rule's key: `method`, `client_ip`, `path`, `route`, `authority`, `header: NAME`, `query: NAME`, `claim: NAME` (a verified JWT's claim) or `metadata: {filter, path}` (Envoy dynamic metadata).",
            "oneOf": [
                {"type": "string", "enum": ["method", "client_ip", "path", "route", "authority"]},
                {
                    "type": "object",
                    "properties": {"header": {"type": "string", "pattern": "^[A-Za-z0-9_-]+$"}},
                    "required": ["header"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 128}},
                    "required": ["query"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {"claim": {"type": "string", "minLength": 1, "maxLength": 128, "description": "A verified JWT's claim; `org.id` is the claim `id` inside the claim `org`. A claim whose own name holds a `.` is `metadata: {filter: envoy.filters.http.jwt_authn, path: [payload, NAME]}`."}},
                    "required": ["claim"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {"metadata": {
                        "type": "object",
                        "properties": {
                            "filter": {"type": "string", "minLength": 1, "maxLength": 128},
                            "path": {"type": "array", "minItems": 1, "maxItems": 8,
                                     "items": {"type": "string", "minLength": 1, "maxLength": 128}}
                        },
                        "required": ["filter", "path"],
                        "additionalProperties": false
                    }},
                    "required": ["metadata"],
                    "additionalProperties": false
                }
            ]
        })
    }
}
