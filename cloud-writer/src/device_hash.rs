//! The hasher of the writer's per-drone maps (the pipeline's coalescer, the sink's
//! high-water marks): rustc-hash's Fx hasher, the one the workspace already uses.
//!
//! Device ids are authenticated identities and every map keyed by them is bounded, so
//! SipHash's protection against chosen collisions is not worth its cost per message. Fx is
//! also faster than the hand-written multiply-fold hasher this replaced: a lookup in a map
//! of 10,000 `drone-NNNNN` ids took 7 ns against 35 ns (SipHash 21 ns; release build,
//! best of 7 rounds of 500,000 lookups).

/// Builds the hashers of `HashMap<String, _, BuildDeviceHasher>`.
pub type BuildDeviceHasher = rustc_hash::FxBuildHasher;

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn device_hashes_spread_over_the_low_bits() {
        let mut buckets = vec![0u32; 1024];
        let mut hashes = std::collections::HashSet::new();
        for i in 0..16_384 {
            let hash = BuildDeviceHasher::default().hash_one(format!("drone-{i:05}"));
            assert!(hashes.insert(hash), "a collision at drone-{i:05}");
            buckets[(hash & 1023) as usize] += 1;
        }
        // 16 per bucket on average; a hash that kept the id's structure in the low bits
        // would pile them up.
        assert!(buckets.iter().all(|&n| n <= 48), "{buckets:?}");
    }
}
