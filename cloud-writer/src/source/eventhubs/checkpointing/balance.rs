//! Which partitions a replica takes from the others when the SDK's greedy balancing
//! steals ([`even_steals`]).
//!
//! The SDK's processor counts how many partitions each current owner holds, and a replica
//! below its share takes the partitions it lacks at random from every owner above the
//! share, pooled: several can come from one owner, leaving it below its share, to steal
//! back at its next round. With 8 replicas on 32 partitions that took 2 to 4 balancing
//! rounds after the last replica's first (4 to 8 s at a 2 s interval), each round moving
//! partitions whose readings start again. Here a replica takes as many as the SDK chose,
//! but each from the owner that holds the most at that point, and never from one at or
//! below the share: every owner above it loses only its surplus, and once each replica
//! has listed the others, a round of each balances them.

use std::collections::HashMap;

use azure_messaging_eventhubs::models::Ownership;

/// The owner of a current ownership (`None`: unowned).
fn owner(ownership: &Ownership) -> Option<&str> {
    ownership.owner_id.as_deref().filter(|o| !o.is_empty())
}

/// The ownerships to claim for replica `me`, given the SDK's `claim` and the current
/// (unexpired) ownerships `listed` of the hub's `partitions`: the SDK's claims of
/// partitions no other owner holds (renewals, unowned or expired partitions) as they are,
/// and as many steals as it chose, each of a random partition of the owner holding the
/// most partitions left, while that owner holds more than the SDK's share (as it computes
/// it: the partitions over the current owners, one more with a remainder once this replica
/// holds its floor).
pub(super) fn even_steals(
    claim: Vec<Ownership>,
    listed: &[Ownership],
    me: &str,
    partitions: usize,
) -> Vec<Ownership> {
    let mut others: HashMap<&str, Vec<&Ownership>> = HashMap::new();
    let mut mine = 0;
    for ownership in listed {
        match owner(ownership) {
            Some(owner) if owner == me => mine += 1,
            Some(owner) => others.entry(owner).or_default().push(ownership),
            None => {}
        }
    }
    let held = |partition: &str| {
        others
            .values()
            .any(|held| held.iter().any(|o| o.partition_id == partition))
    };
    let (mut claims, steals): (Vec<Ownership>, Vec<Ownership>) =
        claim.into_iter().partition(|o| !held(&o.partition_id));
    if steals.is_empty() {
        return claims;
    }
    let owners = others.len() + 1;
    let floor = partitions / owners;
    let share = if partitions % owners > 0 && mine >= floor {
        floor + 1
    } else {
        floor
    };
    for _ in 0..steals.len() {
        let Some(victim) = others
            .values_mut()
            .filter(|held| held.len() > share)
            .max_by_key(|held| held.len())
        else {
            break;
        };
        let taken = victim.swap_remove(rand::random_range(0..victim.len()));
        claims.push(Ownership {
            owner_id: Some(me.to_owned()),
            ..taken.clone()
        });
    }
    claims
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ownership(partition: usize, owner: &str) -> Ownership {
        Ownership {
            partition_id: partition.to_string(),
            owner_id: Some(owner.to_owned()),
            ..Ownership::default()
        }
    }

    /// The listing: owner `i` of `held` holds `held[i]` partitions.
    fn listing(held: &[(&str, usize)]) -> Vec<Ownership> {
        let mut next = 0;
        let mut listed = Vec::new();
        for (owner, n) in held {
            for _ in 0..*n {
                listed.push(ownership(next, owner));
                next += 1;
            }
        }
        listed
    }

    fn counts(listed: &[Ownership], claimed: &[Ownership]) -> HashMap<String, usize> {
        let mut owners: HashMap<String, String> = listed
            .iter()
            .map(|o| (o.partition_id.clone(), o.owner_id.clone().unwrap()))
            .collect();
        for o in claimed {
            owners.insert(o.partition_id.clone(), o.owner_id.clone().unwrap());
        }
        let mut counts = HashMap::new();
        for owner in owners.values() {
            *counts.entry(owner.clone()).or_default() += 1;
        }
        counts
    }

    /// The SDK's greedy choice: `n` partitions of the listing, pooled from every owner
    /// above `share`, here all from the first such owner's (the worst case it allows).
    fn sdk_steals(listed: &[Ownership], me: &str, n: usize) -> Vec<Ownership> {
        listed
            .iter()
            .filter(|o| o.owner_id.as_deref() != Some(me))
            .take(n)
            .map(|o| Ownership {
                owner_id: Some(me.to_owned()),
                ..o.clone()
            })
            .collect()
    }

    /// 8 replicas on 32 partitions, a replica holding 1 that lacks 3, and three owners
    /// with 5: the SDK may take all 3 from one of them (leaving it 2 and the others 5);
    /// here each loses one, and all are at 4.
    #[test]
    fn each_owner_above_the_share_loses_only_its_surplus() {
        let listed = listing(&[
            ("a", 5),
            ("b", 5),
            ("c", 5),
            ("d", 4),
            ("e", 4),
            ("f", 4),
            ("g", 4),
            ("me", 1),
        ]);
        let mut claim: Vec<Ownership> = listed
            .iter()
            .filter(|o| o.owner_id.as_deref() == Some("me"))
            .cloned()
            .collect();
        claim.extend(sdk_steals(&listed, "me", 3));
        let claimed = even_steals(claim, &listed, "me", 32);
        assert_eq!(claimed.len(), 4);
        let counts = counts(&listed, &claimed);
        assert!(counts.values().all(|n| *n == 4), "{counts:?}");
    }

    /// With a remainder the share is one more once this replica holds its floor: 5
    /// replicas on 32 partitions, one without any takes 6, from the owners with the most.
    #[test]
    fn steals_come_from_the_owners_holding_the_most() {
        let listed = listing(&[("a", 8), ("b", 8), ("c", 8), ("d", 8)]);
        let claimed = even_steals(sdk_steals(&listed, "me", 6), &listed, "me", 32);
        assert_eq!(claimed.len(), 6);
        let counts = counts(&listed, &claimed);
        let mut held: Vec<usize> = counts.values().copied().collect();
        held.sort();
        assert_eq!(held, [6, 6, 6, 7, 7], "{counts:?}");
    }

    /// Unowned partitions and renewals are claimed as the SDK chose; no steal leaves an
    /// owner at or below the share, so a steal without such an owner is dropped.
    #[test]
    fn claims_of_free_partitions_stay_and_no_owner_goes_below_the_share() {
        let mut listed = listing(&[("a", 4), ("b", 4), ("me", 3)]);
        let free = ownership(99, "me");
        let mut claim: Vec<Ownership> = listed
            .iter()
            .filter(|o| o.owner_id.as_deref() == Some("me"))
            .cloned()
            .collect();
        claim.push(free.clone());
        claim.extend(sdk_steals(&listed, "me", 1));
        let claimed = even_steals(claim, &listed, "me", 12);
        assert_eq!(claimed.len(), 4, "3 renewed and the free one: {claimed:?}");
        assert!(claimed.iter().any(|o| o.partition_id == free.partition_id));
        listed.push(free);
        let counts = counts(&listed, &claimed);
        assert_eq!((counts["a"], counts["b"], counts["me"]), (4, 4, 4));
    }
}
