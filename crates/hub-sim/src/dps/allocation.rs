//! Allocation: which linked hub a new registration is assigned to. Pure.
//!
//! `Hashed` is the service's `hashed` policy (the portal's "evenly weighted distribution"):
//! a registration id always maps to the same hub, and ids spread evenly in expectation.
//! `EvenlyDistributed` gives each new registration to the hub with the fewest registrations
//! so far, so that any fleet splits exactly (to one device) over the linked hubs.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// How the provisioning service picks a hub among the linked ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Allocation {
    /// By a hash of the registration id (stable across restarts and processes).
    #[default]
    Hashed,
    /// To the linked hub with the fewest registrations.
    EvenlyDistributed,
}

/// The index of the hub a new registration goes to, given how many registrations each
/// linked hub holds now. `assigned` is not empty.
pub fn choose(policy: Allocation, registration_id: &str, assigned: &[usize]) -> usize {
    assert!(
        !assigned.is_empty(),
        "a provisioning service has a linked hub"
    );
    match policy {
        Allocation::Hashed => {
            let digest = Sha256::digest(registration_id.as_bytes());
            let head = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
            (head % assigned.len() as u64) as usize
        }
        Allocation::EvenlyDistributed => assigned
            .iter()
            .enumerate()
            .min_by_key(|&(index, count)| (*count, index))
            .map(|(index, _)| index)
            .expect("not empty"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(policy: Allocation, hubs: usize, devices: usize) -> Vec<usize> {
        let mut assigned = vec![0; hubs];
        for i in 0..devices {
            let hub = choose(policy, &format!("drone-{i}"), &assigned);
            assigned[hub] += 1;
        }
        assigned
    }

    #[test]
    fn evenly_distributed_splits_exactly_and_fills_the_emptiest_hub_first() {
        assert_eq!(spread(Allocation::EvenlyDistributed, 2, 200), [100, 100]);
        assert_eq!(spread(Allocation::EvenlyDistributed, 3, 7), [3, 2, 2]);
        assert_eq!(choose(Allocation::EvenlyDistributed, "x", &[5, 2, 2]), 1);
    }

    #[test]
    fn hashed_is_stable_and_spreads_a_fleet() {
        let first = choose(Allocation::Hashed, "drone-42", &[0, 0, 0]);
        assert_eq!(choose(Allocation::Hashed, "drone-42", &[9, 0, 4]), first);
        let split = spread(Allocation::Hashed, 2, 200);
        assert!((80..=120).contains(&split[0]), "{split:?}");
        let split = spread(Allocation::Hashed, 4, 1000);
        assert!(split.iter().all(|n| (200..=300).contains(n)), "{split:?}");
        assert_eq!(choose(Allocation::Hashed, "any", &[3]), 0);
    }
}
