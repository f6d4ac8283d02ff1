//! The hasher of the writer's per-drone maps (the pipeline's coalescer, the sink's
//! high-water marks).

use std::hash::{BuildHasherDefault, Hasher};

/// A fast, non-cryptographic hasher for device ids: eight bytes at a time, each mixed in
/// with a folded multiply (the 128-bit product's halves xored, as foldhash and ahash do),
/// which carries every input bit into both halves of the state. Device ids are
/// authenticated identities and every map keyed by them is bounded, so SipHash's
/// protection against chosen collisions is not worth its cost per message.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeviceHasher(u64);

/// Builds [`DeviceHasher`]s, for `HashMap<String, _, BuildDeviceHasher>`.
pub type BuildDeviceHasher = BuildHasherDefault<DeviceHasher>;

impl DeviceHasher {
    /// The digits of pi: odd, no structure.
    const K: u64 = 0x243f_6a88_85a3_08d3;

    fn add(&mut self, word: u64) {
        let product = u128::from(self.0 ^ word) * u128::from(Self::K);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for DeviceHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        // `str`'s Hash writes a 0xff terminator after the bytes.
        self.add(u64::from(byte));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

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
