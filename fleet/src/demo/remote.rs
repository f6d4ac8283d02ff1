//! The demo's remote configuration: at a third of the flight a tenth of the fleet (at most
//! [`SWITCHED`] drones) is told `reportInterval` = 1 s of flight through the hub's service
//! REST API ([`TwinClient`], over HTTPS with the `iothubowner` policy's SAS, not the hub's
//! in-process shortcut). Owns the patches, reading their acknowledgements back from the twins'
//! reported properties, and the switched drones' message rate before and after: live from
//! their agents' acknowledged positions, in the report from the messages the hub accepted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hub_sim::HubSim;
use hub_sim::MessageSource;
use serde_json::json;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::fleet::{Fleet, device_id};
use super::{DemoConfig, DemoError, REPORT_INTERVAL};
use crate::plan;
use crate::report::RemoteConfig;
use crate::twin::{self, TwinClient};

/// The most drones switched.
pub const SWITCHED: usize = 100;
/// The report interval they are told, seconds of flight.
const NEW_INTERVAL_S: f64 = 1.0;
/// Patches and reads in flight at once.
const CONCURRENCY: usize = 16;
/// How often the twins are read back until every drone acknowledged.
const READ_BACK_EVERY: Duration = Duration::from_millis(500);

/// The drones of a fleet of `drones` that are switched: a tenth, at most `SWITCHED`.
pub fn switched(drones: usize) -> usize {
    SWITCHED.min(drones.div_ceil(10))
}

/// The remote configuration of one run.
pub(super) struct Remote {
    client: Arc<TwinClient>,
    devices: Arc<Vec<String>>,
    speedup: f64,
    at: Duration,
    ramp: Duration,
    state: Arc<Mutex<RemoteConfig>>,
    switched_ms: Option<i64>,
    first: Option<(Duration, u64)>,
    last: Option<(Duration, u64)>,
    task: Option<tokio::task::JoinHandle<()>>,
    stop: CancellationToken,
    publish_every: Option<Duration>,
}

impl Remote {
    /// The remote configuration of `config`'s run on `hub`: the first drones of the fleet.
    pub(super) fn new(config: &DemoConfig, hub: &HubSim) -> Result<Remote, DemoError> {
        let base = format!("https://{}", hub.ws_addr());
        let client = TwinClient::new(
            &hub.service_connection_string(),
            Some(&base),
            Some(hub.ca_pem()),
        )
        .map_err(|e| DemoError::Hub(e.to_string()))?;
        let devices: Vec<String> = (0..switched(config.drones)).map(device_id).collect();
        let sent_s = NEW_INTERVAL_S / config.speedup;
        Ok(Remote {
            client: Arc::new(client),
            state: Arc::new(Mutex::new(RemoteConfig {
                drones: devices.len(),
                report_interval_s: NEW_INTERVAL_S,
                sent_s,
                added_messages_per_day: added_messages_per_day(config, devices.len()),
                ..RemoteConfig::default()
            })),
            devices: Arc::new(devices),
            speedup: config.speedup,
            at: config.duration / 3,
            ramp: config.interval(),
            switched_ms: None,
            first: None,
            last: None,
            task: None,
            stop: CancellationToken::new(),
            publish_every: config.publish_every,
        })
    }

    /// Whether the patches are yet to be sent (at a third of the flight).
    pub(super) fn pending(&self) -> bool {
        self.task.is_none()
    }

    /// Sends the patches (in the background), then reads the twins back until every drone
    /// acknowledged. The rate before is the switched drones' since the view's first sample.
    pub(super) fn switch(&mut self, elapsed: Duration, fleet: &Fleet) {
        self.switched_ms = Some(now_ms());
        let acked = fleet.acked_of(&self.devices);
        let before = self.first.map(|first| self.rate(first, (elapsed, acked)));
        self.last = Some((elapsed, acked));
        let sent_s = {
            let mut state = self.state.lock().expect("remote lock");
            state.at_secs = elapsed.as_secs_f64();
            if let Some(before) = before {
                state.before_per_min = before;
            }
            state.sent_s
        };
        let (client, devices, state, stop) = (
            self.client.clone(),
            self.devices.clone(),
            self.state.clone(),
            self.stop.clone(),
        );
        self.task = Some(tokio::spawn(async move {
            let desired = json!({"reportInterval": sent_s});
            let patched = for_each(&devices, &client, move |client, device| {
                let desired = desired.clone();
                async move {
                    let twin = client.update_desired(&device, desired).await?;
                    twin.pointer("/properties/desired/$version")
                        .and_then(serde_json::Value::as_u64)
                        .ok_or_else(|| twin::TwinError::Answer {
                            what: format!("patching the desired properties of {device}"),
                            reason: "no desired $version in the twin".into(),
                        })
                }
            })
            .await;
            {
                let mut state = state.lock().expect("remote lock");
                for (device, outcome) in patched {
                    match outcome {
                        Ok(version) => {
                            state.desired_versions.insert(device, version);
                        }
                        Err(err) => {
                            state.failed.insert(device, err.to_string());
                        }
                    }
                }
            }
            let mut tick = tokio::time::interval(READ_BACK_EVERY);
            while !stop.is_cancelled() && read_back(&client, &state).await > 0 {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
            }
        }));
    }

    /// The live figures at `elapsed`: the switched drones' rate over the last interval,
    /// from their agents' acknowledged positions. `None` before the switch.
    pub(super) fn live(&mut self, elapsed: Duration, fleet: &Fleet) -> Option<RemoteConfig> {
        let acked = fleet.acked_of(&self.devices);
        let rate = self.last.map(|last| self.rate(last, (elapsed, acked)));
        self.first.get_or_insert((elapsed, acked));
        self.last = Some((elapsed, acked));
        let mut state = self.state.lock().expect("remote lock");
        if let Some(rate) = rate {
            if self.switched_ms.is_none() {
                state.before_per_min = rate;
            } else {
                state.after_per_min = rate;
            }
        }
        self.switched_ms.map(|_| state.clone())
    }

    /// Positions per switched drone-minute of flight between two samples.
    fn rate(&self, (from, before): (Duration, u64), (to, after): (Duration, u64)) -> f64 {
        let minutes = to.saturating_sub(from).as_secs_f64() * self.speedup / 60.0;
        after.saturating_sub(before) as f64 / (self.devices.len().max(1) as f64 * minutes.max(1e-9))
    }

    /// Stops reading back, reads every twin once more, and measures the rates from the
    /// messages `hub` accepted before the switch (after the drones' starts) and after it
    /// (from two report intervals after the patches to `end`). `None` if it never switched.
    pub(super) async fn finish(self, hub: &HubSim, end: SystemTime) -> Option<RemoteConfig> {
        let switched_ms = self.switched_ms?;
        self.stop.cancel();
        if let Some(task) = self.task {
            let _ = task.await;
        }
        read_back(&self.client, &self.state).await;
        let mut state = self.state.lock().expect("remote lock").clone();
        let ms = |d: Duration| d.as_millis() as i64;
        let end_ms = end.duration_since(UNIX_EPOCH).map_or(0, ms);
        let settle = ms(self.ramp * 2)
            + ms(self
                .publish_every
                .map_or(Duration::ZERO, |p| p.div_f64(self.speedup)));
        let before = (
            switched_ms - ms(self.at.saturating_sub(self.ramp)),
            switched_ms,
        );
        let after = (switched_ms + settle, end_ms);
        let counts = messages_in(hub, &self.devices, [before, after]);
        let per_min = |count: u64, (from, to): (i64, i64)| {
            let minutes = (to - from).max(1) as f64 / 60_000.0 * self.speedup;
            count as f64 / (self.devices.len().max(1) as f64 * minutes)
        };
        state.before_per_min = per_min(counts[0], before);
        state.after_per_min = per_min(counts[1], after);
        state.settled = true;
        Some(state)
    }
}

/// Reads back the twins of the drones patched but not yet acknowledged; returns how many
/// are still waiting.
async fn read_back(client: &Arc<TwinClient>, state: &Arc<Mutex<RemoteConfig>>) -> usize {
    let waiting: Vec<String> = {
        let state = state.lock().expect("remote lock");
        state
            .desired_versions
            .iter()
            .filter(|(device, version)| {
                state.acks.get(*device).is_none_or(|ack| ack.av < **version)
            })
            .map(|(device, _)| device.clone())
            .collect()
    };
    let read = for_each(&waiting, client, |client, device| async move {
        client.twin(&device).await
    })
    .await;
    let mut state = state.lock().expect("remote lock");
    let mut still = 0;
    for (device, outcome) in read {
        match outcome.map(|t| twin::ack(&t, "reportInterval")) {
            Ok(Some(ack)) => {
                let done = state
                    .desired_versions
                    .get(&device)
                    .is_some_and(|v| ack.av >= *v);
                state.acks.insert(device.clone(), ack);
                still += usize::from(!done);
            }
            Ok(None) => still += 1,
            Err(err) => {
                state.failed.insert(device, err.to_string());
            }
        }
    }
    still
}

/// Runs `call` for every device, [`CONCURRENCY`] at once; the outcomes by device.
async fn for_each<T, F, Fut>(
    devices: &[String],
    client: &Arc<TwinClient>,
    call: F,
) -> Vec<(String, Result<T, twin::TwinError>)>
where
    T: Send + 'static,
    F: Fn(Arc<TwinClient>, String) -> Fut,
    Fut: std::future::Future<Output = Result<T, twin::TwinError>> + Send + 'static,
{
    let mut set = JoinSet::new();
    let mut out = Vec::with_capacity(devices.len());
    for device in devices {
        if set.len() >= CONCURRENCY
            && let Some(Ok(done)) = set.join_next().await
        {
            out.push(done);
        }
        let fut = call(client.clone(), device.clone());
        let device = device.clone();
        set.spawn(async move { (device, fut.await) });
    }
    while let Some(done) = set.join_next().await {
        if let Ok(done) = done {
            out.push(done);
        }
    }
    out
}

/// Telemetry messages from `devices` the hub enqueued in each window (epoch ms, from
/// inclusive, to exclusive).
fn messages_in<const N: usize>(
    hub: &HubSim,
    devices: &[String],
    windows: [(i64, i64); N],
) -> [u64; N] {
    let devices: HashSet<&str> = devices.iter().map(String::as_str).collect();
    let mut counts = [0; N];
    let mut events = Vec::new();
    for index in 0..hub.partitions().count() {
        events.clear();
        if let Some(partition) = hub.partitions().get(index) {
            partition.read(0, usize::MAX, &mut events);
        }
        for event in &events {
            if event.message.source != MessageSource::Telemetry
                || !devices.contains(&*event.message.device_id)
            {
                continue;
            }
            for (count, (from, to)) in counts.iter_mut().zip(windows) {
                if (from..to).contains(&event.enqueued_ms) {
                    *count += 1;
                }
            }
        }
    }
    counts
}

/// IoT Hub messages a day `drones` add at the new interval, from `fleet plan`'s per-drone
/// telemetry figure.
fn added_messages_per_day(config: &DemoConfig, drones: usize) -> f64 {
    let tiers: Vec<_> = plan::TIERS.iter().map(|t| t.name).collect();
    let prices = plan::Prices::parse(plan::prices::SHIPPED, "deploy/prices.toml", &tiers)
        .expect("the shipped price table parses");
    let per_drone = |interval: Duration| {
        let fleet = plan::Fleet {
            drones: 1,
            report_interval: interval,
            publish_every: config.publish_every.unwrap_or(interval).max(interval),
            min_write_interval: config.min_write_interval.unwrap_or_default(),
            history: None,
            regions: 1,
            read_ru_per_sec: 0.0,
            control_plane: None,
            indexing_policy: config.indexing.policy(),
        };
        plan::plan(&fleet, &prices, &plan::Limits::shipped())
            .per_drone
            .messages_per_day
    };
    let new = per_drone(Duration::from_secs_f64(NEW_INTERVAL_S));
    (new - per_drone(REPORT_INTERVAL)) * drones as f64
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
