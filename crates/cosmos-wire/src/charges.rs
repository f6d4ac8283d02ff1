//! What Cosmos DB charges for a write, in request units, as Microsoft publishes it
//! ("Understand request units consumption", learn.microsoft.com, 2026-04): a size-based
//! charge, and 0.2 RU per indexed term the write adds or removes, the terms being those the
//! container's indexing policy makes of the document ([`crate::indexing`]):
//! - create: `size + 0.2 × terms` ("a 1-KB document with 10 indexed terms: 5.0 + 0.2 × 10 =
//!   7 RUs");
//! - replace (and upsert of an existing id): `size(old) + size(new) + 0.2 × (terms removed +
//!   terms added)` ("two modified indexed terms: 5.0 + 5.0 + 0.2 × 2 + 0.2 × 2 = 10.8 RUs");
//! - patch: the replace, plus 0.4 per modified indexed term ("+ 0.4 * 2 (base charge for
//!   patch) = 11.6 RUs"; the page counts the two modified terms, so this does);
//! - delete: `size + 0.2 × terms` ("5.0 + 0.2 × 10 = 7.0 RUs").
//!
//! The size-based charge is the page's write column by document size (1 KB: 5.0 as the
//! examples use it, where the table says 4.95; 2 KB: 6.29; 4 KB: 6.67; ... 2,048 KB: 1,250),
//! linear between rows and at least the 1 KB figure. One region; each further region
//! replicates the write and is charged again.

const KB: f64 = 1024.0;

/// The write column of the size table: (KB, RU), 1 KB as the page's examples charge it.
const WRITE_BY_SIZE: [(f64, f64); 12] = [
    (1.0, 5.0),
    (2.0, 6.29),
    (4.0, 6.67),
    (8.0, 7.04),
    (16.0, 9.52),
    (32.0, 11.23),
    (64.0, 22.67),
    (128.0, 48.19),
    (256.0, 98.29),
    (512.0, 184.57),
    (1024.0, 625.0),
    (2048.0, 1250.0),
];

/// RU per indexed term a write adds or removes.
const PER_TERM: f64 = 0.2;

/// A patch's base charge per modified indexed term.
const PATCH_PER_TERM: f64 = 0.4;

/// The size-based part of a write of a document of `bytes` bytes.
fn write_size(bytes: usize) -> f64 {
    let kb = bytes as f64 / KB;
    let mut below = WRITE_BY_SIZE[0];
    for row in WRITE_BY_SIZE {
        if kb <= row.0 {
            if kb <= below.0 {
                return below.1;
            }
            return below.1 + (row.1 - below.1) * (kb - below.0) / (row.0 - below.0);
        }
        below = row;
    }
    below.1 * kb / below.0
}

/// Indexed terms a write changes: those the old document had and the new one has not, and
/// the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TermChanges {
    /// Terms removed from the index.
    pub removed: usize,
    /// Terms added to the index.
    pub added: usize,
}

/// Charge of creating a document of `bytes` bytes with `terms` indexed terms.
pub fn create(bytes: usize, terms: usize) -> f64 {
    round(write_size(bytes) + PER_TERM * terms as f64)
}

/// Charge of replacing a document of `old_bytes` with one of `new_bytes` (replace, upsert of
/// an existing id).
pub fn replace(old_bytes: usize, new_bytes: usize, terms: TermChanges) -> f64 {
    round(
        write_size(old_bytes)
            + write_size(new_bytes)
            + PER_TERM * (terms.removed + terms.added) as f64,
    )
}

/// Charge of patching a document of `old_bytes` into one of `new_bytes`: the replace and
/// the patch's base charge for each modified term.
pub fn patch(old_bytes: usize, new_bytes: usize, terms: TermChanges) -> f64 {
    let modified = terms.removed.max(terms.added);
    round(replace(old_bytes, new_bytes, terms) + PATCH_PER_TERM * modified as f64)
}

/// Charge of deleting a document of `bytes` bytes with `terms` indexed terms.
pub fn delete(bytes: usize, terms: usize) -> f64 {
    create(bytes, terms)
}

fn round(ru: f64) -> f64 {
    (ru * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples of "Understand request units consumption", each for a 1-KB document.
    #[test]
    fn writes_cost_what_the_published_examples_say() {
        let two = TermChanges {
            removed: 2,
            added: 2,
        };
        assert_eq!(create(1024, 10), 7.0, "create, 10 indexed terms");
        assert_eq!(replace(1024, 1024, two), 10.8, "replace, 2 modified terms");
        assert_eq!(patch(1024, 1024, two), 11.6, "patch, 2 modified terms");
        assert_eq!(delete(1024, 10), 7.0, "delete, 10 indexed terms");
        // The size table's write column, without indexing; smaller documents as 1 KB.
        for (kb, ru) in [
            (2, 6.29),
            (4, 6.67),
            (64, 22.67),
            (128, 48.19),
            (2048, 1250.0),
        ] {
            assert_eq!(create(kb * 1024, 0), ru, "{kb} KB");
        }
        assert_eq!(create(300, 0), 5.0);
        assert_eq!(create(3 * 1024, 0), 6.48, "between the 2 and 4 KB rows");
    }
}
