//! The demo's fleet: simulated drones, each a real edge agent, onboarded, started and
//! stopped together.

use edge_agent::{Agent, AgentHandle, SimConfig, SourceConfig};
use tokio_util::sync::CancellationToken;

use super::transport::Transport;
use super::{DemoConfig, DemoError, Output};
use crate::onboard::{Onboarding, Registrations};

/// The running fleet.
pub(super) struct Fleet {
    handles: Vec<AgentHandle>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    /// Positions the broker acknowledged, over all drones.
    pub(super) fn published(&self) -> u64 {
        self.handles.iter().map(|h| h.status().acked).sum()
    }

    /// Positions the broker acknowledged from `devices`.
    pub(super) fn acked_of(&self, devices: &[String]) -> u64 {
        self.handles
            .iter()
            .map(AgentHandle::status)
            .filter(|s| devices.contains(&s.device_id))
            .map(|s| s.acked)
            .sum()
    }

    /// Kills the agents of `devices` as a process kill would: their tasks are aborted
    /// mid-flight, nothing flushed, their connections cut.
    pub(super) fn kill(&mut self, devices: &[String]) {
        for (handle, task) in self.handles.iter().zip(&self.tasks) {
            if devices.contains(&handle.status().device_id) {
                task.abort();
            }
        }
    }

    /// Waits for every agent to stop (after the stop token was cancelled); returns the
    /// positions the broker acknowledged.
    pub(super) async fn stop(mut self) -> u64 {
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
        self.published()
    }
}

/// The device id of drone `index`.
pub fn device_id(index: usize) -> String {
    format!("drone-{index:05}")
}

/// Onboards the fleet's drones ([`Transport::onboard`]: on the hub, each registers through
/// its provisioning service), showing the registrations so far once per view interval
/// unless the output is quiet. `None` on the broker.
pub(super) async fn onboard_fleet(
    config: &DemoConfig,
    transport: &mut Transport,
) -> Result<Option<Onboarding>, DemoError> {
    let devices: Vec<String> = (0..config.drones).map(device_id).collect();
    let registrations = Registrations::new(config.drones);
    let onboarding = transport.onboard(&devices, &registrations);
    tokio::pin!(onboarding);
    let start = tokio::time::Instant::now();
    let mut ticker = tokio::time::interval_at(start + config.tick, config.tick);
    loop {
        tokio::select! {
            done = &mut onboarding => return done,
            _ = ticker.tick() => if config.output != Output::Quiet {
                println!("{}", registrations.totals().line());
            }
        }
    }
}

/// Starts the drones: each a real edge agent with the simulated source (its own route,
/// seeded by its index), connected as `transport` says (a drone that did not register
/// through DPS stays on the ground), and a disk buffer under `work`. Their
/// starts are spread over one report interval so that they do not report in lock-step.
pub(super) fn start_fleet(
    config: &DemoConfig,
    transport: &Transport,
    work: &std::path::Path,
    stop: &CancellationToken,
) -> Result<Fleet, DemoError> {
    let interval = config.interval();
    let mut fleet = Fleet {
        handles: Vec::with_capacity(config.drones),
        tasks: Vec::with_capacity(config.drones),
    };
    let mut agents = Vec::with_capacity(config.drones);
    for index in 0..config.drones {
        let device = device_id(index);
        let Some(mut agent_config) = transport.agent_config(&device, &work.join(&device))? else {
            continue;
        };
        agent_config.source = SourceConfig::Sim(SimConfig {
            home_lat: config.home.0,
            home_lon: config.home.1,
            area_radius_m: config.area_radius_m,
            seed: index as u64,
            speedup: config.speedup,
            ..SimConfig::default()
        });
        agent_config.report_interval = interval;
        agent_config.publish_every = config.publish_every.map(|p| p.div_f64(config.speedup));
        agent_config.max_fix_age = interval * 4;
        // A simulation: the buffer is a temporary directory, no fsync per record.
        agent_config.buffer.fsync = false;
        let agent = Agent::new(agent_config).map_err(|source| DemoError::Agent {
            device: device.clone(),
            source,
        })?;
        fleet.handles.push(agent.handle());
        agents.push(agent);
    }
    // Every drone set up before the first flies.
    let flying = agents.len();
    for (index, agent) in agents.into_iter().enumerate() {
        let delay = interval.mul_f64(index as f64 / flying as f64);
        let stop = stop.clone();
        fleet.tasks.push(tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
            if let Err(err) = agent.run(stop).await {
                tracing::warn!(error = %err, "drone stopped");
            }
        }));
    }
    Ok(fleet)
}
