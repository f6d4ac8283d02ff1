//! Status and substatus codes that decide what a client does with a failed operation.

/// 429 substatus: the partition's RU budget for this second is spent (ordinary throttling).
pub const SUB_RU_BUDGET_EXCEEDED: u32 = 3200;
/// 410 substatus: the partition key range is gone (split): refresh the range map and re-route.
pub const SUB_PARTITION_KEY_RANGE_GONE: u32 = 1002;
/// 410 substatus: a split or merge is completing.
pub const SUB_COMPLETING_SPLIT: u32 = 1007;
/// 410 substatus: a partition migration is completing.
pub const SUB_COMPLETING_MIGRATION: u32 = 1008;
/// 410 substatus: the name cache is stale.
pub const SUB_NAME_CACHE_STALE: u32 = 1000;

/// What a client should do with an operation that came back with this status and substatus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The operation succeeded.
    Success,
    /// Throttled: wait (for the server's retry-after) and retry.
    Throttled,
    /// The partition key range moved: refresh the range map, re-route, retry.
    RangeGone,
    /// A transient failure (449, 408, 503, 500 without a better meaning, 410 other than a move): retry.
    Transient,
    /// A final failure that retrying will not fix (400, 401, 403, 404, 409, 412, 413, ...).
    Permanent,
}

/// Classifies an operation's status and substatus.
pub fn disposition(status: u16, substatus: u32) -> Disposition {
    match status {
        200..=299 => Disposition::Success,
        429 => Disposition::Throttled,
        410 if matches!(
            substatus,
            SUB_PARTITION_KEY_RANGE_GONE | SUB_COMPLETING_SPLIT | SUB_COMPLETING_MIGRATION
        ) =>
        {
            Disposition::RangeGone
        }
        408 | 410 | 449 | 500 | 503 => Disposition::Transient,
        _ => Disposition::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_the_codes_bulk_writers_must_retry() {
        assert_eq!(disposition(201, 0), Disposition::Success);
        assert_eq!(disposition(429, 3200), Disposition::Throttled);
        assert_eq!(disposition(410, 1002), Disposition::RangeGone);
        assert_eq!(disposition(410, 1007), Disposition::RangeGone);
        assert_eq!(disposition(410, 1008), Disposition::RangeGone);
        assert_eq!(disposition(410, 1000), Disposition::Transient);
        assert_eq!(disposition(449, 0), Disposition::Transient);
        assert_eq!(disposition(408, 0), Disposition::Transient);
        assert_eq!(disposition(503, 0), Disposition::Transient);
        assert_eq!(disposition(412, 0), Disposition::Permanent);
        assert_eq!(disposition(400, 0), Disposition::Permanent);
        assert_eq!(disposition(409, 0), Disposition::Permanent);
    }
}
