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
    mix64(fnv1a(bytes))
}

/// SplitMix64's finaliser: every bit of the result depends on every bit of `h`.
pub fn mix64(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// SplitMix64 (Steele, Lea and Flood; Vigna's reference): the next draw of
/// `state`. The samplers' generator: uniform enough for a sampling rate, and
/// no clock or hostcall.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    mix64(*state)
}

/// A uniform draw in [0, 1) from `state` (53 bits of [`splitmix64`]).
pub fn uniform(state: &mut u64) -> f64 {
    (splitmix64(state) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_draws_the_reference_sequence() {
        // The reference implementation's first draws for state 1234567.
        let mut state = 1_234_567;
        assert_eq!(
            [(); 3].map(|()| splitmix64(&mut state)),
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423
            ]
        );
        let u = uniform(&mut state);
        assert!((0.0..1.0).contains(&u), "{u}");
    }

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
