//! The demo's independent check: the newest position each drone published (as the hub
//! accepted it, or as a subscriber on the broker saw it), the spatial query through the
//! read API compared with it, and every drone's document compared with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio_util::sync::CancellationToken;

use super::{DemoConfig, DemoError, QUERY_RADIUS_M};
use crate::api::ServedApi;
use crate::broker::Broker;
use crate::report::{NewestCheck, SpatialAnswer};
use hub_sim::HubSim;
use telemetry::geo::haversine_m;
use telemetry::wire::Decoded;

/// Per device id: the order, latitude and longitude of its newest position.
type LastPositions = HashMap<String, (telemetry::PositionOrder, f64, f64)>;

/// The newest position each drone published, and the messages that carried them.
#[derive(Debug, Default)]
pub(super) struct Published {
    last: LastPositions,
    /// Messages (a position, or a batch of them).
    pub(super) messages: u64,
    /// The largest message, bytes.
    pub(super) largest_bytes: usize,
}

impl Published {
    /// Counts the message `payload` and keeps each of its positions that is the newest of
    /// its drone so far.
    fn record(&mut self, payload: &[u8]) {
        self.messages += 1;
        self.largest_bytes = self.largest_bytes.max(payload.len());
        let positions = match telemetry::wire::decode_message(payload) {
            Ok(Decoded::One(position)) => vec![position],
            Ok(Decoded::Batch(batch)) => batch.positions.into_iter().flatten().collect(),
            Err(_) => Vec::new(),
        };
        for pos in positions {
            let order = pos.order();
            let entry = self
                .last
                .entry(pos.device_id)
                .or_insert((order, pos.lat, pos.lon));
            if order >= entry.0 {
                *entry = (order, pos.lat, pos.lon);
            }
        }
    }

    /// What the hub accepted: every event of every partition.
    pub(super) fn from_hub(hub: &HubSim) -> Published {
        let mut published = Published::default();
        let mut events = Vec::new();
        for index in 0..hub.partitions().count() {
            events.clear();
            if let Some(partition) = hub.partitions().get(index) {
                partition.read(0, usize::MAX, &mut events);
            }
            for event in &events {
                published.record(&event.message.body);
            }
        }
        published
    }

    /// Drones that published.
    pub(super) fn drones(&self) -> usize {
        self.last.len()
    }

    /// The sequence number of `device`'s newest position.
    pub(super) fn newest_seq(&self, device: &str) -> Option<u64> {
        self.last.get(device).map(|(order, _, _)| order.seq)
    }

    /// Drones whose last published position is within `radius_m` of `(lat, lon)`, sorted.
    ///
    /// The distance is the one the Cosmos stand-in's `ST_DISTANCE` uses: what this check
    /// tests is the path from the drones to the stored documents, not the formula (which
    /// cosmos-sim's tests hold against an independent one), and with the same formula a drone
    /// on the circle's edge is judged alike on both sides.
    fn within(&self, (lat, lon): (f64, f64), radius_m: f64) -> Vec<String> {
        let mut ids: Vec<String> = self
            .last
            .iter()
            .filter(|(_, (_, p_lat, p_lon))| haversine_m((lon, lat), (*p_lon, *p_lat)) < radius_m)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }
}

/// The last position each drone published, as seen by a subscriber on the broker: the
/// independent check of the spatial query's answer.
pub(super) struct Observer {
    last: Arc<Mutex<Published>>,
    stop: CancellationToken,
}

impl Observer {
    /// Subscribes (QoS 1, so nothing is lost on the way) and returns once subscribed.
    pub(super) async fn start(broker: &Broker) -> Observer {
        let mut options = MqttOptions::new("fleet-observer", "127.0.0.1", broker.addr().port());
        options.set_keep_alive(Duration::from_secs(30));
        options.set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut events) = AsyncClient::new(options, 1024);
        let last = Arc::new(Mutex::new(Published::default()));
        let stop = CancellationToken::new();
        let (subscribed_tx, subscribed) = tokio::sync::oneshot::channel();
        let _ = client
            .subscribe("devices/+/messages/events/#", QoS::AtLeastOnce)
            .await;
        tokio::spawn({
            let last = last.clone();
            let stop = stop.clone();
            async move {
                let mut subscribed_tx = Some(subscribed_tx);
                loop {
                    let event = tokio::select! {
                        () = stop.cancelled() => break,
                        event = events.poll() => event,
                    };
                    match event {
                        Ok(Event::Incoming(Packet::SubAck(_))) => {
                            if let Some(tx) = subscribed_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            last.lock().expect("observer lock").record(&p.payload);
                        }
                        Ok(_) => {}
                        Err(err) => {
                            tracing::debug!(error = %err, "observer connection");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
                let _ = client.disconnect().await;
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(10), subscribed).await;
        Observer { last, stop }
    }

    /// Unsubscribes; returns what it saw.
    pub(super) fn stop(self) -> Published {
        self.stop.cancel();
        std::mem::take(&mut *self.last.lock().expect("observer lock"))
    }
}

/// Asks the read API which drones are within [`QUERY_RADIUS_M`] of the fleet's home (a
/// fan-out over the partitions), and checks the answer against what was published.
pub(super) async fn spatial_query(
    config: &DemoConfig,
    api: &ServedApi,
    published: &Published,
) -> Result<SpatialAnswer, DemoError> {
    let (lat, lon) = config.home;
    let answer = api.near((lat, lon), QUERY_RADIUS_M).await?;
    let drones = answer.drones;
    let expected = published.within((lat, lon), QUERY_RADIUS_M);
    let found: std::collections::BTreeSet<&str> =
        drones.iter().map(|(id, _)| id.as_str()).collect();
    let missing = expected
        .iter()
        .filter(|id| !found.contains(id.as_str()))
        .cloned()
        .collect();
    let unexpected = found
        .iter()
        .filter(|id| expected.binary_search_by(|e| e.as_str().cmp(id)).is_err())
        .map(|id| (*id).to_owned())
        .collect();
    Ok(SpatialAnswer {
        request: answer.request,
        lat,
        lon,
        radius_m: QUERY_RADIUS_M,
        drones,
        request_charge: answer.request_charge,
        calls: answer.calls,
        expected_from_published: expected.len(),
        missing,
        unexpected,
    })
}

/// Compares every drone's latest document (through the read API) with the newest
/// position it published.
pub(super) async fn newest_check(
    api: &ServedApi,
    published: &Published,
) -> Result<NewestCheck, DemoError> {
    let documents: HashMap<String, u64> = api.latest().await?.into_iter().collect();
    let mut check = NewestCheck {
        drones: published.drones(),
        ..NewestCheck::default()
    };
    let mut devices: Vec<&String> = published.last.keys().collect();
    devices.sort();
    for device in devices {
        let newest = published.newest_seq(device).unwrap_or(0);
        match documents.get(device.as_str()) {
            None => check.missing.push(device.clone()),
            Some(seq) if *seq >= newest => check.at_newest += 1,
            Some(seq) => check.behind.push((device.clone(), *seq, newest)),
        }
    }
    Ok(check)
}
