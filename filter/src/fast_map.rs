//! The VM's maps, hashed by FNV-1a rather than the standard library's
//! SipHash, which costs the filter's Wasm about a thousand instructions a
//! lookup. No client chooses their keys: rule names are the operator's,
//! context ids the host's, and fingerprints are already a hash keyed by the
//! deployment secret of what a client sends, so nobody can aim keys at one
//! bucket of the map.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<Fnv>>;

/// FNV-1a, 64-bit; a whole integer is mixed in as one word. The result goes
/// through MurmurHash3's 64-bit finalizer, so that both ends of the hash the
/// map's table reads (the top bits, the low bits) depend on every input bit.
pub struct Fnv(u64);

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

impl Default for Fnv {
    fn default() -> Self {
        Fnv(OFFSET)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(PRIME);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(PRIME);
    }

    fn finish(&self) -> u64 {
        let mut h = self.0;
        h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h = (h ^ (h >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn fnv_1a_of_bytes_is_the_published_function() {
        // FNV-1a 64 of "a" and of "foobar", from the algorithm's test vectors.
        let hash = |s: &str| BuildHasherDefault::<Fnv>::default().hash_one(s.as_bytes());
        let mut h = Fnv::default();
        h.write(b"a");
        assert_eq!(h.0, 0xaf63_dc4c_8601_ec8c);
        let mut h = Fnv::default();
        h.write(b"foobar");
        assert_eq!(h.0, 0x8594_4171_f739_67e8);
        assert_ne!(hash("a"), hash("b"));
    }

    #[test]
    fn nearby_integers_spread_over_the_high_bits() {
        let top = |n: u64| BuildHasherDefault::<Fnv>::default().hash_one(n) >> 57;
        let tops: FastSet<u64> = (0..64).map(top).collect();
        assert!(tops.len() > 36, "{} of 128 top-7-bit values", tops.len());
        let low = |n: u64| BuildHasherDefault::<Fnv>::default().hash_one(n) % 64;
        let lows: FastSet<u64> = (0..64).map(low).collect();
        assert!(lows.len() > 36, "{} of 64 low-6-bit values", lows.len());
    }
}
