//! What the demo's remote configuration did: the drones whose `reportInterval` was set
//! through the hub's service API, their message rate before and after, every
//! acknowledgement read back from their twins, and what the change costs in IoT Hub
//! messages.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::twin::Ack;

/// The remote configuration of part of the fleet.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RemoteConfig {
    /// The drones switched.
    pub drones: usize,
    /// The new report interval, seconds of flight.
    pub report_interval_s: f64,
    /// The value sent (seconds of wall time: the flight's over the speedup).
    pub sent_s: f64,
    /// Wall seconds into the flight when the patches went.
    pub at_secs: f64,
    /// Their messages per drone-minute of flight before the change.
    pub before_per_min: f64,
    /// And after (live: over the last interval; in the report: from the change's taking
    /// effect to the end).
    pub after_per_min: f64,
    /// The desired `$version` each drone's patch made.
    pub desired_versions: BTreeMap<String, u64>,
    /// Each drone's acknowledgement of `reportInterval`, read back from its twin.
    pub acks: BTreeMap<String, Ack>,
    /// Drones whose patch or read-back failed, and why.
    pub failed: BTreeMap<String, String>,
    /// IoT Hub messages a day the switched drones add at the new interval (from `fleet
    /// plan`'s per-drone figures).
    pub added_messages_per_day: f64,
    /// Whether the figures are final (the report) or live.
    pub settled: bool,
}

impl RemoteConfig {
    /// Drones that acknowledged the version their patch made with status 200.
    pub fn acknowledged(&self) -> usize {
        self.acks
            .iter()
            .filter(|(device, ack)| {
                ack.ac == 200 && self.desired_versions.get(*device) == Some(&ack.av)
            })
            .count()
    }

    /// The live view's line.
    pub fn line(&self) -> String {
        format!(
            "twin: reportInterval={} s (flight) on {} drones at {:.1} s: {:.1} -> {:.1} msgs/drone-min, acked {}/{}{}",
            self.report_interval_s,
            self.drones,
            self.at_secs,
            self.before_per_min,
            self.after_per_min,
            self.acknowledged(),
            self.drones,
            if self.failed.is_empty() {
                String::new()
            } else {
                format!(", {} failed", self.failed.len())
            }
        )
    }

    /// The report's lines.
    pub fn render(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "remote config: reportInterval={} s of flight ({} s wall) on {} drones at {:.1} s, PATCH /twins over HTTPS",
            self.report_interval_s, self.sent_s, self.drones, self.at_secs
        );
        let _ = writeln!(
            s,
            "  their messages per drone-minute of flight: {:.1} before, {:.1} after ({:.1}x)",
            self.before_per_min,
            self.after_per_min,
            self.after_per_min / self.before_per_min.max(f64::MIN_POSITIVE)
        );
        let _ = writeln!(
            s,
            "  acknowledged (read back with GET /twins): {} of {}",
            self.acknowledged(),
            self.drones
        );
        for (device, ack) in &self.acks {
            let _ = writeln!(
                s,
                "    {device} reportInterval value {} ac {} av {} (desired $version {})",
                ack.value,
                ack.ac,
                ack.av,
                self.desired_versions
                    .get(device)
                    .map_or_else(|| "?".to_owned(), u64::to_string)
            );
        }
        for (device, why) in &self.failed {
            let _ = writeln!(s, "    {device} failed: {why}");
        }
        let _ = writeln!(
            s,
            "  cost: +{:.0} IoT Hub messages a day for these {} drones ({:.0} each; {:.2} S2 units of 6,000,000 a day)",
            self.added_messages_per_day,
            self.drones,
            self.added_messages_per_day / self.drones.max(1) as f64,
            self.added_messages_per_day / 6_000_000.0
        );
    }
}
