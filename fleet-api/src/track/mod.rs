//! A page of a drone's track: its positions in a span, oldest first, at most `limit` of
//! them, read from both history formats in the drone's own logical partition and merged.
//!
//! - `history`: one document per position (`kind: "history"`), the format before segments;
//! - `segment`: track segments (`kind: "segment"`), a stretch of positions a document;
//! - [`continuation`]: the token of the next page;
//! - [`request`]: a route's parameters, checked against the track's settings.
//!
//! Positions are in [`PositionOrder`] (device time, then `seq`); a position stored in both
//! formats (a writer upgraded mid-flight, a replay) is answered once. A page goes on after
//! the last position of the one before: keyset paging, so that a page costs what it reads
//! and not what the pages before it read.
//!
//! Each source reads with `TOP` and `ORDER BY` and says how far its answer is complete; the
//! page holds what both sources have in full. A page costs one query for history documents
//! (`TOP limit+1`) and one or more for segments (`TOP k`, `k` grown from the positions per
//! segment seen), each within the drone's partition; a segment the page ends inside is read
//! again by the next page. An hour of 720 positions in one page: 52 RU from segments, 115
//! from history documents on the local endpoint (`docs/performance.md`).

use cosmos::{ContainerClient, QueryOptions, QueryRequest, QueryScope, ReadCost, ReadFailure};
use serde_json::Value;
use telemetry::PositionOrder;

pub mod continuation;
mod history;
pub mod request;
mod segment;

/// A span of device time, Unix milliseconds: `since` included, `until` not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The first millisecond of the span.
    pub since_ms: i64,
    /// The millisecond after the span.
    pub until_ms: i64,
}

/// One page to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackRequest {
    /// The drone.
    pub device_id: String,
    /// The span of device time.
    pub span: Span,
    /// The last position of the page before; none for the first page.
    pub after: Option<PositionOrder>,
    /// Most positions answered.
    pub limit: usize,
}

impl TrackRequest {
    /// Whether `p` belongs on this page or a later one.
    fn wants(&self, p: &TrackPoint) -> bool {
        (self.span.since_ms..self.span.until_ms).contains(&p.device_time_ms)
            && self.after.is_none_or(|after| p.order() > after)
    }

    /// The first device time a page may hold.
    fn first_ms(&self) -> i64 {
        self.after.map_or(self.span.since_ms, |a| a.device_time_ms)
    }
}

/// One position of a track.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackPoint {
    /// Sequence number.
    pub seq: u64,
    /// Device time, Unix milliseconds.
    pub device_time_ms: i64,
    /// Longitude, degrees.
    pub lon: f64,
    /// Latitude, degrees.
    pub lat: f64,
}

impl TrackPoint {
    /// Where it stands in the drone's track.
    pub fn order(&self) -> PositionOrder {
        PositionOrder {
            device_time_ms: self.device_time_ms,
            seq: self.seq,
        }
    }
}

/// A page of a track.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackPage {
    /// The positions, oldest first.
    pub points: Vec<TrackPoint>,
    /// Where the next page starts; none when this is the last.
    pub next: Option<PositionOrder>,
}

/// What one source read: the positions the request wants, and how far they are all there.
#[derive(Debug, Default)]
struct Fetched {
    points: Vec<TrackPoint>,
    /// Every wanted position ordered before this one is in `points`; none: every wanted
    /// position of the span is.
    complete_below: Option<PositionOrder>,
}

/// Queries on one drone's partition, adding up what they cost.
struct Asker<'a> {
    container: &'a ContainerClient,
    options: &'a QueryOptions,
    device_id: &'a str,
    cost: ReadCost,
}

impl Asker<'_> {
    /// Runs `query` on the drone's partition; a failure carries the cost of every query so far.
    async fn ask(&mut self, query: &QueryRequest) -> Result<Vec<Value>, ReadFailure> {
        let scope = QueryScope::Partition(self.device_id.to_string());
        let answer = self
            .container
            .query_counted(query, &scope, self.options)
            .await;
        let (documents, cost) = match answer {
            Ok(a) => (Ok(a.documents), a.cost),
            Err(f) => (Err(f.source), f.cost),
        };
        add(&mut self.cost, &cost);
        documents.map_err(|source| ReadFailure {
            source,
            cost: self.cost,
        })
    }
}

fn add(total: &mut ReadCost, cost: &ReadCost) {
    total.request_charge += cost.request_charge;
    total.calls += cost.calls;
    total.throttled += cost.throttled;
    total.range_refreshes += cost.range_refreshes;
    total.peak_parallelism = total.peak_parallelism.max(cost.peak_parallelism);
}

/// Reads one page of a track from `container`, and what it cost.
pub async fn read_page(
    container: &ContainerClient,
    options: &QueryOptions,
    request: &TrackRequest,
) -> Result<(TrackPage, ReadCost), ReadFailure> {
    let mut asker = Asker {
        container,
        options,
        device_id: &request.device_id,
        cost: ReadCost::default(),
    };
    let history = history::fetch(&mut asker, request).await?;
    let segments = segment::fetch(&mut asker, request).await?;
    Ok((merge(request, [history, segments]), asker.cost))
}

/// The page the sources' answers make: the wanted positions below every source's bound, in
/// order, each once, at most `limit`.
fn merge(request: &TrackRequest, sources: [Fetched; 2]) -> TrackPage {
    let bound = sources.iter().filter_map(|s| s.complete_below).min();
    let mut points: Vec<TrackPoint> = sources
        .into_iter()
        .flat_map(|s| s.points)
        .filter(|p| request.wants(p) && bound.is_none_or(|b| p.order() < b))
        .collect();
    points.sort_by_key(TrackPoint::order);
    points.dedup_by_key(|p| p.order());
    let more = points.len() > request.limit || bound.is_some();
    points.truncate(request.limit);
    let next = match points.last() {
        Some(last) if more => Some(last.order()),
        _ => None,
    };
    TrackPage { points, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: i64, seq: u64) -> TrackPoint {
        TrackPoint {
            seq,
            device_time_ms: t,
            lon: 0.0,
            lat: 0.0,
        }
    }

    fn request(limit: usize, after: Option<(i64, u64)>) -> TrackRequest {
        TrackRequest {
            device_id: "d".into(),
            span: Span {
                since_ms: 0,
                until_ms: 1000,
            },
            after: after.map(|(device_time_ms, seq)| PositionOrder {
                device_time_ms,
                seq,
            }),
            limit,
        }
    }

    fn fetched(points: &[(i64, u64)], below: Option<(i64, u64)>) -> Fetched {
        Fetched {
            points: points.iter().map(|&(t, s)| point(t, s)).collect(),
            complete_below: below.map(|(device_time_ms, seq)| PositionOrder {
                device_time_ms,
                seq,
            }),
        }
    }

    fn seqs(page: &TrackPage) -> Vec<u64> {
        page.points.iter().map(|p| p.seq).collect()
    }

    #[test]
    fn both_formats_merge_in_order_each_position_once() {
        let page = merge(
            &request(10, None),
            [
                fetched(&[(10, 1), (20, 2), (30, 3)], None),
                fetched(&[(30, 3), (40, 4), (5, 0)], None),
            ],
        );
        assert_eq!(seqs(&page), [0, 1, 2, 3, 4]);
        assert_eq!(page.next, None);
    }

    #[test]
    fn a_page_ends_at_its_limit_or_where_a_source_is_not_complete() {
        let full = merge(
            &request(2, None),
            [
                fetched(&[(10, 1), (20, 2), (30, 3)], None),
                Fetched::default(),
            ],
        );
        assert_eq!(seqs(&full), [1, 2]);
        assert_eq!(full.next.map(|n| n.seq), Some(2));
        // The segments are complete only below t=25: the page stops there.
        let short = merge(
            &request(10, None),
            [
                fetched(&[(10, 1), (30, 3)], None),
                fetched(&[(20, 2), (40, 4)], Some((25, 0))),
            ],
        );
        assert_eq!(seqs(&short), [1, 2]);
        assert_eq!(short.next.map(|n| n.seq), Some(2));
    }

    #[test]
    fn the_next_page_starts_after_the_last_position_and_outside_the_span_is_left_out() {
        let page = merge(
            &request(10, Some((20, 2))),
            [
                fetched(&[(20, 1), (20, 2), (20, 3), (999, 9), (1000, 10)], None),
                fetched(&[(10, 1)], None),
            ],
        );
        assert_eq!(seqs(&page), [3, 9]);
        assert_eq!(page.next, None);
    }
}
