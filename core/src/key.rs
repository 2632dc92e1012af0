//! Descriptor keys: what a limit is counted per. A key is the rule name followed by
//! the key parts taken from the request, each escaped so that no header value can
//! forge a separator and land in another client's bucket.

use std::fmt;

use serde::{Deserialize, Serialize};

use sha2::{Digest, Sha256};

use crate::fingerprint::fingerprint;

/// The longest part kept verbatim; longer values (hostile or not) are replaced by
/// a 128-bit SHA-256 fingerprint, which bounds every key's size and keeps them
/// distinct: finding two values with one fingerprint costs about 2^64 hashes.
pub const MAX_PART_LEN: usize = 128;

/// The longest descriptor key the agent accepts in a lease item, in bytes; a longer
/// item is refused (that item only) before anything is stored, so keys bound the
/// agent's per-key memory. Why 1 KiB: a key is the rule name (at most
/// `MAX_RULE_NAME` = 64 bytes) and, per key part, a separator and the part, which
/// `DescriptorKey::new` keeps verbatim up to `MAX_PART_LEN` = 128 bytes and
/// otherwise replaces by a 17-byte fingerprint: 64 + 7 × (1 + 128) = 967 bytes
/// holds seven full-length parts. Escaping (`%XX` for `%`, `|`, `#` and control
/// characters) can triple a part, so a key whose parts would pass this length is
/// fingerprinted whole by `DescriptorKey::new`: no request builds a key the agent
/// refuses.
pub const MAX_KEY_BYTES: usize = 1024;

const SEPARATOR: char = '|';

/// A descriptor key, e.g. `search-per-api-key|k-123|GET`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DescriptorKey(String);

impl DescriptorKey {
    /// Builds the key of `rule` from the request's `parts` (bytes: header values
    /// need not be UTF-8), in rule order. The encoding is injective: two different
    /// lists of parts never give the same key.
    pub fn new<P: AsRef<[u8]>>(rule: &str, parts: impl IntoIterator<Item = P>) -> Self {
        let mut key = KeyBuilder::new(rule);
        for part in parts {
            key.push(part.as_ref());
        }
        key.finish()
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

/// A descriptor key built one part at a time, as a rule reads its parts from
/// the request (no list of the parts is collected first: this is on every
/// request's path).
pub(crate) struct KeyBuilder {
    key: String,
    rule_len: usize,
}

/// The marker of a key whose parts were replaced whole by their fingerprint:
/// `rule|##<32 hex>`. No key of parts can start its parts so (a part's own
/// `#` is escaped, and a long part's fingerprint is `#` then hex).
const WHOLE_MARKER: &str = "##";

impl KeyBuilder {
    pub(crate) fn new(rule: &str) -> KeyBuilder {
        let mut key = String::with_capacity(rule.len() + 32);
        key.push_str(rule);
        KeyBuilder {
            key,
            rule_len: rule.len(),
        }
    }

    pub(crate) fn push(&mut self, part: &[u8]) {
        self.key.push(SEPARATOR);
        push_part(&mut self.key, part);
    }

    /// The key, never longer than the agent accepts
    /// ([`MAX_KEY_BYTES`]): a key whose escaped parts would make
    /// it longer keeps its rule name and replaces all its parts by one
    /// 128-bit SHA-256 fingerprint of them, so a client cannot make its
    /// request's key one the agent refuses (and its rule's failure policy
    /// decide it), and two such keys stay distinct.
    pub(crate) fn finish(mut self) -> DescriptorKey {
        if self.key.len() > MAX_KEY_BYTES {
            let digest = Sha256::digest(&self.key.as_bytes()[self.rule_len..]);
            self.key.truncate(self.rule_len);
            self.key.push(SEPARATOR);
            self.key.push_str(WHOLE_MARKER);
            self.key.push_str(&crate::digits::hex(&digest[..16]));
        }
        DescriptorKey(self.key)
    }
}

/// Appends one part. Bytes that are text go in as text, except the escape
/// character, the separator, the fingerprint marker and control characters,
/// which are `%XX`-escaped; bytes that are not UTF-8 are `%XX`-escaped too. So
/// the text `%C3` (`%25C3`) and the byte 0xC3 (`%C3`) stay two keys.
fn push_part(key: &mut String, part: &[u8]) {
    if part.len() > MAX_PART_LEN {
        let digest = Sha256::digest(part);
        key.push('#');
        key.push_str(&crate::digits::hex(&digest[..16]));
        return;
    }
    // Most parts are plain ASCII with nothing to escape: copied whole, not
    // char by char (the filter's Wasm runs this for every request). Every
    // byte is tested, with no exit on the first that is not plain: the
    // compiler unrolls a loop that stops early into a body the Wasm
    // interpreter charges whole at each turn, which cost a 9-byte part about
    // 1,400 instructions, where this costs about 250 (`make wasm-cost`).
    if part.iter().fold(true, |plain, &b| plain & plain_byte(b)) {
        if let Some(plain) = crate::text::utf8(part) {
            key.push_str(plain);
            return;
        }
    }
    push_escaped(key, part);
}

/// Whether `b` goes into a key as it is: printable ASCII other than the
/// escape character, the separator and the fingerprint marker. Each test is
/// made (`&`, not `&&`), so the check has no branch.
fn plain_byte(b: u8) -> bool {
    (0x20..0x7f).contains(&b) & (b != b'%') & (b != b'|') & (b != b'#')
}

/// [`push_part`] char by char, escaping what must be.
fn push_escaped(key: &mut String, part: &[u8]) {
    for chunk in part.utf8_chunks() {
        for c in chunk.valid().chars() {
            if matches!(c, '%' | '|' | '#') || c.is_control() {
                // Escaped as its UTF-8 bytes: U+0085 is `%C2%85`, never the
                // `%85` a lone invalid byte 0x85 gives.
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    crate::digits::push_percent(key, b);
                }
            } else {
                key.push(c);
            }
        }
        for b in chunk.invalid() {
            crate::digits::push_percent(key, *b);
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
    fn the_fingerprint_is_that_of_the_key_text() {
        let k = DescriptorKey::new("search", ["k1"]);
        assert_eq!(k.as_str(), "search|k1");
        assert_eq!(k.fingerprint(), 0x9eaf_0de1_b129_d5ca);
    }

    #[test]
    fn a_part_of_the_longest_length_stays_text() {
        let max = "a".repeat(MAX_PART_LEN);
        assert!(DescriptorKey::new("r", [max.as_str()])
            .as_str()
            .ends_with(&max));
        let over = "a".repeat(MAX_PART_LEN + 1);
        assert!(!DescriptorKey::new("r", [over.as_str()])
            .as_str()
            .contains(&over));
    }

    #[test]
    fn long_parts_are_bounded_but_distinct() {
        let long_a = "a".repeat(10_000);
        let long_b = format!("{}b", "a".repeat(9_999));
        let a = DescriptorKey::new("r", [long_a.as_str()]);
        let b = DescriptorKey::new("r", [long_b.as_str()]);
        assert!(a.as_str().len() < 40, "{a}");
        assert_ne!(a, b);
        // A short value cannot pose as a hashed long one.
        let forged = DescriptorKey::new("r", [&a.as_str()[2..]]);
        assert_ne!(forged, a);
    }

    #[test]
    fn a_key_of_many_escaped_parts_is_fingerprinted_whole_within_the_wire_limit() {
        // Seven parts of 128 `%` each escape to 384 bytes apiece: 2.7 KB of key.
        let part = "%".repeat(MAX_PART_LEN);
        let parts = vec![part.as_str(); 7];
        let key = DescriptorKey::new("r", &parts);
        assert!(key.as_str().len() <= MAX_KEY_BYTES, "{key}");
        assert_eq!(key.rule(), "r");
        assert!(key.as_str().starts_with("r|##"), "{key}");
        // Another such key stays another key.
        let mut other = parts.clone();
        other[6] = "%%";
        assert_ne!(DescriptorKey::new("r", &other), key);
        // Keys up to the limit stay as they are.
        let fits = DescriptorKey::new("r", [part.as_str(), "a"]);
        assert!(fits.as_str().ends_with("|a"), "{fits}");
    }

    #[test]
    fn no_value_poses_as_a_whole_fingerprint() {
        let part = "%".repeat(MAX_PART_LEN);
        let long = DescriptorKey::new("r", vec![part.as_str(); 7]);
        let parts_text = &long.as_str()[2..];
        assert_ne!(DescriptorKey::new("r", [parts_text]), long);
        assert_ne!(DescriptorKey::new("r", ["", &parts_text[1..]]), long);
    }

    #[test]
    fn a_control_character_and_a_raw_byte_are_two_keys() {
        // A case of the descriptor_key fuzzer: U+0085 and the invalid byte 0x85.
        let c1 = DescriptorKey::new("r", ["\u{85}".as_bytes()]);
        let raw = DescriptorKey::new("r", [b"\x85".as_slice()]);
        assert_ne!(c1, raw);
        assert_eq!(c1.as_str(), "r|%C2%85");
        assert_eq!(raw.as_str(), "r|%85");
    }

    #[test]
    fn a_plain_part_copied_whole_is_what_escaping_it_char_by_char_gives() {
        let mut parts: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        parts.extend(
            [
                "hot",
                "a%b",
                "a|b",
                "a#b",
                "tab\there",
                "caf\u{e9}",
                "k-1_2.3~",
            ]
            .map(|p| p.as_bytes().to_vec()),
        );
        for part in parts {
            let (mut whole, mut escaped) = (String::new(), String::new());
            push_part(&mut whole, &part);
            push_escaped(&mut escaped, &part);
            assert_eq!(whole, escaped, "{part:?}");
        }
    }

    #[test]
    fn text_escapes_and_raw_bytes_are_two_keys() {
        let text = DescriptorKey::new("r", [b"%C3".as_slice()]);
        let byte = DescriptorKey::new("r", [b"\xC3".as_slice()]);
        assert_ne!(text, byte);
        assert_eq!(byte.as_str(), "r|%C3");
        assert_eq!(text.as_str(), "r|%25C3");
    }

    proptest::proptest! {
        #[test]
        fn different_parts_give_different_keys(
            a in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12), 0..4),
            b in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12), 0..4),
        ) {
            // Bias towards the characters that need escaping.
            let bias = |v: &Vec<Vec<u8>>| -> Vec<Vec<u8>> {
                v.iter().map(|p| p.iter().map(|x| match x % 8 {
                    0 => b'%', 1 => b'|', 2 => b'#', 3 => 0xC2, 4 => 0x85, _ => *x,
                }).collect()).collect()
            };
            let (a, b) = (bias(&a), bias(&b));
            proptest::prop_assume!(a != b);
            proptest::prop_assert_ne!(DescriptorKey::new("r", &a), DescriptorKey::new("r", &b));
        }
    }
}
