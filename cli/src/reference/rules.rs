//! The rules file reference page, from the rules file's JSON Schema: the one
//! the rules types give (`meshlimit_core::rules::schema`), which
//! docs/rules.schema.json holds (core's test `the_committed_schema_is_the_generated_one`
//! keeps the two equal). Each object is a section with a table of its fields;
//! enums whose values each have a description are sections too, the others are
//! written out where they are used.

use std::collections::BTreeMap;

use meshlimit_core::rules::schema::rules_schema;
use serde_json::{Map, Value};

use super::markdown::{cell, code, paragraphs, table};
use super::{generated_by, ReferenceError};

/// docs/reference/rules.md.
pub fn page() -> Result<String, ReferenceError> {
    let schema = rules_schema();
    let empty = Map::new();
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let doc = Doc { defs };
    let mut out =
        generated_by("the rules file's JSON Schema (`meshlimit schema`, docs/rules.schema.json)");
    out.push_str("# Rules file\n\n");
    out.push_str(
        "The rules file is YAML or JSON; `meshlimit check-rules FILE` validates it as the \
         agent does, and `meshlimit schema` prints its JSON Schema, which editors use to \
         complete and check it. What the schema cannot say (a duplicate rule name, a \
         `plans.default` naming no plan, a cost above the burst) only `check-rules` finds. \
         For what the fields do, see [Writing rules](../guide/rules.md).\n\n",
    );
    let paths = doc.paths(&schema);
    out.push_str(&doc.object_section("The file", &schema, &[]));
    for name in doc.sections(&schema) {
        let def = defs
            .get(&name)
            .ok_or_else(|| ReferenceError::Schema(format!("definition {name}")))?;
        let used_at = paths.get(&name).map(Vec::as_slice).unwrap_or_default();
        out.push('\n');
        out.push_str(&doc.section(&name, def, used_at));
    }
    Ok(out)
}

/// The schema's definitions, which `$ref`s name.
struct Doc<'s> {
    defs: &'s Map<String, Value>,
}

/// The definition a `$ref` names.
fn ref_name(schema: &Value) -> Option<&str> {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
}

/// The schemas a property's schema leads to: its `$ref`, the non-null one of
/// an `anyOf`, its items, its map values; with the path suffix each adds.
fn children(schema: &Value) -> Vec<(&'static str, &Value)> {
    let mut out = Vec::new();
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        out.extend(any.iter().filter(|s| !is_null(s)).map(|s| ("", s)));
    }
    if let Some(items) = schema.get("items") {
        out.push(("[]", items));
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        out.push((".NAME", values));
    }
    out
}

fn is_null(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

impl Doc<'_> {
    /// The definitions that get a section, in the order a reader meets them.
    fn sections(&self, root: &Value) -> Vec<String> {
        let mut order: Vec<String> = Vec::new();
        let mut queue = vec![root.clone()];
        while let Some(schema) = queue.first().cloned() {
            queue.remove(0);
            for name in self.refs_of(&schema) {
                if order.contains(&name) {
                    continue;
                }
                if let Some(def) = self.defs.get(&name) {
                    if self.has_section(def) {
                        order.push(name.clone());
                    }
                    queue.push(def.clone());
                }
            }
        }
        order
    }

    /// The definitions `schema`'s properties (and variants) refer to, in order.
    fn refs_of(&self, schema: &Value) -> Vec<String> {
        let mut stack: Vec<&Value> = properties(schema).map(|(_, s)| s).collect();
        if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
            stack.extend(variants.iter());
        }
        let mut out = Vec::new();
        while let Some(s) = stack.pop() {
            if let Some(name) = ref_name(s) {
                out.push(name.to_string());
            }
            stack.extend(children(s).into_iter().map(|(_, c)| c));
            stack.extend(properties(s).map(|(_, c)| c));
        }
        out.reverse();
        out
    }

    /// Objects, mixed variants and enums with described values get a section;
    /// plain enums are written out where used.
    fn has_section(&self, def: &Value) -> bool {
        def.get("enum").is_none()
    }

    /// Where each definition is used in a file, as paths (`rules[].match`).
    fn paths(&self, root: &Value) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        self.walk(root, "", &mut out, 0);
        out
    }

    fn walk(&self, schema: &Value, at: &str, out: &mut BTreeMap<String, Vec<String>>, depth: u8) {
        if depth > 16 {
            return;
        }
        for (field, prop) in properties(schema) {
            let path = if at.is_empty() {
                field.to_string()
            } else {
                format!("{at}.{field}")
            };
            self.follow(prop, &path, out, depth);
        }
    }

    /// Records the definition `schema` names at `path`, and walks into it.
    fn follow(
        &self,
        schema: &Value,
        path: &str,
        out: &mut BTreeMap<String, Vec<String>>,
        depth: u8,
    ) {
        if let Some(name) = ref_name(schema) {
            let seen = out.entry(name.to_string()).or_default();
            if !seen.iter().any(|p| p == path) {
                seen.push(path.to_string());
            }
            if let Some(def) = self.defs.get(name) {
                self.walk(def, path, out, depth + 1);
            }
        }
        for (suffix, child) in children(schema) {
            self.follow(child, &format!("{path}{suffix}"), out, depth + 1);
        }
    }

    /// A definition's section: an object's fields, an enum's values, or a
    /// choice of forms.
    fn section(&self, name: &str, def: &Value, used_at: &[String]) -> String {
        if def.get("properties").is_some() {
            return self.object_section(name, def, used_at);
        }
        let mut out = heading(name, def, used_at);
        let variants = def.get("oneOf").and_then(Value::as_array);
        let rows: Vec<Vec<String>> = variants
            .into_iter()
            .flatten()
            .flat_map(|v| self.variant_rows(v))
            .collect();
        if rows.iter().all(|r| r[1].is_empty()) {
            let rows: Vec<Vec<String>> = rows
                .into_iter()
                .map(|r| vec![r[0].clone(), r[2].clone()])
                .collect();
            out.push_str(&table(&["Value", "Description"], &rows));
        } else {
            out.push_str(&table(&["Value", "Allowed", "Description"], &rows));
        }
        out
    }

    /// The rows one variant of a choice gives: a value each for a constant or
    /// an enum, else the one-field object it is.
    fn variant_rows(&self, variant: &Value) -> Vec<Vec<String>> {
        let description = variant
            .get("description")
            .and_then(Value::as_str)
            .map(cell)
            .unwrap_or_default();
        if let Some(value) = variant.get("const") {
            return vec![vec![code(&plain(value)), String::new(), description]];
        }
        if let Some(values) = variant.get("enum").and_then(Value::as_array) {
            return values
                .iter()
                .map(|v| vec![code(&plain(v)), String::new(), description.clone()])
                .collect();
        }
        properties(variant)
            .map(|(field, prop)| {
                let form = format!("{} {}", code(&format!("{field}:")), self.type_text(prop));
                vec![form, self.allowed(prop), describe(prop)]
            })
            .collect()
    }

    /// An object's section: heading, description, rules across fields, and a
    /// table of its fields.
    fn object_section(&self, name: &str, def: &Value, used_at: &[String]) -> String {
        let mut out = heading(name, def, used_at);
        for rule in object_rules(def) {
            out.push_str(&format!("{rule}\n\n"));
        }
        let required: Vec<&str> = def
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let rows: Vec<Vec<String>> = properties(def)
            .map(|(field, prop)| self.field_row(field, prop, required.contains(&field)))
            .collect();
        out.push_str(&table(
            &["Field", "Type", "Default", "Allowed", "Description"],
            &rows,
        ));
        out
    }

    fn field_row(&self, field: &str, prop: &Value, required: bool) -> Vec<String> {
        let default = match prop.get("default") {
            _ if required => "required".to_string(),
            Some(value) => code(&value.to_string()),
            None => String::new(),
        };
        let mut description = describe(prop);
        if description.is_empty() {
            description = self.target(prop).map(describe).unwrap_or_default();
        }
        vec![
            code(field),
            self.type_text(prop),
            default,
            self.allowed(prop),
            description,
        ]
    }

    /// The definition a property refers to, directly or as `T or null`.
    fn target(&self, prop: &Value) -> Option<&Value> {
        let direct = ref_name(prop);
        let through_any = || {
            children(prop)
                .into_iter()
                .filter(|(suffix, _)| suffix.is_empty())
                .find_map(|(_, c)| ref_name(c))
        };
        direct.or_else(through_any).and_then(|n| self.defs.get(n))
    }

    /// A schema's type in words, with links to the sections of definitions.
    fn type_text(&self, schema: &Value) -> String {
        if let Some(name) = ref_name(schema) {
            return match self.defs.get(name) {
                Some(def) if !self.has_section(def) => "string".into(),
                _ => format!("[{name}](#{})", name.to_lowercase()),
            };
        }
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
            let types: Vec<String> = any
                .iter()
                .filter(|s| !is_null(s))
                .map(|s| self.type_text(s))
                .collect();
            return types.join(" or ");
        }
        match json_type(schema).as_deref() {
            Some("array") => match schema.get("items") {
                Some(items) => format!("list of {}", self.type_text(items)),
                None => "list".into(),
            },
            Some("object") => match schema.get("additionalProperties").filter(|v| v.is_object()) {
                Some(values) => format!("map of name to {}", self.type_text(values)),
                None => "object".into(),
            },
            Some(t) => t.to_string(),
            None => String::new(),
        }
    }

    /// What values a schema allows: an enum's, ranges, lengths, patterns;
    /// also those of its items and of a plain enum it refers to.
    fn allowed(&self, schema: &Value) -> String {
        let mut parts = limits(schema);
        if let Some(def) = self.target(schema).filter(|d| !self.has_section(d)) {
            parts.extend(limits(def));
        }
        if let Some(items) = schema.get("items") {
            let inner = self.allowed(items);
            if !inner.is_empty() {
                parts.push(format!("each: {inner}"));
            }
        }
        if ref_name(schema).is_none() {
            let fields: Vec<String> = properties(schema)
                .map(|(field, prop)| {
                    let inner = self.allowed(prop);
                    let what = [self.type_text(prop), inner].join(", ");
                    format!("{} ({})", code(field), what.trim_end_matches(", "))
                })
                .collect();
            if !fields.is_empty() {
                parts.push(format!("fields {}", fields.join(", ")));
            }
        }
        parts.join("; ")
    }
}

/// A section's heading, where the definition is used, and its description.
fn heading(name: &str, def: &Value, used_at: &[String]) -> String {
    let mut out = format!("## {name}\n\n");
    if !used_at.is_empty() {
        let at: Vec<String> = used_at.iter().map(|p| code(p)).collect();
        out.push_str(&format!("At {}.\n\n", at.join(", ")));
    }
    if let Some(text) = def.get("description").and_then(Value::as_str) {
        out.push_str(&format!("{}\n\n", paragraphs(text)));
    }
    out
}

/// The constraints an object puts across its fields, in words.
fn object_rules(def: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if def.get("additionalProperties") == Some(&Value::Bool(false)) {
        out.push("Unknown fields are refused.".to_string());
    }
    let groups = |key: &str| -> Vec<String> {
        def.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.get("required").and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .map(code)
            .collect()
    };
    let one_of = groups("oneOf");
    if !one_of.is_empty() {
        out.push(format!("Exactly one of {}.", one_of.join(", ")));
    }
    let any_of = groups("anyOf");
    if !any_of.is_empty() {
        out.push(format!("At least one of {}.", any_of.join(", ")));
    }
    if let Some(not) = def
        .get("not")
        .and_then(|n| n.get("required"))
        .and_then(Value::as_array)
    {
        let fields: Vec<String> = not.iter().filter_map(Value::as_str).map(code).collect();
        out.push(format!("Not all of {} together.", fields.join(", ")));
    }
    if let Some(count) = range(def, "minProperties", "maxProperties", "field") {
        out.push(format!("{count}."));
    }
    out
}

/// The value constraints of one schema, in words.
fn limits(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values.iter().map(|v| code(&plain(v))).collect();
        out.push(values.join(", "));
    }
    if let Some(r) = range(schema, "minimum", "maximum", "") {
        out.push(r);
    }
    if let Some(r) = range(schema, "minLength", "maxLength", "character") {
        out.push(r);
    }
    if let Some(r) = range(schema, "minItems", "maxItems", "item") {
        out.push(r);
    }
    if let Some(r) = range(schema, "minProperties", "maxProperties", "entry") {
        out.push(r);
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        out.push(format!("matches {}", code(p)));
    }
    if let Some(p) = schema
        .pointer("/propertyNames/pattern")
        .and_then(Value::as_str)
    {
        out.push(format!("names match {}", code(p)));
    }
    out
}

/// `1 to 128 characters`, `at least 1 item`, `at most 1`: a bound pair in words.
fn range(schema: &Value, min: &str, max: &str, unit: &str) -> Option<String> {
    let number = |key: &str| {
        schema
            .get(key)
            .filter(|v| v.is_number())
            .map(Value::to_string)
    };
    let unit = |n: &str| match unit {
        "" => String::new(),
        u if n == "1" => format!(" {u}"),
        "entry" => " entries".into(),
        u => format!(" {u}s"),
    };
    match (number(min), number(max)) {
        (Some(lo), Some(hi)) if lo == hi => Some(format!("exactly {lo}{}", unit(&hi))),
        (Some(lo), Some(hi)) => Some(format!("{lo} to {hi}{}", unit(&hi))),
        (Some(lo), None) => Some(format!("at least {lo}{}", unit(&lo))),
        (None, Some(hi)) => Some(format!("at most {hi}{}", unit(&hi))),
        (None, None) => None,
    }
}

/// An object's properties, in the schema's order.
fn properties(schema: &Value) -> impl Iterator<Item = (&str, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v))
}

/// The JSON type of a schema, its `null` alternative left out.
fn json_type(schema: &Value) -> Option<String> {
    match schema.get("type")? {
        Value::String(t) => Some(t.clone()),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .map(str::to_string),
        _ => None,
    }
}

/// A schema's own description, for a table cell.
fn describe(schema: &Value) -> String {
    schema
        .get("description")
        .and_then(Value::as_str)
        .map(cell)
        .unwrap_or_default()
}

/// A JSON value as YAML would write it: strings bare.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
