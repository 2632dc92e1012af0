//! Reading Prometheus text exposition in assertions.

/// The sum of every sample of metric `name` whose labels include all of `labels`;
/// `None` when there is no such sample. `sample(&text, "meshlimit_decisions_total",
/// &[("rule", "login"), ("outcome", "limited")])`.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter_map(Sample::parse)
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.has_label(k, v)))
        .map(|s| s.value)
        .reduce(|a, b| a + b)
}

/// The value of label `key` on the first sample of metric `name` that is not
/// zero (an info metric's current value): `label(&text,
/// "meshlimit_rules_version_info", "version")`.
pub fn label(text: &str, name: &str, key: &str) -> Option<String> {
    text.lines()
        .filter_map(Sample::parse)
        .filter(|s| s.name == name && s.value != 0.0)
        .find_map(|s| s.labels.into_iter().find(|(k, _)| k == key).map(|(_, v)| v))
}

/// One line of the exposition format: `name{k="v",...} value [timestamp]`.
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(String, String)>,
    value: f64,
}

impl<'a> Sample<'a> {
    /// `None` for comments, blank lines and anything malformed.
    fn parse(line: &'a str) -> Option<Sample<'a>> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
        let (name, mut rest) = line.split_at(name_end);
        let mut labels = Vec::new();
        if let Some(inside) = rest.strip_prefix('{') {
            rest = parse_labels(inside, &mut labels)?;
        }
        let value = match rest.split_whitespace().next()? {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().ok()?,
        };
        Some(Sample {
            name,
            labels,
            value,
        })
    }

    fn has_label(&self, key: &str, value: &str) -> bool {
        self.labels.iter().any(|(k, v)| k == key && v == value)
    }
}

/// Reads `k="v",...}` into `labels`; returns the text after the `}`.
fn parse_labels<'a>(mut s: &'a str, labels: &mut Vec<(String, String)>) -> Option<&'a str> {
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(rest) = s.strip_prefix('}') {
            return Some(rest);
        }
        let (key, rest) = s.split_once('=')?;
        let rest = rest.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        s = &rest[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
# HELP meshlimit_decisions_total Decisions.
# TYPE meshlimit_decisions_total counter
meshlimit_decisions_total{rule="a",outcome="allowed"} 7
meshlimit_decisions_total{rule="a",outcome="limited"} 3
meshlimit_decisions_total{outcome="limited",rule="b"} 2
meshlimit_rules_version_info{version="x\"y,z}"} 1
meshlimit_store_latency_seconds_bucket{le="+Inf"} 12 1700000000
meshlimit_up 1
"#;

    #[test]
    fn sums_samples_whose_labels_match() {
        let name = "meshlimit_decisions_total";
        assert_eq!(sample(TEXT, name, &[]), Some(12.0));
        assert_eq!(sample(TEXT, name, &[("outcome", "limited")]), Some(5.0));
        assert_eq!(
            sample(TEXT, name, &[("rule", "a"), ("outcome", "allowed")]),
            Some(7.0)
        );
        assert_eq!(sample(TEXT, name, &[("rule", "c")]), None);
        assert_eq!(sample(TEXT, "meshlimit_up", &[]), Some(1.0));
    }

    #[test]
    fn reads_escaped_label_values_and_timestamps() {
        let version = sample(
            TEXT,
            "meshlimit_rules_version_info",
            &[("version", "x\"y,z}")],
        );
        assert_eq!(version, Some(1.0));
        let le = sample(
            TEXT,
            "meshlimit_store_latency_seconds_bucket",
            &[("le", "+Inf")],
        );
        assert_eq!(le, Some(12.0));
        assert_eq!(
            label(TEXT, "meshlimit_rules_version_info", "version").as_deref(),
            Some("x\"y,z}")
        );
        assert_eq!(label(TEXT, "meshlimit_up", "version"), None);
    }
}
