//! The fleet as the change feed tells it, for the live streams: one follower per partition
//! key range reads the container's change feed (latest-version mode) from a continuation
//! taken before one snapshot query, and keeps each drone's newest position in memory
//! (the fleet, not its history); every change that moves a drone is numbered and offered to
//! the streams ([`crate::stream`]), with the geofences it made the drone enter or leave.
//!
//! Crossings are judged on a drone's successive positions as the feed delivers them: the
//! fences its previous position was inside against those its new one is inside. The state
//! is derived from the positions alone, so a restarted API (whose snapshot gives each drone's
//! position without a previous one) repeats no crossing; one made while no API ran is not
//! told. The fences are read at start and again every [`FENCES_EVERY`].
//!
//! Cost: a feed poll per range every [`POLL_EVERY`], whoever watches: a quiet range answers
//! `304` for 1 RU, a busy one about 1 RU per KB of changed documents; plus one snapshot query
//! when the first viewer arrives. Polling the whole fleet instead costs a fan-out query per
//! viewer and refresh. The follower starts with the first stream and runs from then on.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use cosmos::{ContainerClient, CosmosError, FeedPosition};
use tokio::sync::broadcast;

use crate::geo::LonLat;
use crate::geofences::{FenceSet, Geofences};
use crate::metrics::Metrics;
use crate::reads::{Drone, Reads};

/// How often each range's feed is asked for changes.
pub const POLL_EVERY: Duration = Duration::from_millis(500);
/// Changes kept for streams that reconnect (`Last-Event-ID`).
const RECENT: usize = 4096;
/// Changes a stream may fall behind before it is dropped (it reconnects and resumes).
const CHANNEL: usize = 4096;
/// Documents per feed page.
const PAGE: u32 = 500;
/// How often the fences are read again.
pub const FENCES_EVERY: Duration = Duration::from_secs(10);

/// A drone entering or leaving a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossing {
    /// Its new position is inside, its previous one was not.
    Enter,
    /// Its previous position was inside, its new one is not.
    Leave,
}

impl Crossing {
    /// The stream's event name.
    pub fn name(self) -> &'static str {
        match self {
            Crossing::Enter => "enter",
            Crossing::Leave => "leave",
        }
    }
}

/// A drone that moved, numbered in the order the API saw it.
#[derive(Debug, Clone)]
pub struct Change {
    /// Its number (the stream's event id).
    pub id: u64,
    /// The drone at its new position.
    pub drone: Drone,
    /// The fences it entered or left, by id.
    pub crossings: Vec<(String, Crossing)>,
}

/// The fleet's newest positions and the recent changes.
pub struct Fleet {
    drones: RwLock<HashMap<String, Arc<Drone>>>,
    /// What the snapshot query cost, RU (bits of the f64).
    snapshot_charge: AtomicU64,
    recent: Mutex<VecDeque<Change>>,
    last_id: AtomicU64,
    changes: broadcast::Sender<Change>,
    container: ContainerClient,
    reads: Reads,
    geofences: Geofences,
    metrics: Arc<Metrics>,
    fences: RwLock<FenceSet>,
    started: OnceLock<()>,
    /// Whether the snapshot is in.
    ready: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("last_id", &self.last_id)
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// The fleet of `container`, not yet followed.
    pub fn new(
        container: ContainerClient,
        reads: Reads,
        geofences: Geofences,
        metrics: Arc<Metrics>,
    ) -> Arc<Fleet> {
        Arc::new(Fleet {
            drones: RwLock::default(),
            snapshot_charge: AtomicU64::new(0),
            recent: Mutex::default(),
            last_id: AtomicU64::new(0),
            changes: broadcast::channel(CHANNEL).0,
            container,
            reads,
            geofences,
            metrics,
            fences: RwLock::default(),
            started: OnceLock::new(),
            ready: tokio::sync::watch::channel(false).0,
        })
    }

    /// Starts following the feed, once.
    pub fn follow(self: &Arc<Self>) {
        if self.started.set(()).is_ok() {
            let fleet = self.clone();
            tokio::spawn(async move { fleet.run().await });
        }
    }

    /// Waits until the fleet's snapshot is in (the follower started).
    pub async fn ready(&self) {
        let mut ready = self.ready.subscribe();
        // Err: the sender lives as long as `self`.
        let _ = ready.wait_for(|ready| *ready).await;
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// What the fleet's snapshot query cost, RU: what a stream that starts with the snapshot
    /// is charged.
    pub fn snapshot_charge(&self) -> f64 {
        f64::from_bits(self.snapshot_charge.load(Ordering::Relaxed))
    }

    /// Every drone (shared, not copied), and the number of the last change they include.
    pub fn snapshot(&self) -> (u64, Vec<Arc<Drone>>) {
        let drones = self.drones.read().expect("never left poisoned");
        let last = self.last_id.load(Ordering::SeqCst);
        (last, drones.values().cloned().collect())
    }

    /// The changes after `id`, if they are all still kept.
    pub fn since(&self, id: u64) -> Option<Vec<Change>> {
        let recent = self.recent.lock().expect("never left poisoned");
        let last = self.last_id.load(Ordering::SeqCst);
        if id > last {
            return None;
        }
        let oldest = recent.front().map_or(last + 1, |c| c.id);
        (id + 1 >= oldest).then(|| recent.iter().filter(|c| c.id > id).cloned().collect())
    }

    /// Takes `drone` if its position is newer than what is known of it, or its agent's
    /// state changed at the same position (the feed gives a document's versions in order);
    /// numbers and offers the change.
    fn apply(&self, drone: Drone) {
        let mut drones = self.drones.write().expect("never left poisoned");
        let (moved, agent_changed) = match drones.get(&drone.device_id) {
            None => (true, false),
            Some(known) => {
                let order = (drone.device_time_ms, drone.seq);
                let known_order = (known.device_time_ms, known.seq);
                (
                    order > known_order,
                    order == known_order && drone.agent != known.agent,
                )
            }
        };
        if !moved && !agent_changed {
            return;
        }
        let crossings = match drones.get(&drone.device_id).and_then(|d| d.lon_lat()) {
            Some(before) => self.crossings(before, drone.lon_lat()),
            None => Vec::new(),
        };
        drones.insert(drone.device_id.clone(), Arc::new(drone.clone()));
        if moved {
            self.metrics.record_move();
        }
        let mut recent = self.recent.lock().expect("never left poisoned");
        let id = self.last_id.fetch_add(1, Ordering::SeqCst) + 1;
        let change = Change {
            id,
            drone,
            crossings,
        };
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(change.clone());
        // No stream listening is fine.
        let _ = self.changes.send(change);
    }

    /// The fences left and entered between `before` and `after`.
    fn crossings(&self, before: LonLat, after: Option<LonLat>) -> Vec<(String, Crossing)> {
        let fences = self.fences.read().expect("never left poisoned");
        let was = fences.inside(before);
        let is = after.map(|p| fences.inside(p)).unwrap_or_default();
        let left = was
            .iter()
            .filter(|f| !is.contains(f))
            .map(|f| (f.clone(), Crossing::Leave));
        let entered = is
            .iter()
            .filter(|f| !was.contains(f))
            .map(|f| (f.clone(), Crossing::Enter));
        left.chain(entered).collect()
    }

    /// Reads the fences again, and again every [`FENCES_EVERY`].
    async fn read_fences(self: Arc<Self>) {
        loop {
            match self.geofences.load().await {
                Ok(fences) => *self.fences.write().expect("never left poisoned") = fences,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the geofences; keeping the last ones")
                }
            }
            tokio::time::sleep(FENCES_EVERY).await;
        }
    }

    async fn run(self: Arc<Self>) {
        let mut wait = POLL_EVERY;
        loop {
            match self.start().await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start following the change feed; trying again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Each range's position now, then the snapshot, then one follower per range.
    async fn start(self: &Arc<Self>) -> Result<(), CosmosError> {
        *self.fences.write().expect("never left poisoned") = self.geofences.load().await?;
        let ranges = self.container.range_map().await?;
        let mut positions = Vec::new();
        for range in ranges.ranges() {
            let page = self
                .container
                .change_feed_page(&range.id, &FeedPosition::Now, Some(PAGE))
                .await?;
            self.metrics.record_feed(page.request_charge, None);
            positions.push((range.id.clone(), page.next));
        }
        let snapshot = self.reads.all().await.map_err(|f| f.source)?;
        self.metrics.record_feed(snapshot.cost.request_charge, None);
        self.snapshot_charge
            .store(snapshot.cost.request_charge.to_bits(), Ordering::Relaxed);
        for drone in snapshot.value {
            self.apply(drone);
        }
        self.ready.send_replace(true);
        tracing::info!(ranges = positions.len(), "following the change feed");
        tokio::spawn(self.clone().read_fences());
        for (range, position) in positions {
            tokio::spawn(self.clone().follow_range(range, position));
        }
        Ok(())
    }

    /// Reads range `range`'s changes from `position` for good; a split range hands its
    /// position to its children.
    fn follow_range(
        self: Arc<Self>,
        range: String,
        mut position: FeedPosition,
    ) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut caught_up = Instant::now();
            loop {
                match self
                    .container
                    .change_feed_page(&range, &position, Some(PAGE))
                    .await
                {
                    Ok(page) => {
                        let quiet = page.documents.is_empty();
                        if quiet {
                            caught_up = Instant::now();
                        }
                        self.metrics.record_feed(
                            page.request_charge,
                            Some((&range, caught_up.elapsed().as_secs_f64())),
                        );
                        for doc in page.documents {
                            if doc["kind"] == "latest" {
                                match serde_json::from_value::<Drone>(doc) {
                                    Ok(drone) => self.apply(drone),
                                    Err(e) => {
                                        tracing::debug!(error = %e, "a change that is not a drone")
                                    }
                                }
                            }
                        }
                        position = page.next;
                        if quiet {
                            tokio::time::sleep(POLL_EVERY).await;
                        }
                    }
                    Err(e) if e.is_range_gone() => match self.container.refresh_ranges().await {
                        Ok(map) => {
                            for child in map.ranges().iter().filter(|r| r.parents.contains(&range))
                            {
                                tokio::spawn(
                                    self.clone()
                                        .follow_range(child.id.clone(), position.clone()),
                                );
                            }
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, range, "cannot read the ranges after a split");
                            tokio::time::sleep(POLL_EVERY).await;
                        }
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, range, "change feed read failed; trying again");
                        tokio::time::sleep(POLL_EVERY).await;
                    }
                }
            }
        })
    }
}
