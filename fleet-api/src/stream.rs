//! `GET /api/drones/stream`: the fleet live, as server-sent events, from the one change-feed
//! follower every viewer shares ([`crate::feed`]). A stream starts with a `snapshot` event
//! (the whole fleet as a FeatureCollection), then a `position` event (one drone's Feature)
//! per change, each with its number as the event id; a client that reconnects with
//! `Last-Event-ID` gets the changes it missed instead of a snapshot while they are still
//! kept. A move that takes a drone into or out of a geofence is followed by an `enter` or
//! `leave` event (`{"fence", "deviceId", "deviceTime"}`) with the move's id. At most `max_clients` streams at once (503 with `Retry-After` past that); a client
//! too slow to take the changes is dropped, and resumes when it reconnects.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::Utc;
use futures::{Stream, StreamExt};
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};

use crate::access::{Access, Role, guarded};
use crate::feed::{Change, Fleet};
use crate::reads::Drone;

/// How long a stream waits for the fleet's first snapshot.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// The live streams' shared state.
#[derive(Clone)]
pub struct Live {
    fleet: Arc<Fleet>,
    slots: Arc<Semaphore>,
}

impl Live {
    /// Streams of `fleet`, at most `max_clients` at once.
    pub fn new(fleet: Arc<Fleet>, max_clients: usize) -> Live {
        Live {
            fleet,
            slots: Arc::new(Semaphore::new(max_clients)),
        }
    }

    /// The route, for callers with `Fleet.Read`.
    pub fn routes<S>(self, access: &Access) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new()
            .route(
                "/api/drones/stream",
                guarded(access, Role::Read, get(stream)),
            )
            .with_state(self)
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

fn snapshot_event(last: u64, drones: &[Drone]) -> Event {
    let now = Utc::now();
    let features: Vec<_> = drones.iter().map(|d| d.to_feature(now)).collect();
    Event::default()
        .event("snapshot")
        .id(last.to_string())
        .json_data(json!({"type": "FeatureCollection", "features": features}))
        .expect("a FeatureCollection serialises")
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

async fn stream(State(live): State<Live>, headers: HeaderMap) -> Response {
    let Ok(permit) = live.slots.clone().try_acquire_owned() else {
        return unavailable(
            "busy",
            "the live stream has as many viewers as API_STREAM_MAX_CLIENTS allows; try again after Retry-After, or read GET /api/drones",
        );
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
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (first, after) = match resume.and_then(|id| live.fleet.since(id).map(|c| (id, c))) {
        Some((id, missed)) => {
            let after = missed.last().map_or(id, |c| c.id);
            (
                missed.iter().flat_map(change_events).collect::<Vec<_>>(),
                after,
            )
        }
        None => {
            let (last, drones) = live.fleet.snapshot();
            (vec![snapshot_event(last, &drones)], last)
        }
    };
    Sse::new(events(first, changes, after, permit))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn events(
    first: Vec<Event>,
    changes: broadcast::Receiver<Change>,
    after: u64,
    permit: OwnedSemaphorePermit,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let live = futures::stream::unfold(
        (changes, after, permit),
        |(mut changes, after, permit)| async move {
            loop {
                match changes.recv().await {
                    Ok(change) if change.id <= after => continue,
                    Ok(change) => {
                        let events = change_events(&change);
                        return Some((events, (changes, change.id, permit)));
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
