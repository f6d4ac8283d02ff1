//! What a demo run cost per drone, measured, beside what `fleet plan` predicts for the same
//! settings.

use std::fmt::Write as _;

use serde::Serialize;

/// The three figures a fleet's bill follows, per drone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PerDroneCost {
    /// Request units the writes spent per drone-hour of flight.
    pub ru_per_hour: f64,
    /// IoT Hub messages (4 KB chunks) per drone-day of flight.
    pub messages_per_day: f64,
    /// Latest-position writes per drone-hour of flight.
    pub writes_per_hour: f64,
}

/// A drone's history, per drone-hour of flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HistoryPerDrone {
    /// Request units its history's writes spent.
    pub ru_per_hour: f64,
    /// Bytes its history documents take as stored.
    pub bytes_per_hour: f64,
}

/// The history's cost, measured and planned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HistoryCost {
    /// Measured: the endpoint's RU on documents of kind `history` or `segment`, and the
    /// bytes of those documents read back.
    pub measured: HistoryPerDrone,
    /// What `fleet plan` predicts for segments.
    pub planned: HistoryPerDrone,
}

/// The run's cost against the plan's.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CostComparison {
    /// The settings both were made for.
    pub settings: String,
    /// Drone-hours of flight the measurement covers.
    pub drone_hours: f64,
    /// Measured: the endpoint's RU on the positions container, the messages the hub took
    /// (or the broker delivered), the writers' latest-position writes.
    pub measured: PerDroneCost,
    /// What `fleet plan` predicts.
    pub planned: PerDroneCost,
    /// The largest message, bytes (IoT Hub meters 4 KB chunks).
    pub largest_message_bytes: usize,
    /// The history's share, when the writers kept one.
    pub history: Option<HistoryCost>,
}

impl CostComparison {
    /// The largest difference of a measured figure from its prediction, as a fraction of
    /// the prediction.
    #[cfg(test)]
    pub fn worst_deviation(&self) -> f64 {
        self.rows()
            .into_iter()
            .map(|(_, measured, planned)| (measured - planned).abs() / planned)
            .fold(0.0, f64::max)
    }

    /// Each figure: its name, measured, planned.
    fn rows(&self) -> Vec<(&'static str, f64, f64)> {
        let (m, p) = (&self.measured, &self.planned);
        let mut rows = vec![
            ("RU per drone-hour", m.ru_per_hour, p.ru_per_hour),
            (
                "IoT Hub messages/drone-day",
                m.messages_per_day,
                p.messages_per_day,
            ),
            (
                "writes per drone-hour",
                m.writes_per_hour,
                p.writes_per_hour,
            ),
        ];
        if let Some(h) = &self.history {
            rows.push((
                "history RU per drone-hour",
                h.measured.ru_per_hour,
                h.planned.ru_per_hour,
            ));
            rows.push((
                "history bytes/drone-hour",
                h.measured.bytes_per_hour,
                h.planned.bytes_per_hour,
            ));
        }
        rows
    }

    /// The comparison as the report prints it.
    pub fn render(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "cost per drone ({}; {:.1} drone-hours of flight; largest message {} bytes):",
            self.settings, self.drone_hours, self.largest_message_bytes
        );
        let _ = writeln!(s, "  {:<28} {:>10} {:>10}", "", "measured", "planned");
        for (name, measured, planned) in self.rows() {
            let _ = writeln!(
                s,
                "  {name:<28} {measured:>10.0} {planned:>10.0}  ({:+.1} %)",
                100.0 * (measured - planned) / planned
            );
        }
    }
}
