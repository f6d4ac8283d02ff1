//! The report's alerts part (`--alerts`): the fence and the rules the alerter judged by, the
//! drones whose agents were killed, and what the demo's webhook receiver took: counts by
//! rule and alert, the silent drones, and whether each alert id arrived once.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

/// How many alerts the report lists one per line.
const LISTED: usize = 12;

/// What the alerter delivered to the demo's webhook receiver.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AlertReport {
    /// The receiver's URL.
    pub webhook: String,
    /// The fence's id.
    pub fence: String,
    /// The fence, in words (its extent).
    pub fence_extent: String,
    /// The geofence rule's name.
    pub fence_rule: String,
    /// The silent rule's name.
    pub silent_rule: String,
    /// The silent rule's `silentAfter`, wall seconds.
    pub silent_after_secs: f64,
    /// The drones whose agents were killed.
    pub killed: Vec<String>,
    /// When they were killed, wall seconds into the flight; `None` if the run ended first.
    pub killed_at_secs: Option<f64>,
    /// Requests the receiver accepted (signature and media type right).
    pub deliveries: u64,
    /// Requests it refused: unsigned, wrongly signed, not structured CloudEvents.
    pub refused: u64,
    /// Distinct alert ids, by rule, then by alert (`enter`, `leave`, `silent`, ...).
    pub by_rule: BTreeMap<String, BTreeMap<String, u64>>,
    /// Ids that arrived more than once with the same content, and how many times each.
    pub repeated: BTreeMap<String, u64>,
    /// Ids that arrived again with different content (none expected: an id names one alert).
    pub conflicting: Vec<String>,
    /// Per killed drone, its distinct silent alerts.
    pub silent_of_killed: BTreeMap<String, u64>,
    /// Drones not killed that were alerted silent (none expected).
    pub silent_live: Vec<String>,
    /// The alerts in the order they first arrived.
    pub alerts: Vec<ReceivedAlert>,
    /// The alerter's own failure, when it stopped by itself.
    pub alerter_error: Option<String>,
}

/// One alert as the receiver took it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReceivedAlert {
    /// The CloudEvent id.
    pub id: String,
    /// The rule's name.
    pub rule: String,
    /// `enter`, `leave`, `silent`, `lowBattery`.
    pub alert: String,
    /// The drone.
    pub device: String,
    /// The fence, for a crossing.
    pub fence: Option<String>,
    /// The device time of the position that triggered it.
    pub device_time: String,
    /// Times it arrived.
    pub deliveries: u64,
}

impl AlertReport {
    /// Distinct alerts of `alert` under every rule.
    pub fn count(&self, alert: &str) -> u64 {
        self.by_rule
            .values()
            .filter_map(|kinds| kinds.get(alert))
            .sum()
    }

    /// Whether every id arrived exactly once.
    pub fn each_once(&self) -> bool {
        self.repeated.is_empty() && self.conflicting.is_empty()
    }

    /// Whether every killed drone was alerted silent exactly once.
    pub fn every_killed_silent_once(&self) -> bool {
        !self.killed.is_empty()
            && self
                .killed
                .iter()
                .all(|d| self.silent_of_killed.get(d) == Some(&1))
    }

    /// Appends the alerts part to the report's text.
    pub fn render(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "alerts: fence {} ({}), rule {} (geofence) and rule {} (silentAfter {:.1} s wall)",
            self.fence,
            self.fence_extent,
            self.fence_rule,
            self.silent_rule,
            self.silent_after_secs
        );
        let _ = match self.killed_at_secs {
            Some(at) => writeln!(s, "agents killed at {at:.1} s: {}", self.killed.join(", ")),
            None => writeln!(s, "agents NOT killed: the run ended first"),
        };
        let distinct: u64 = self.by_rule.values().flat_map(|k| k.values()).sum();
        let _ = writeln!(
            s,
            "webhook {} (signature checked): {distinct} alerts in {} deliveries, {} refused",
            self.webhook, self.deliveries, self.refused
        );
        for (rule, kinds) in &self.by_rule {
            let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            let _ = writeln!(s, "  rule {rule}: {}", counts.join(", "));
        }
        let alerted = self
            .killed
            .iter()
            .filter(|d| self.silent_of_killed.get(*d).is_some_and(|n| *n > 0))
            .count();
        let _ = writeln!(
            s,
            "silent: {alerted} of {} killed drones alerted{}; {} drones still flying alerted",
            self.killed.len(),
            if self.every_killed_silent_once() {
                " once each"
            } else {
                ""
            },
            self.silent_live.len()
        );
        if self.each_once() {
            let _ = writeln!(s, "every alert id arrived once");
        }
        if !self.repeated.is_empty() {
            let again: u64 = self.repeated.values().map(|n| n - 1).sum();
            let _ = writeln!(
                s,
                "{} alert ids arrived more than once, with the same content ({again} repeats; at least once allows it)",
                self.repeated.len()
            );
        }
        if !self.conflicting.is_empty() {
            let _ = writeln!(
                s,
                "{} alert ids arrived with different content: {}",
                self.conflicting.len(),
                self.conflicting.join(", ")
            );
        }
        if let Some(error) = &self.alerter_error {
            let _ = writeln!(s, "the alerter stopped by itself: {error}");
        }
        for a in self.alerts.iter().take(LISTED) {
            let _ = writeln!(
                s,
                "  {:<7} {:<12} {:<10} {}  id {}{}",
                a.alert,
                a.device,
                a.fence.as_deref().unwrap_or("-"),
                a.device_time,
                a.id,
                if a.deliveries > 1 {
                    format!(" (x{})", a.deliveries)
                } else {
                    String::new()
                }
            );
        }
        if self.alerts.len() > LISTED {
            let _ = writeln!(s, "  ... and {} more", self.alerts.len() - LISTED);
        }
    }
}
