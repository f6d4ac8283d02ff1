//! The partition key range map of a container: which physical range owns a key, found by a
//! binary search over the ranges' lower EPK boundaries.

use cosmos_wire::epk::{EPK_SPACE_END, boundary_to_u128};
use cosmos_wire::resources::PartitionKeyRange;

use crate::{CosmosError, PartitionKey};

/// The current partition key ranges of a container, sorted by their lower boundary and
/// covering the whole EPK space without gaps or overlaps.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeMap {
    ranges: Vec<PartitionKeyRange>,
    /// `starts[i]` is the lower boundary of `ranges[i]` as a number.
    starts: Vec<u128>,
}

impl RangeMap {
    /// Builds the map from a pkranges feed. Ranges named as the parent of another range (which
    /// a feed may still list during a split) are left out. Fails if the remaining ranges do not
    /// tile the EPK space.
    pub fn new(ranges: Vec<PartitionKeyRange>) -> Result<Self, CosmosError> {
        let parents: std::collections::HashSet<&str> = ranges
            .iter()
            .flat_map(|r| r.parents.iter().map(String::as_str))
            .collect();
        let mut bounded = Vec::with_capacity(ranges.len());
        for range in &ranges {
            if parents.contains(range.id.as_str()) {
                continue;
            }
            let bad = || {
                CosmosError::Protocol(format!(
                    "partition key range {} has invalid boundaries [{:?}, {:?})",
                    range.id, range.min_inclusive, range.max_exclusive
                ))
            };
            let lo = boundary_to_u128(&range.min_inclusive).ok_or_else(bad)?;
            let hi = boundary_to_u128(&range.max_exclusive).ok_or_else(bad)?;
            if lo >= hi {
                return Err(bad());
            }
            bounded.push((lo, hi, range.clone()));
        }
        bounded.sort_by_key(|(lo, _, _)| *lo);
        let mut expected = 0u128;
        for (lo, hi, range) in &bounded {
            if *lo != expected {
                return Err(CosmosError::Protocol(format!(
                    "partition key ranges leave a gap or overlap at range {}",
                    range.id
                )));
            }
            expected = *hi;
        }
        if expected != EPK_SPACE_END {
            return Err(CosmosError::Protocol(
                "partition key ranges do not cover the whole key space".to_string(),
            ));
        }
        let starts = bounded.iter().map(|(lo, _, _)| *lo).collect();
        let ranges = bounded.into_iter().map(|(_, _, r)| r).collect();
        Ok(Self { ranges, starts })
    }

    /// The ranges, in key order.
    pub fn ranges(&self) -> &[PartitionKeyRange] {
        &self.ranges
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Always false: a valid map covers the key space with at least one range.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Index (into [`Self::ranges`]) of the range that holds an EPK given as a number.
    pub(crate) fn index_of_epk(&self, epk: u128) -> usize {
        // The first range starts at 0, so the partition point is at least 1.
        self.starts.partition_point(|start| *start <= epk) - 1
    }

    /// The range that holds a partition key (every undefined key is in the same one).
    pub fn range_of_key(&self, key: &PartitionKey) -> &PartitionKeyRange {
        &self.ranges[self.index_of_epk(key.epk())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosmos_wire::epk::{epk_u128_of_str, epk_u128_of_undefined, even_ranges, u128_to_boundary};
    use proptest::prelude::*;

    fn range(id: &str, min: &str, max: &str, parents: &[&str]) -> PartitionKeyRange {
        PartitionKeyRange {
            id: id.to_string(),
            min_inclusive: min.to_string(),
            max_exclusive: max.to_string(),
            parents: parents.iter().map(|p| p.to_string()).collect(),
        }
    }

    /// Whether `epk` lies in `range`, its boundaries compared as strings, the way the
    /// service compares them.
    fn in_range(epk: u128, range: &PartitionKeyRange) -> bool {
        let epk = u128_to_boundary(epk);
        range.min_inclusive <= epk && (range.max_exclusive == "FF" || epk < range.max_exclusive)
    }

    fn even_map(n: usize) -> RangeMap {
        let ranges = even_ranges(n)
            .into_iter()
            .enumerate()
            .map(|(i, (lo, hi))| range(&i.to_string(), &lo, &hi, &[]))
            .collect();
        RangeMap::new(ranges).unwrap()
    }

    #[test]
    fn looks_up_published_vectors() {
        // "redmond" hashes to 22E3..., "aa" to 0503...: with the space cut at 1000... they
        // land in the second and the first range.
        let map = RangeMap::new(vec![
            range("7", "10000000000000000000000000000000", "FF", &[]),
            range("3", "", "10000000000000000000000000000000", &[]),
        ])
        .unwrap();
        assert_eq!(map.ranges()[0].id, "3", "sorted by lower boundary");
        assert_eq!(map.range_of_key(&"redmond".into()).id, "7");
        assert_eq!(map.range_of_key(&"aa".into()).id, "3");
    }

    #[test]
    fn undefined_keys_all_map_to_the_range_of_the_undefined_epk() {
        // The undefined key hashes to 1162...: with 10 even ranges of width 0666... that is
        // the third one, [0CCC..., 1333...), whatever document lacks the key.
        let map = even_map(10);
        let found = map.range_of_key(&PartitionKey::Undefined);
        assert_eq!(found.id, "2");
        assert!(in_range(epk_u128_of_undefined(), found));
    }

    #[test]
    fn parents_of_split_ranges_are_dropped() {
        let mid = u128_to_boundary(EPK_SPACE_END / 2);
        let map = RangeMap::new(vec![
            range("0", "", "FF", &[]),
            range("1", "", &mid, &["0"]),
            range("2", &mid, "FF", &["0"]),
        ])
        .unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map.ranges()[1].id, "2");
    }

    #[test]
    fn rejects_gaps_overlaps_and_partial_cover() {
        let gap = RangeMap::new(vec![range("0", "", "10", &[]), range("1", "20", "FF", &[])]);
        assert!(matches!(gap, Err(CosmosError::Protocol(_))));
        let short = RangeMap::new(vec![range("0", "", "10", &[])]);
        assert!(matches!(short, Err(CosmosError::Protocol(_))));
        let empty = RangeMap::new(vec![]);
        assert!(matches!(empty, Err(CosmosError::Protocol(_))));
        let garbage = RangeMap::new(vec![range("0", "", "zz", &[])]);
        assert!(matches!(garbage, Err(CosmosError::Protocol(_))));
    }

    proptest! {
        #[test]
        fn lookup_agrees_with_string_comparison(key in ".{0,40}", n in 1usize..40) {
            let map = even_map(n);
            let found = map.range_of_key(&key.as_str().into());
            prop_assert!(in_range(epk_u128_of_str(&key), found));
        }
    }
}
