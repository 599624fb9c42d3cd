//! Deterministic, platform-independent 64-bit mixing: the only source of "randomness" in the
//! mocker. (`std`'s hashers are not guaranteed stable across Rust releases; these are.)

/// The splitmix64 finaliser: a bijective avalanche of `x`.
pub(crate) fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Order-dependent combination of a running hash with one more value.
pub(crate) fn combine(h: u64, v: u64) -> u64 {
    mix(h.rotate_left(29) ^ mix(v))
}

/// Hash of a byte string, folded into `h`.
pub(crate) fn combine_bytes(h: u64, bytes: &[u8]) -> u64 {
    let mut h = combine(h, bytes.len() as u64);
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = combine(h, u64::from_le_bytes(word));
    }
    h
}

/// A uniform number in `[0, 1)` from a hash (53 random bits).
pub(crate) fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Domain tags, so different uses of the same hash never correlate.
pub(crate) mod tag {
    pub(crate) const CONTEXT: u64 = 0x636f_6e74_6578_7401;
    pub(crate) const DIST: u64 = 0x6469_7374_0000_0002;
    pub(crate) const EOS: u64 = 0x656f_7300_0000_0003;
    pub(crate) const SAMPLE: u64 = 0x7361_6d70_6c65_0004;
    pub(crate) const CACHE: u64 = 0x6361_6368_6500_0005;
    pub(crate) const EXPERTS: u64 = 0x6578_7065_7274_0006;
}

#[cfg(test)]
mod tests {
    use super::{combine, combine_bytes, mix, unit};

    #[test]
    fn mixing_is_stable_across_releases() {
        // Pinned values: changing them changes every mock output, which fixtures may rely on.
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_ne!(combine(1, 2), combine(2, 1));
        assert_ne!(combine_bytes(0, b"a"), combine_bytes(0, b"a\0"));
    }

    #[test]
    fn unit_is_in_range() {
        for h in [0, 1, u64::MAX, mix(7)] {
            let u = unit(h);
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }
}
