//! Descriptor keys: what a limit is counted per. A key is the rule name followed by
//! the key parts taken from the request, each escaped so that no header value can
//! forge a separator and land in another client's bucket.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::fingerprint::fingerprint;

/// The longest part kept verbatim; longer values (hostile or not) are replaced by
/// their fingerprint, which keeps them distinct but bounds every key's size.
pub const MAX_PART_LEN: usize = 128;

const SEPARATOR: char = '|';

/// A descriptor key, e.g. `search-per-api-key|k-123|GET`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DescriptorKey(String);

impl DescriptorKey {
    /// Builds the key of `rule` from the request's `parts`, in rule order.
    pub fn new<'a>(rule: &str, parts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut key = String::with_capacity(rule.len() + 32);
        key.push_str(rule);
        for part in parts {
            key.push(SEPARATOR);
            push_part(&mut key, part);
        }
        Self(key)
    }

    /// Wraps a key received over the wire. Its length was bounded by the request
    /// size check; it is only ever used as a map key.
    pub fn from_wire(key: String) -> Self {
        Self(key)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The rule name the key starts with.
    pub fn rule(&self) -> &str {
        self.0.split(SEPARATOR).next().unwrap_or_default()
    }

    /// Stable 64-bit fingerprint (slot choice in the filter, sharding in stores).
    pub fn fingerprint(&self) -> u64 {
        fingerprint(self.0.as_bytes())
    }
}

impl fmt::Display for DescriptorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn push_part(key: &mut String, part: &str) {
    if part.len() > MAX_PART_LEN {
        key.push_str(&format!("#{:016x}", fingerprint(part.as_bytes())));
        return;
    }
    for c in part.chars() {
        match c {
            // Escape the escape, the separator, the hash marker and control chars.
            '%' | '|' | '#' => key.push_str(&format!("%{:02X}", c as u32)),
            c if c.is_control() => key.push_str(&format!("%{:02X}", c as u32 & 0xff)),
            c => key.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cannot_forge_a_separator() {
        let a = DescriptorKey::new("r", ["x|y", "z"]);
        let b = DescriptorKey::new("r", ["x", "y|z"]);
        assert_ne!(a, b);
        assert_eq!(a.rule(), "r");
    }

    #[test]
    fn long_parts_are_bounded_but_distinct() {
        let long_a = "a".repeat(10_000);
        let long_b = format!("{}b", "a".repeat(9_999));
        let a = DescriptorKey::new("r", [long_a.as_str()]);
        let b = DescriptorKey::new("r", [long_b.as_str()]);
        assert!(a.as_str().len() < 40);
        assert_ne!(a, b);
        // A short value cannot pose as a hashed long one.
        let forged = DescriptorKey::new("r", [&a.as_str()[2..]]);
        assert_ne!(forged, a);
    }
}
