//! The demo's independent check: the last position each drone published, as a
//! subscriber on the broker sees it, and the spatial query through the read API compared
//! with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio_util::sync::CancellationToken;

use super::{DemoConfig, DemoError, QUERY_RADIUS_M};
use crate::api::ServedApi;
use crate::broker::Broker;
use crate::geo::distance_m;
use crate::report::SpatialAnswer;

/// Per device id: the order, latitude and longitude of its newest position.
type LastPositions = HashMap<String, (telemetry::PositionOrder, f64, f64)>;

/// The last position each drone published, as seen by a subscriber on the broker: the
/// independent check of the spatial query's answer.
pub(super) struct Observer {
    last: Arc<Mutex<LastPositions>>,
    stop: CancellationToken,
}

impl Observer {
    /// Subscribes (QoS 1, so nothing is lost on the way) and returns once subscribed.
    pub(super) async fn start(broker: &Broker) -> Observer {
        let mut options = MqttOptions::new("fleet-observer", "127.0.0.1", broker.addr().port());
        options.set_keep_alive(Duration::from_secs(30));
        options.set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut events) = AsyncClient::new(options, 1024);
        let last = Arc::new(Mutex::new(HashMap::new()));
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
                            if let Ok(pos) = telemetry::wire::decode(&p.payload) {
                                let order = pos.order();
                                let mut last = last.lock().expect("observer lock");
                                let entry = last
                                    .entry(pos.device_id)
                                    .or_insert((order, pos.lat, pos.lon));
                                if order >= entry.0 {
                                    *entry = (order, pos.lat, pos.lon);
                                }
                            }
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

    pub(super) fn stop(&self) {
        self.stop.cancel();
    }

    /// Drones whose last published position is within `radius_m` of `point`, sorted.
    fn within(&self, point: (f64, f64), radius_m: f64) -> Vec<String> {
        let mut ids: Vec<String> = self
            .last
            .lock()
            .expect("observer lock")
            .iter()
            .filter(|(_, (_, lat, lon))| distance_m(point, (*lat, *lon)) < radius_m)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }
}

/// Asks the read API which drones are within [`QUERY_RADIUS_M`] of the fleet's home (a
/// fan-out over the partitions), and checks the answer against the observer's.
pub(super) async fn spatial_query(
    config: &DemoConfig,
    api: &ServedApi,
    observer: &Observer,
) -> Result<SpatialAnswer, DemoError> {
    let (lat, lon) = config.home;
    let answer = api.near((lat, lon), QUERY_RADIUS_M).await?;
    let drones = answer.drones;
    let expected = observer.within((lat, lon), QUERY_RADIUS_M);
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
