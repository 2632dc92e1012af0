//! The deployment's secret, and everything derived from it.
//!
//! One secret (a Kubernetes Secret, handed to the agent and to every Envoy's Wasm
//! VM as `MESHLIMIT_SECRET`) serves three purposes, each through its own derived
//! key so that no use reveals another:
//!
//! - the bearer token filters present to the agent ([`Secret::agent_token`]): only
//!   the node's filters may take tokens, report decisions or read rules;
//! - key ids ([`KeyIds`]): metric labels, logs and Redis key names name a customer's
//!   key by a keyed hash, never in clear; an operator holding the secret can map a
//!   known key to its id (`meshlimit key-id`), nobody else can invert one;
//! - the filter's shared-data slot hash ([`Secret::slot_hasher`]): a client cannot
//!   search offline for a value whose slot or fingerprint equals another key's;
//! - the MAC of control state in the store ([`Secret::control_mac`]): the fleet
//!   override, trials, the versions served and their audit history, so that
//!   write access to Redis alone cannot change the rules every agent serves.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use siphasher::sip::SipHasher13;

use crate::digits::{hex, HEX_LOWER};
use crate::key::DescriptorKey;

/// The shortest secret accepted, in bytes (`openssl rand -hex 32` gives 64).
pub const MIN_SECRET_LEN: usize = 32;

/// The environment variable both the agent and the filter's VM read it from.
pub const SECRET_ENV: &str = "MESHLIMIT_SECRET";

/// The header a filter authenticates with: `authorization: Bearer <token>`.
pub const AUTH_HEADER: &str = "authorization";

// Labels that separate the derived keys (domain separation).
const TOKEN_LABEL: &[u8] = b"meshlimit/v1/agent-token";
const KEY_ID_LABEL: &[u8] = b"meshlimit/v1/key-id";
const SLOT_LABEL: &[u8] = b"meshlimit/v1/slot-hash";
const CONTROL_LABEL: &[u8] = b"meshlimit/v1/control-mac";

type HmacSha256 = Hmac<Sha256>;

/// Why a secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("the secret is {0} bytes; at least {MIN_SECRET_LEN} are needed (e.g. `openssl rand -hex 32`)")]
    TooShort(usize),
}

/// The deployment's secret. Its `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Takes the secret's bytes; surrounding whitespace (a trailing newline in a
    /// mounted file) is not part of it.
    pub fn new(bytes: &[u8]) -> Result<Secret, SecretError> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < MIN_SECRET_LEN {
            return Err(SecretError::TooShort(trimmed.len()));
        }
        Ok(Secret(trimmed.to_vec()))
    }

    /// The bearer token of the filter API (hex of a derived key).
    pub fn agent_token(&self) -> String {
        hex(&self.derive(TOKEN_LABEL))
    }

    /// The keyed hash that names keys in telemetry and in the store.
    pub fn key_ids(&self) -> KeyIds {
        KeyIds::keyed(self.derive(KEY_ID_LABEL))
    }

    /// The keyed hash of the filter's shared-data slots.
    pub fn slot_hasher(&self) -> SlotHasher {
        let d = self.derive(SLOT_LABEL);
        SlotHasher {
            k0: u64::from_le_bytes(first8(&d[..8])),
            k1: u64::from_le_bytes(first8(&d[8..16])),
        }
    }

    /// The MAC of control state in the store.
    pub fn control_mac(&self) -> ControlMac {
        ControlMac {
            key: self.derive(CONTROL_LABEL),
        }
    }

    fn derive(&self, label: &[u8]) -> [u8; 32] {
        hmac(&self.0, &[label])
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<{} bytes, redacted>)", self.0.len())
    }
}

/// Checks a presented bearer token against the expected one in constant time
/// (the comparison's duration does not depend on where the two differ).
pub fn token_matches(presented: &[u8], expected: &str) -> bool {
    let expected = expected.as_bytes();
    if presented.len() != expected.len() {
        return false;
    }
    presented
        .iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// Authenticates a record of control state: HMAC-SHA-256 over its parts, each
/// prefixed by its length (so no two lists of parts share a MAC), in hex.
#[derive(Clone, PartialEq, Eq)]
pub struct ControlMac {
    key: [u8; 32],
}

impl ControlMac {
    /// The MAC of `parts`, 64 lowercase hex characters.
    pub fn sign(&self, parts: &[&[u8]]) -> String {
        let lengths: Vec<[u8; 8]> = parts
            .iter()
            .map(|p| (p.len() as u64).to_be_bytes())
            .collect();
        let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() * 2);
        for (len, part) in lengths.iter().zip(parts) {
            all.push(len);
            all.push(part);
        }
        hex(&hmac(&self.key, &all))
    }

    /// Whether `mac` is the MAC of `parts` (compared in constant time).
    pub fn verifies(&self, parts: &[&[u8]], mac: &str) -> bool {
        token_matches(mac.as_bytes(), &self.sign(parts))
    }
}

impl fmt::Debug for ControlMac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ControlMac(<redacted>)")
    }
}

/// Names keys by a keyed hash: HMAC-SHA-256 truncated to 128 bits, so ids are
/// collision-free in practice (a Redis key name is one bucket: two keys must never
/// share one) and cannot be mapped back without the secret.
#[derive(Clone)]
pub struct KeyIds {
    key: [u8; 32],
    /// HMAC's keyed state, set up once: an id then hashes only the key's
    /// blocks, not the two of the secret's pads as well.
    mac: HmacSha256,
}

impl PartialEq for KeyIds {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for KeyIds {}

impl KeyIds {
    /// Ids keyed by a fixed, public key: for tests and tools that have no
    /// secret. They still never show a key in clear, but anyone can compute them.
    pub fn placeholder() -> KeyIds {
        KeyIds::keyed(hmac(b"meshlimit placeholder", &[KEY_ID_LABEL]))
    }

    fn keyed(key: [u8; 32]) -> KeyIds {
        // HMAC pads a key shorter than SHA-256's 64-byte block with zeros, so
        // the padded block is the same key, taken without a fallible call.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&key);
        let mac = <HmacSha256 as hmac::digest::KeyInit>::new(&block.into());
        KeyIds { key, mac }
    }

    /// The id of `key`.
    pub fn id(&self, key: &DescriptorKey) -> KeyId {
        let mac: [u8; 32] = self
            .mac
            .clone()
            .chain_update(key.as_str().as_bytes())
            .finalize()
            .into_bytes()
            .into();
        KeyId(u128::from_be_bytes(first16(&mac)))
    }
}

impl fmt::Debug for KeyIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyIds(<redacted>)")
    }
}

/// A key's id: 32 lowercase hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(u128);

impl KeyId {
    /// The id's text, on the stack: the filter names a key by it on every
    /// request it decides, where formatting a `u128` costs more than the rest.
    ///
    /// Written a byte at a time: a `u128` shift is a call into the
    /// compiler's runtime in Wasm, and one per digit cost a new key's
    /// request about 1,900 instructions (`make wasm-cost`).
    pub fn text(&self) -> KeyIdText {
        let mut out = [b'0'; 32];
        for (pair, byte) in out
            .as_chunks_mut::<2>()
            .0
            .iter_mut()
            .zip(self.0.to_be_bytes())
        {
            *pair = HEX_PAIRS[usize::from(byte)];
        }
        KeyIdText(out)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text().as_str())
    }
}

/// Each byte's two lowercase hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    let mut pairs = [[0; 2]; 256];
    let mut b = 0;
    while b < 256 {
        pairs[b] = [HEX_LOWER[b >> 4], HEX_LOWER[b & 0xf]];
        b += 1;
    }
    pairs
};

/// A key id's 32 lowercase hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyIdText([u8; 32]);

impl KeyIdText {
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits were written.
        crate::text::utf8(&self.0).unwrap_or_default()
    }
}

/// SipHash-1-3 keyed by the secret: picks a key's shared-data slot and the
/// fingerprint that tells the slot's owner. Fast (it runs per rule per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotHasher {
    k0: u64,
    k1: u64,
}

impl SlotHasher {
    /// Without a secret (a filter that was given none: it cannot reach an
    /// authenticated agent either, so it runs on failure policies only).
    pub const UNKEYED: SlotHasher = SlotHasher {
        k0: 0x6d65_7368_6c69_6d69,
        k1: 0x7420_736c_6f74_7321,
    };

    pub fn fingerprint(&self, key: &DescriptorKey) -> u64 {
        use std::hash::Hasher;
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(key.as_str().as_bytes());
        h.finish()
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
        return [0; 32];
    };
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

fn first8(b: &[u8]) -> [u8; 8] {
    let mut out = [0; 8];
    out.copy_from_slice(&b[..8]);
    out
}

fn first16(b: &[u8]) -> [u8; 16] {
    let mut out = [0; 16];
    out.copy_from_slice(&b[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> Secret {
        Secret::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn short_secrets_are_refused_and_whitespace_is_not_part_of_one() {
        assert_eq!(Secret::new(b"short"), Err(SecretError::TooShort(5)));
        let a = secret(&"a".repeat(32));
        let b = secret(&format!("  {}\n", "a".repeat(32)));
        assert_eq!(a, b);
        assert_eq!(format!("{a:?}"), "Secret(<32 bytes, redacted>)");
        assert_eq!(format!("{:?}", a.key_ids()), "KeyIds(<redacted>)");
    }

    #[test]
    fn derived_values_differ_by_secret_and_by_purpose() {
        let a = secret(&"a".repeat(32));
        let b = secret(&"b".repeat(32));
        assert_ne!(a.agent_token(), b.agent_token());
        let key = DescriptorKey::new("r", ["customer-1"]);
        assert_ne!(a.key_ids().id(&key), b.key_ids().id(&key));
        assert_ne!(
            a.slot_hasher().fingerprint(&key),
            b.slot_hasher().fingerprint(&key)
        );
        // The token does not reveal the key-id key: they are separate derivations.
        assert_ne!(a.agent_token(), hex(&a.key_ids().key));
        let id = a.key_ids().id(&key).to_string();
        assert_eq!(id.len(), 32);
        assert!(!id.contains("customer"));
    }

    #[test]
    fn a_control_mac_binds_its_key_and_every_part_with_its_boundaries() {
        let a = secret(&"a".repeat(32)).control_mac();
        let mac = a.sign(&[b"override", b"x y"]);
        assert_eq!(mac.len(), 64);
        assert!(a.verifies(&[b"override", b"x y"], &mac));
        // Another secret, another part, or the same bytes split elsewhere.
        assert!(!secret(&"b".repeat(32))
            .control_mac()
            .verifies(&[b"override", b"x y"], &mac));
        assert!(!a.verifies(&[b"override", b"x z"], &mac));
        assert!(!a.verifies(&[b"overridex", b" y"], &mac));
        assert!(!a.verifies(&[b"override", b"x y"], &mac[..63]));
        // Not the key-id key nor the token: a derivation of its own.
        assert_ne!(hex(&a.key), a_token_of(&"a".repeat(32)));
        assert_eq!(format!("{a:?}"), "ControlMac(<redacted>)");
    }

    fn a_token_of(s: &str) -> String {
        secret(s).agent_token()
    }

    #[test]
    fn tokens_are_compared_whole() {
        let t = secret(&"a".repeat(32)).agent_token();
        assert!(token_matches(t.as_bytes(), &t));
        assert!(!token_matches(&t.as_bytes()[..10], &t));
        let mut wrong = t.clone().into_bytes();
        wrong[63] ^= 1;
        assert!(!token_matches(&wrong, &t));
        assert!(!token_matches(b"", &t));
        // Two differences that would cancel out if combined by XOR.
        assert!(!token_matches(b"ab", "ba"));
    }

    #[test]
    fn a_key_id_is_the_truncated_hmac_of_the_key_whatever_its_length() {
        // Ids name Redis keys: the set-up-once state must give the ids a
        // whole HMAC gives, or a release would orphan every bucket.
        let ids = secret("0123456789abcdef0123456789abcdef").key_ids();
        for len in [0, 1, 55, 56, 64, 200] {
            let key = DescriptorKey::new("r", ["x".repeat(len)]);
            let whole = hmac(&ids.key, &[key.as_str().as_bytes()]);
            assert_eq!(ids.id(&key).to_string(), hex(&whole[..16]), "{len}");
        }
        assert_eq!(ids, secret("0123456789abcdef0123456789abcdef").key_ids());
        assert_ne!(ids, KeyIds::placeholder());
    }

    #[test]
    fn a_key_ids_text_is_its_32_hex_digits() {
        let values = [
            0u128,
            1,
            0xabc,
            1 << 127,
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ];
        for v in values {
            assert_eq!(KeyId(v).text().as_str(), format!("{v:032x}"));
            assert_eq!(KeyId(v).to_string(), format!("{v:032x}"));
        }
    }

    #[test]
    fn hmac_matches_the_published_test_vector() {
        // RFC 4231, test case 2.
        let mac = hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
