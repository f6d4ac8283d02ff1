//! `GET /api/drones/stream`: the fleet live, as server-sent events, from the one change-feed
//! follower every viewer shares ([`crate::feed`]). A stream starts with a `snapshot` event
//! (the whole fleet as a FeatureCollection), then a `position` event (one drone's Feature)
//! per change, each with its number as the event id; a client that reconnects with
//! `Last-Event-ID` gets the changes it missed instead of a snapshot while they are still
//! kept. A move that takes a drone into or out of a geofence is followed by an `enter` or
//! `leave` event (`{"fence", "deviceId", "deviceTime"}`) with the move's id.
//!
//! At most `max_clients` streams at once (503 with `Retry-After` past that), and `per_caller`
//! of one caller (429); a stream starting with the snapshot is charged to its caller's RU
//! budget as the snapshot query. The snapshot is written a piece at a time, made as the
//! connection takes it, from the fleet's shared drones: a viewer holds a pointer per drone
//! and one piece, not a copy of the fleet. A client too slow to take the changes is dropped,
//! and resumes when it reconnects; one that takes no write for `API_STREAM_STALL` is dropped
//! with its connection ([`crate::serving`]) and counted.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::Utc;
use cosmos::ReadCost;
use futures::{Stream, StreamExt};
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};

use crate::access::{Access, Role, guarded};
use crate::budget::{self, Limits};
use crate::caps::{Held, PerCaller, Who};
use crate::feed::{Change, Fleet};
use crate::metrics::{Metrics, Refused};
use crate::reads::Drone;
use crate::serving::Link;

/// How long a stream waits for the fleet's first snapshot.
const READY_WITHIN: Duration = Duration::from_secs(20);
/// Drones per piece of the snapshot written at a time.
const SNAPSHOT_CHUNK: usize = 100;

/// The live streams' shared state.
#[derive(Clone)]
pub struct Live {
    fleet: Arc<Fleet>,
    slots: Arc<Semaphore>,
    per_caller: Arc<PerCaller>,
    metrics: Arc<Metrics>,
}

impl Live {
    /// Streams of `fleet`, at most `max_clients` at once and `per_caller` of one caller.
    pub fn new(
        fleet: Arc<Fleet>,
        metrics: Arc<Metrics>,
        max_clients: usize,
        per_caller: usize,
    ) -> Live {
        Live {
            fleet,
            slots: Arc::new(Semaphore::new(max_clients)),
            per_caller: Arc::new(PerCaller::new(per_caller)),
            metrics,
        }
    }

    /// The route, for callers with `Fleet.Read`, within their RU budget (a stream that
    /// starts with the snapshot is charged what the snapshot query cost).
    pub fn routes<S>(self, access: &Access, limits: Arc<Limits>) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let budgeted =
            get(stream).route_layer(axum::middleware::from_fn_with_state(limits, budget::budget));
        Router::new()
            .route("/api/drones/stream", guarded(access, Role::Read, budgeted))
            .with_state(self)
    }
}

/// What an open stream holds: its place among all and among its caller's; when it goes, a
/// stream dropped for a stalled client is counted.
struct Viewing {
    _slot: OwnedSemaphorePermit,
    _held: Held,
    link: Option<Arc<Link>>,
    metrics: Arc<Metrics>,
}

impl Drop for Viewing {
    fn drop(&mut self) {
        if self.link.as_ref().is_some_and(|link| link.stalled()) {
            self.metrics.record_stalled_stream();
        }
    }
}

/// A change's events: the drone's new position, then each fence it entered or left.
fn change_events(change: &Change) -> Vec<Event> {
    let feature = change.drone.to_feature(Utc::now());
    let id = change.id.to_string();
    let mut events = vec![
        Event::default()
            .event("position")
            .id(id.clone())
            .json_data(feature)
            .expect("a Feature serialises"),
    ];
    for (fence, crossing) in &change.crossings {
        events.push(
            Event::default()
                .event(crossing.name())
                .id(id.clone())
                .json_data(json!({
                    "fence": fence,
                    "deviceId": change.drone.device_id,
                    "deviceTime": change.drone.device_time,
                }))
                .expect("a crossing serialises"),
        );
    }
    events
}

/// The `snapshot` event (a FeatureCollection of `drones`), written [`SNAPSHOT_CHUNK`] drones at
/// a time, each piece made when the connection takes it: one event of many `data:` lines,
/// which a client joins with line breaks (whitespace in JSON).
fn snapshot_event(
    last: u64,
    drones: Vec<Arc<Drone>>,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let now = Utc::now();
    let head = format!(
        "event: snapshot\nid: {last}\ndata: {{\"type\":\"FeatureCollection\",\"features\":[\n"
    );
    let pieces = futures::stream::unfold((drones, 0), move |(drones, at)| async move {
        let end = (at + SNAPSHOT_CHUNK).min(drones.len());
        if at == end {
            return None;
        }
        let mut piece = String::from("data: ");
        for (i, drone) in drones[at..end].iter().enumerate() {
            if at + i > 0 {
                piece.push(',');
            }
            let feature = serde_json::to_string(&drone.to_feature(now));
            piece.push_str(&feature.expect("a Feature serialises"));
        }
        piece.push('\n');
        Some((Bytes::from(piece), (drones, end)))
    });
    futures::stream::once(std::future::ready(Bytes::from(head)))
        .chain(pieces)
        .chain(futures::stream::once(std::future::ready(
            Bytes::from_static(b"data: ]}\n\n"),
        )))
        .map(Ok)
}

/// A 503 with `Retry-After: 5` and a JSON error.
fn unavailable(code: &str, message: &str) -> Response {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({"error": code, "message": message})),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// A 429 with `Retry-After: 5` and a JSON error: the caller has its share open.
fn too_many(who: &Who, max: usize) -> Response {
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({
            "error": "too_many_streams",
            "message": format!("{who} has {max} live streams open (API_STREAM_MAX_CLIENTS_PER_IDENTITY); close one"),
        })),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

async fn stream(State(live): State<Live>, request: Request) -> Response {
    let who = Who::of(request.extensions());
    let Some(held) = live.per_caller.take(&who) else {
        live.metrics.record_refusal(Refused::CallerStreams);
        return too_many(&who, live.per_caller.max());
    };
    let Ok(slot) = live.slots.clone().try_acquire_owned() else {
        return unavailable(
            "busy",
            "the live stream has as many viewers as API_STREAM_MAX_CLIENTS allows; try again after Retry-After, or read GET /api/drones",
        );
    };
    let viewing = Viewing {
        _slot: slot,
        _held: held,
        link: request.extensions().get::<Arc<Link>>().cloned(),
        metrics: live.metrics.clone(),
    };
    live.fleet.follow();
    if tokio::time::timeout(READY_WITHIN, live.fleet.ready())
        .await
        .is_err()
    {
        return unavailable(
            "starting",
            "the live stream is still reading the fleet from Cosmos DB; try again after Retry-After",
        );
    }
    // Subscribed before the snapshot is taken: no change falls between the two.
    let changes = live.fleet.subscribe();
    let resume = request
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (snapshot, first, after) = match resume.and_then(|id| live.fleet.since(id).map(|c| (id, c)))
    {
        Some((id, missed)) => {
            let after = missed.last().map_or(id, |c| c.id);
            let first = missed.iter().flat_map(change_events).collect::<Vec<_>>();
            (None, first, after)
        }
        None => (Some(live.fleet.snapshot()), Vec::new(), 0),
    };
    let after = snapshot.as_ref().map_or(after, |(last, _)| *last);
    let (parts, body) = Sse::new(events(first, changes, after, viewing))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
        .into_parts();
    let Some((last, drones)) = snapshot else {
        return Response::from_parts(parts, body);
    };
    let body = snapshot_event(last, drones)
        .map(|piece| piece.map_err(axum::Error::new))
        .chain(body.into_data_stream());
    let mut response = Response::from_parts(parts, Body::from_stream(body));
    // For the caller's RU budget: the snapshot query this stream stands for.
    response.extensions_mut().insert(ReadCost {
        request_charge: live.fleet.snapshot_charge(),
        ..ReadCost::default()
    });
    response
}

fn events(
    first: Vec<Event>,
    changes: broadcast::Receiver<Change>,
    after: u64,
    viewing: Viewing,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let live = futures::stream::unfold(
        (changes, after, viewing),
        |(mut changes, after, viewing)| async move {
            loop {
                match changes.recv().await {
                    Ok(change) if change.id <= after => continue,
                    Ok(change) => {
                        let events = change_events(&change);
                        return Some((events, (changes, change.id, viewing)));
                    }
                    // Too slow, or the follower is gone: the client reconnects and resumes.
                    Err(_) => return None,
                }
            }
        },
    );
    let live = live.flat_map(|events| futures::stream::iter(events.into_iter().map(Ok)));
    futures::stream::iter(first.into_iter().map(Ok)).chain(live)
}
