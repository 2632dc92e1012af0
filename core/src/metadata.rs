//! Envoy dynamic metadata as a key part or plan: above all the claims of a JWT
//! that Envoy's `jwt_authn` filter verified (`payload_in_metadata: payload`
//! puts the token's payload under `filter_metadata["envoy.filters.http.jwt_authn"]
//! .payload`).
//!
//! The filter asks the proxy for the stream's whole dynamic metadata (property
//! `metadata`), which Envoy hands over as a serialized protobuf
//! `envoy.config.core.v3.Metadata`: each filter's namespace a
//! `google.protobuf.Struct`. Reading the protobuf here keeps each value's
//! type. Asking Envoy for a namespace or a leaf instead gives its own map
//! encoding, where a number is 8 raw bytes of an `f64`, which the 8-character
//! string `abcdefgh` cannot be told apart from.
//!
//! A value is read in one spelling so that no issuer's choice mints a fresh
//! bucket: a string as is, a number as its shortest decimal (`3`, `3.5`, `-0`
//! is `0`; the string `"3"` is the same key), `true`/`false`. A null, an object
//! or a list is no value: a rule keyed on it does not apply. The decoder never
//! panics and never recurses: malformed bytes are no value.

use std::borrow::Cow;

/// The namespace Envoy's `jwt_authn` filter writes its metadata in.
pub const JWT_AUTHN: &str = "envoy.filters.http.jwt_authn";
/// The field `claim: NAME` reads the payload from: `jwt_authn`'s
/// `payload_in_metadata: payload`.
pub const JWT_PAYLOAD_FIELD: &str = "payload";
/// The deepest path a rule may name (the filter's namespace not counted).
pub const MAX_DEPTH: usize = 8;
/// The longest name of a filter or a path field.
pub const MAX_NAME_LEN: usize = 128;

/// Why a metadata path names no value a filter can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataPathError {
    #[error("filter `{0}` is not a filter name: 1 to {MAX_NAME_LEN} printable characters")]
    FilterName(String),
    #[error("`path` must name 1 to {MAX_DEPTH} fields below the filter's namespace")]
    Depth,
    #[error(
        "field `{0}` is not a field name: 1 to {MAX_NAME_LEN} printable characters \
         (`claim: a.b` is the claim `b` inside `a`; no field is empty)"
    )]
    FieldName(String),
    /// A claim whose name holds `/` or `:` (a URL), read as nested `fields`.
    #[error(
        "`claim: {claim}` reads the nested fields {}; a claim named with dots (a URL) \
         is one field: write `metadata: {{filter: {JWT_AUTHN}, path: [{JWT_PAYLOAD_FIELD}, \"{claim}\"]}}`",
        nested(.fields)
    )]
    DottedClaim { claim: String, fields: Vec<String> },
}

/// Fields as `a` > `b`, outermost first.
fn nested(fields: &[String]) -> String {
    fields
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(" > ")
}

/// Where a value is in the dynamic metadata: the filter's namespace, then the
/// field names from its Struct down to the value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetadataPath {
    pub filter: String,
    pub path: Vec<String>,
}

impl MetadataPath {
    /// The path `claim: NAME` stands for: the payload, then each `.`-separated
    /// field of `NAME` (`org.id` is the claim `id` inside the claim `org`, as
    /// the token's JSON nests them). A claim whose own name holds a `.` is the
    /// `metadata:` form, `path: [payload, "a.b"]`.
    pub fn claim(name: &str) -> Self {
        let mut path = vec![JWT_PAYLOAD_FIELD.to_string()];
        path.extend(name.split('.').map(str::to_string));
        Self {
            filter: JWT_AUTHN.to_string(),
            path,
        }
    }

    /// The claim's dotted path (`sub`, `org.id`) when this is what `claim:
    /// NAME` stands for: the JWT payload, and no field with a `.` of its own.
    pub fn as_claim(&self) -> Option<String> {
        match self.path.split_first() {
            Some((payload, fields))
                if self.filter == JWT_AUTHN
                    && payload == JWT_PAYLOAD_FIELD
                    && !fields.is_empty()
                    && fields.iter().all(|f| !f.contains('.')) =>
            {
                Some(fields.join("."))
            }
            _ => None,
        }
    }

    /// What is wrong with the path, if anything (for `check-rules`).
    pub fn check(&self) -> Result<(), MetadataPathError> {
        let bad =
            |s: &str| s.is_empty() || s.len() > MAX_NAME_LEN || s.chars().any(char::is_control);
        if bad(&self.filter) {
            return Err(MetadataPathError::FilterName(self.filter.clone()));
        }
        if self.path.is_empty() || self.path.len() > MAX_DEPTH {
            return Err(MetadataPathError::Depth);
        }
        if let Some(f) = self.path.iter().find(|f| bad(f)) {
            return Err(MetadataPathError::FieldName(f.clone()));
        }
        if let Some(claim) = self.as_claim().filter(|c| c.contains(['/', ':'])) {
            // `https://example.com/plan` read as nested fields would never match.
            return Err(MetadataPathError::DottedClaim {
                claim,
                fields: self.path.iter().skip(1).cloned().collect(),
            });
        }
        Ok(())
    }

    /// Where the value is, as people write it: `claim sub`, or
    /// `envoy.filters.http.jwt_authn.payload.sub`.
    pub fn describe(&self) -> String {
        match self.as_claim() {
            Some(c) => format!("claim `{c}`"),
            None => format!("metadata `{}.{}`", self.filter, self.path.join(".")),
        }
    }

    /// The value at this path in `namespace` (the filter's serialized Struct),
    /// in its one spelling; `None` when absent, null, an object, a list, or the
    /// bytes are not a Struct.
    pub fn lookup<'a>(&self, namespace: &'a [u8]) -> Option<Cow<'a, [u8]>> {
        let (last, parents) = self.path.split_last()?;
        let mut current = namespace;
        for name in parents {
            match field(current, name)? {
                Value::Struct(inner) => current = inner,
                _ => return None,
            }
        }
        match field(current, last)? {
            Value::String(s) => Some(Cow::Borrowed(s)),
            Value::Number(n) => Some(Cow::Owned(number_text(n).into_bytes())),
            Value::Bool(b) => Some(Cow::Borrowed(if b { b"true" } else { b"false" })),
            Value::Null | Value::Struct(_) | Value::List => None,
        }
    }
}

/// A number in one spelling: the shortest decimal that reads back the same
/// `f64` (`3`, `0.1`, `1e21`), `-0` as `0`. JSON has no NaN or infinity; were
/// one given, it would be spelt as Rust spells it, still one spelling.
pub fn number_text(n: f64) -> String {
    if n == 0.0 {
        return "0".to_string();
    }
    format!("{n}")
}

/// One decoded `google.protobuf.Value`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value<'a> {
    Null,
    Number(f64),
    String(&'a [u8]),
    Bool(bool),
    /// A nested Struct's bytes.
    Struct(&'a [u8]),
    List,
}

/// The value of field `name` in a serialized Struct (`map<string, Value>
/// fields = 1`); the last entry wins when a name repeats, as protobuf reads it.
fn field<'a>(bytes: &'a [u8], name: &str) -> Option<Value<'a>> {
    // An entry without a value is a Value with no kind set: null.
    match map_value(bytes, name)? {
        Some(v) => decode_value(v),
        None => Some(Value::Null),
    }
}

/// The value bytes of key `name` in field 1 of a message, a protobuf
/// `map<string, _>` (a Struct's fields, a Metadata's filter_metadata):
/// `None` when absent or malformed, `Some(None)` for an entry without a value.
fn map_value<'a>(bytes: &'a [u8], name: &str) -> Option<Option<&'a [u8]>> {
    let mut found = None;
    for entry in Fields::new(bytes) {
        let (number, payload) = entry.ok()?;
        let (1, Payload::Bytes(entry)) = (number, payload) else {
            continue;
        };
        let mut key: &[u8] = b"";
        let mut value = None;
        for f in Fields::new(entry) {
            match f.ok()? {
                (1, Payload::Bytes(k)) => key = k,
                (2, Payload::Bytes(v)) => value = Some(v),
                _ => {}
            }
        }
        if key == name.as_bytes() {
            found = Some(value);
        }
    }
    found
}

/// The namespace of `filter` (its serialized Struct) in a serialized
/// `envoy.config.core.v3.Metadata`, as the proxy gives property `metadata`.
pub fn namespace<'a>(metadata: &'a [u8], filter: &str) -> Option<&'a [u8]> {
    Some(map_value(metadata, filter)?.unwrap_or_default())
}

/// A serialized `envoy.config.core.v3.Metadata` holding these namespaces
/// (each a serialized Struct): what the proxy gives as property `metadata`.
pub fn encode_metadata(namespaces: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (filter, ns) in namespaces {
        let mut entry = Vec::new();
        put_bytes(&mut entry, 1, filter.as_bytes());
        put_bytes(&mut entry, 2, ns);
        put_bytes(&mut out, 1, &entry);
    }
    out
}

/// A serialized `google.protobuf.Value` (a oneof: the last field set wins).
fn decode_value(bytes: &[u8]) -> Option<Value<'_>> {
    let mut value = Value::Null;
    for f in Fields::new(bytes) {
        value = match f.ok()? {
            (1, Payload::Varint(_)) => Value::Null,
            (2, Payload::Fixed64(bits)) => Value::Number(f64::from_bits(bits)),
            (3, Payload::Bytes(s)) => Value::String(s),
            (4, Payload::Varint(b)) => Value::Bool(b != 0),
            (5, Payload::Bytes(s)) => Value::Struct(s),
            (6, Payload::Bytes(_)) => Value::List,
            _ => value,
        };
    }
    Some(value)
}

/// A protobuf field's payload, by wire type.
#[derive(Debug, Clone, Copy)]
enum Payload<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
}

/// The fields of a protobuf message, in order; an `Err` ends a malformed one.
struct Fields<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            rest: bytes,
            failed: false,
        }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.rest.split_first()?;
            self.rest = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(out);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    fn next_field(&mut self) -> Option<(u64, Payload<'a>)> {
        let tag = self.varint()?;
        let payload = match tag & 7 {
            0 => Payload::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Payload::Fixed64(u64::from_le_bytes(a))
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                Payload::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Payload::Fixed32
            }
            _ => return None,
        };
        Some((tag >> 3, payload))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Payload<'a>), ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        match self.next_field() {
            Some(f) => Some(Ok(f)),
            None => {
                self.failed = true;
                Some(Err(()))
            }
        }
    }
}

/// Builds a serialized Struct, as Envoy hands a filter's namespace over: for
/// `explain` (a claim given on the command line) and for tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StructBuilder {
    fields: Vec<(String, Field)>,
}

/// A value for [`StructBuilder`].
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Null,
    Number(f64),
    String(String),
    Bool(bool),
    Struct(StructBuilder),
    List(Vec<Field>),
}

impl StructBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a field.
    pub fn with(mut self, name: &str, value: Field) -> Self {
        self.set(name, value);
        self
    }

    /// Sets the value at `path` (creating the Structs on the way; a non-Struct
    /// on the way is replaced).
    pub fn set_path(&mut self, path: &[String], value: Field) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        if rest.is_empty() {
            self.set(first, value);
            return;
        }
        let mut inner = match self.fields.iter().find(|(n, _)| n == first) {
            Some((_, Field::Struct(s))) => s.clone(),
            _ => StructBuilder::new(),
        };
        inner.set_path(rest, value);
        self.set(first, Field::Struct(inner));
    }

    fn set(&mut self, name: &str, value: Field) {
        match self.fields.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.fields.push((name.to_string(), value)),
        }
    }

    /// The serialized `google.protobuf.Struct`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in &self.fields {
            let mut entry = Vec::new();
            put_bytes(&mut entry, 1, name.as_bytes());
            put_bytes(&mut entry, 2, &value.encode());
            put_bytes(&mut out, 1, &entry);
        }
        out
    }
}

impl Field {
    /// The serialized `google.protobuf.Value`.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Field::Null => {
                put_varint(&mut out, 1 << 3);
                put_varint(&mut out, 0);
            }
            Field::Number(n) => {
                put_varint(&mut out, (2 << 3) | 1);
                out.extend_from_slice(&n.to_bits().to_le_bytes());
            }
            Field::String(s) => put_bytes(&mut out, 3, s.as_bytes()),
            Field::Bool(b) => {
                put_varint(&mut out, 4 << 3);
                put_varint(&mut out, u64::from(*b));
            }
            Field::Struct(s) => put_bytes(&mut out, 5, &s.encode()),
            Field::List(items) => {
                let mut list = Vec::new();
                for i in items {
                    put_bytes(&mut list, 1, &i.encode());
                }
                put_bytes(&mut out, 6, &list);
            }
        }
        out
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests;
