//! The effective partition key (EPK) of hash version 2, and the arithmetic of partition key
//! ranges over the EPK space.
//!
//! An EPK is 32 uppercase hex digits. For one string component the hashed bytes are
//! `0x08 ++ utf8(value) ++ 0xFF`; the hash is MurmurHash3 x64 128-bit with seed 0, its bytes
//! reversed, with the top two bits cleared. So every EPK lies in `[0, 2^126)`; ranges are written
//! as `[minInclusive, maxExclusive)` with `""` for the start of the space and `"FF"` for its end.
//!
//! A document without the container's partition key property lives in the *undefined* logical
//! partition (`[{}]` on the wire); its hashed bytes are the single type marker `0x00`.

/// The EPK of a single string partition key (hash version 2) as a number in `[0, 2^126)`:
/// the same order as the hex form ([`u128_to_boundary`] writes it), cheaper to compare.
pub fn epk_u128_of_str(value: &str) -> u128 {
    let mut bytes = Vec::with_capacity(value.len() + 2);
    bytes.push(0x08);
    bytes.extend_from_slice(value.as_bytes());
    bytes.push(0xFF);
    epk_hash(&bytes)
}

/// The EPK of the undefined partition key (hash version 2), as a number: the logical partition of documents
/// that lack the container's partition key property, addressed as `[{}]` in the
/// `x-ms-documentdb-partitionkey` header and in batch operations.
///
/// Hash v2 writes an undefined component as its type marker alone, the byte `0x00`
/// (`UndefinedPartitionKeyComponent.WriteForHashingV2` in azure-cosmos-dotnet-v3 and
/// `writeForHashingV2` in the Java SDK's `UndefinedPartitionKeyComponent`); a string component
/// is the marker `0x08`, the UTF-8 bytes and `0xFF`. The Java SDK's `PartitionKeyHashingTests`
/// (`effectivePartitionKeyHashV2`, Azure/azure-sdk-for-java) gives `Undefined.Value()` the
/// EPK `11622DAA78F835834610ABE56EFF5CB5`, which the unit test checks.
pub fn epk_u128_of_undefined() -> u128 {
    epk_hash(&[UNDEFINED_MARKER])
}

/// The hash v2 type marker of an undefined partition key component.
const UNDEFINED_MARKER: u8 = 0x00;

/// The exclusive upper end of the EPK space as a number (all hash v2 EPKs are below it).
pub const EPK_SPACE_END: u128 = 1 << 126;

/// Parses a range boundary into a number: `""` is 0, `"FF"` (the end of the space) and anything
/// at or above it is [`EPK_SPACE_END`]; shorter strings are padded with zeros on the right.
/// `None` if it is not hex or longer than 32 digits.
pub fn boundary_to_u128(boundary: &str) -> Option<u128> {
    if boundary.is_empty() {
        return Some(0);
    }
    if boundary.len() > 32 || !boundary.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut padded = boundary.to_string();
    padded.extend(std::iter::repeat_n('0', 32 - boundary.len()));
    let n = u128::from_str_radix(&padded, 16).ok()?;
    Some(n.min(EPK_SPACE_END))
}

/// Writes a number as a range boundary: 0 is `""`, [`EPK_SPACE_END`] or more is `"FF"`, anything
/// else 32 uppercase hex digits.
pub fn u128_to_boundary(n: u128) -> String {
    if n == 0 {
        String::new()
    } else if n >= EPK_SPACE_END {
        "FF".to_string()
    } else {
        format!("{n:032X}")
    }
}

/// Splits the EPK space into `n` ranges of equal width, as `(minInclusive, maxExclusive)`.
pub fn even_ranges(n: usize) -> Vec<(String, String)> {
    assert!(n > 0, "at least one range");
    let width = EPK_SPACE_END / n as u128;
    (0..n)
        .map(|i| {
            let lo = width * i as u128;
            let hi = if i + 1 == n {
                EPK_SPACE_END
            } else {
                lo + width
            };
            (u128_to_boundary(lo), u128_to_boundary(hi))
        })
        .collect()
}

/// MurmurHash3 x64 128-bit (seed 0), byte-reversed as the SDKs do, top two bits cleared.
fn epk_hash(data: &[u8]) -> u128 {
    let (h1, h2) = murmur3_x64_128(data, 0);
    // The SDKs take the hash as the 16 bytes h1 (LE) ++ h2 (LE) and reverse them, so the
    // number read big-endian is (h2 << 64) | h1.
    let n = ((h2 as u128) << 64) | h1 as u128;
    n & (u128::MAX >> 2)
}

/// MurmurHash3 x64 128-bit, returning `(h1, h2)`.
fn murmur3_x64_128(data: &[u8], seed: u64) -> (u64, u64) {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let (mut h1, mut h2) = (seed, seed);
    let blocks = data.len() / 16;
    for i in 0..blocks {
        let b = &data[i * 16..i * 16 + 16];
        let mut k1 = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let mut k2 = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = &data[blocks * 16..];
    let (mut k1, mut k2) = (0u64, 0u64);
    for (i, &byte) in tail.iter().enumerate() {
        if i < 8 {
            k1 |= (byte as u64) << (8 * i);
        } else {
            k2 |= (byte as u64) << (8 * (i - 8));
        }
    }
    if tail.len() > 8 {
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
    }
    if !tail.is_empty() {
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
    }
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1, h2)
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn published_hash_v2_vectors() {
        let hex = |key: &str| u128_to_boundary(epk_u128_of_str(key));
        assert_eq!(hex("redmond"), "22E342F38A486A088463DFF7838A5963");
        assert_eq!(hex(""), "32E9366E637A71B4E710384B2F4970A0");
        assert_eq!(hex("aa"), "05033626483AE80D00E44FBD35362B19");
        assert_eq!(hex(&"a".repeat(110)), "0BA3E9CA8EE4C14538828D1612A4B652");
    }

    #[test]
    fn undefined_key_vector() {
        // Azure/azure-sdk-for-java PartitionKeyHashingTests.effectivePartitionKeyHashV2.
        assert_eq!(
            u128_to_boundary(epk_u128_of_undefined()),
            "11622DAA78F835834610ABE56EFF5CB5"
        );
        // Not the EPK of any string spelling of it.
        for s in ["", "{}", "undefined", "null"] {
            assert_ne!(epk_u128_of_str(s), epk_u128_of_undefined());
        }
    }

    #[test]
    fn murmur3_reference_values() {
        // Reference outputs of the canonical MurmurHash3_x64_128 (seed 0).
        assert_eq!(murmur3_x64_128(b"", 0), (0, 0));
        assert_eq!(
            murmur3_x64_128(b"hello", 0),
            (0xcbd8_a7b3_41bd_9b02, 0x5b1e_906a_48ae_1d19)
        );
    }

    #[test]
    fn even_ranges_cover_the_space() {
        let ranges = even_ranges(4);
        assert_eq!(ranges.len(), 4);
        assert_eq!(ranges[0].0, "");
        assert_eq!(ranges[3].1, "FF");
        for pair in ranges.windows(2) {
            assert_eq!(pair[0].1, pair[1].0);
        }
        assert_eq!(ranges[1].0, "10000000000000000000000000000000");
    }

    proptest! {
        #[test]
        fn every_key_falls_in_exactly_one_even_range(key in ".{0,64}", n in 1usize..64) {
            let epk = epk_u128_of_str(&key);
            let hits = even_ranges(n)
                .iter()
                .filter(|(lo, hi)| {
                    boundary_to_u128(lo) <= Some(epk) && Some(epk) < boundary_to_u128(hi)
                })
                .count();
            prop_assert_eq!(hits, 1);
        }

        #[test]
        fn numeric_and_hex_forms_agree(key in ".{0,64}") {
            let epk = epk_u128_of_str(&key);
            prop_assert!(epk < EPK_SPACE_END);
            prop_assert_eq!(boundary_to_u128(&u128_to_boundary(epk)), Some(epk));
        }
    }
}
