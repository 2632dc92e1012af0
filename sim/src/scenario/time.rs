//! Durations in scenario files: `250ms`, `10s`, `1.5m`, or a bare number of seconds.

use serde::{Deserialize, Deserializer};

/// A duration a scenario cannot use, as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a duration (write 250ms, 10s or 1m)")]
pub struct DurationError(pub String);

/// A duration in seconds.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Secs(pub f64);

impl Secs {
    pub fn ns(self) -> u64 {
        (self.0 * 1e9).max(0.0) as u64
    }

    /// Parses `250ms`, `10s`, `1.5m` or `12`.
    pub fn parse(text: &str) -> Result<Secs, DurationError> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let scale = match unit.trim() {
            "" | "s" => 1.0,
            "ms" => 1e-3,
            "m" => 60.0,
            _ => return Err(DurationError(text.to_string())),
        };
        match num.parse::<f64>() {
            Ok(n) if n.is_finite() && n >= 0.0 => Ok(Secs(n * scale)),
            _ => Err(DurationError(text.to_string())),
        }
    }
}

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) if n.is_finite() && n >= 0.0 => Ok(Secs(n)),
            Raw::Number(n) => Err(serde::de::Error::custom(format!("{n} is not a duration"))),
            Raw::Text(t) => Secs::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}
