//! A small, stable 64-bit hash (FNV-1a). Stable across builds, targets and Rust
//! versions, unlike `std`'s hasher, because the filter and the agent may be built
//! apart and must name the same key and the same rules version.

/// FNV-1a over `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// A 64-bit hash finished with a mixer, so that the low bits (used to pick a shared
/// data slot) depend on every input byte.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h = fnv1a(bytes);
    // splitmix64 finaliser
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_do_not_drift() {
        // Published FNV-1a test vectors: a drift here would split filter and agent.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fingerprint(b"a"), fingerprint(b"b"));
        // The mixer too: filter and agent pick slots and shards from it.
        assert_eq!(fingerprint(b""), 0xf52a_15e9_a9b5_e89b);
        assert_eq!(fingerprint(b"a"), 0x02c0_bdbf_4814_20f8);
        assert_eq!(fingerprint(b"search|k1"), 0x9eaf_0de1_b129_d5ca);
    }
}
