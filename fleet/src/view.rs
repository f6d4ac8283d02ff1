//! The demo's live terminal view: a pure function from a [`Snapshot`] of the run to lines
//! of text, and the small ANSI painter that redraws them in place.
//!
//! The view shows the drones registered through DPS (on the hub) and the field metrics
//! side by side: messages per second, lateness p50/p99
//! against the staleness cutoff, received versus written, drops by reason, 429s, and the
//! heat map (RU per partition key range per second, one bar per range, scaled to the
//! range's provisioned RU/s).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use cloud_writer::DropReason;
use serde::Serialize;

use crate::onboard::RegistrationTotals;

/// What the view shows at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// The scenario's name.
    pub scenario: String,
    /// On the hub: the drones' registrations through its provisioning service.
    pub registration: Option<RegistrationTotals>,
    /// Wall time since the fleet started.
    pub elapsed: Duration,
    /// How much faster than real time the drones fly.
    pub speedup: f64,
    /// Positions the writer received per second (over the last interval).
    pub msgs_per_sec: f64,
    /// Positions the drones published so far.
    pub published: u64,
    /// Positions the writer received so far.
    pub received: u64,
    /// Documents the writer wrote so far.
    pub written: u64,
    /// Positions dropped so far, by reason.
    pub drops: BTreeMap<DropReason, u64>,
    /// Lateness p50 over the last interval, in seconds.
    pub lateness_p50: Option<f64>,
    /// Lateness p99 over the last interval, in seconds.
    pub lateness_p99: Option<f64>,
    /// The staleness cutoff, in seconds.
    pub cutoff_secs: f64,
    /// Requests the endpoint throttled (HTTP 429, including per-operation 429s) so far.
    pub throttled: u64,
    /// RU consumed per second per partition key range (over the last interval).
    pub ru_per_range: Vec<RangeLoad>,
    /// The writer replicas and the Event Hubs partitions each reads (on the hub).
    pub replicas: Vec<ReplicaView>,
    /// Every Event Hubs partition's lag in events after the checkpoint (on the hub).
    pub partition_lag: BTreeMap<String, i64>,
    /// On the hub, once part of the fleet was told a new report interval through the twin:
    /// their message rate before and now, and their acknowledgements so far.
    pub remote_config: Option<crate::remote_config::RemoteConfig>,
}

/// What became of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaState {
    /// Reading and writing.
    Running,
    /// Stopped in order (drained, checkpointed, partitions released).
    Stopped,
    /// Killed mid-run: nothing drained, checkpointed or released.
    Killed,
}

/// One replica as the view shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaView {
    /// Its name in the demo.
    pub name: String,
    /// Running, stopped or killed.
    pub state: ReplicaState,
    /// The Event Hubs partitions it reads (none once killed or stopped).
    pub owned: Vec<String>,
}

/// One bar of the heat map.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RangeLoad {
    /// The partition key range id.
    pub range: String,
    /// RU consumed per second.
    pub ru_per_sec: f64,
    /// The range's provisioned RU/s (the bar's full width).
    pub capacity: f64,
    /// Requests of this range throttled so far.
    pub throttled: u64,
}

/// Width of a heat map bar in characters.
const BAR_WIDTH: usize = 40;

/// The lines of the view for `snap`. No colours or cursor control: the caller paints.
pub fn render(snap: &Snapshot) -> Vec<String> {
    let mut lines = Vec::new();
    let flight = snap.elapsed.mul_f64(snap.speedup.max(0.0));
    lines.push(format!(
        "scenario {}   wall {}   flight time {} ({}x)",
        snap.scenario,
        clock(snap.elapsed),
        clock(flight),
        trim_float(snap.speedup)
    ));
    if let Some(remote) = &snap.remote_config {
        lines.push(remote.line());
    }
    if let Some(registration) = &snap.registration {
        lines.push(registration.line());
    }
    lines.push(format!(
        "messages/s {:>8.0}   published {:>9}   received {:>9}   written {:>9}   behind {:>8}",
        snap.msgs_per_sec,
        snap.published,
        snap.received,
        snap.written,
        snap.received
            .saturating_sub(snap.written + snap.drops.values().sum::<u64>())
    ));
    lines.push(format!(
        "lateness  p50 {}   p99 {}   cutoff {}",
        seconds(snap.lateness_p50),
        seconds(snap.lateness_p99),
        seconds(Some(snap.cutoff_secs))
    ));
    let mut drops = String::new();
    if snap.drops.values().all(|n| *n == 0) {
        drops.push_str("none");
    }
    for (reason, n) in snap.drops.iter().filter(|(_, n)| **n > 0) {
        let _ = write!(drops, "{reason} {n}  ");
    }
    lines.push(format!(
        "drops     {}   429s {}",
        drops.trim_end(),
        snap.throttled
    ));
    lines.push("RU/s per partition key range (heat map)".to_owned());
    for range in &snap.ru_per_range {
        lines.push(format!(
            "  {:>4} |{}| {:>7.0} / {:<6.0} 429s {}",
            range.range,
            bar(range.ru_per_sec, range.capacity),
            range.ru_per_sec,
            range.capacity,
            range.throttled
        ));
    }
    lines.extend(ownership_lines(snap));
    lines
}

/// Which replica reads which partition, and every partition's lag (none on the MQTT path).
fn ownership_lines(snap: &Snapshot) -> Vec<String> {
    if snap.partition_lag.is_empty() && snap.replicas.len() < 2 {
        return Vec::new();
    }
    let mut lines =
        vec!["Event Hubs partitions: lag (events after the checkpoint) and owner".to_owned()];
    for (partition, lag) in &snap.partition_lag {
        let owner = snap
            .replicas
            .iter()
            .find(|r| r.owned.contains(partition))
            .map_or("-", |r| r.name.as_str());
        lines.push(format!("  {partition:>4}  lag {lag:>7}   owner {owner}"));
    }
    let replicas: Vec<String> = snap.replicas.iter().map(replica_text).collect();
    lines.push(format!("replicas  {}", replicas.join("   ")));
    lines
}

/// `name [0,1]`, or `name killed`.
fn replica_text(r: &ReplicaView) -> String {
    match r.state {
        ReplicaState::Running => format!("{} [{}]", r.name, r.owned.join(",")),
        ReplicaState::Stopped => format!("{} stopped", r.name),
        ReplicaState::Killed => format!("{} KILLED", r.name),
    }
}

/// One line for logs and non-terminal output.
pub fn summary_line(snap: &Snapshot) -> String {
    let heat: Vec<String> = snap
        .ru_per_range
        .iter()
        .map(|r| format!("{}:{:.0}", r.range, r.ru_per_sec))
        .collect();
    let drops: u64 = snap.drops.values().sum();
    let owners: Vec<String> = snap.replicas.iter().map(replica_text).collect();
    let lag: i64 = snap.partition_lag.values().sum();
    let mut hub = if snap.partition_lag.is_empty() {
        String::new()
    } else {
        format!(" lag={lag} replicas=[{}]", owners.join(" "))
    };
    if let Some(r) = &snap.registration {
        let _ = write!(hub, " registered={}/{}", r.registered, r.drones);
        if !r.failed.is_empty() {
            let _ = write!(
                hub,
                " registration_failures={}",
                r.failed.values().sum::<u64>()
            );
        }
    }
    if let Some(r) = &snap.remote_config {
        let _ = write!(
            hub,
            " twin_switched={} msgs/drone-min={:.1}->{:.1} acked={}",
            r.drones,
            r.before_per_min,
            r.after_per_min,
            r.acknowledged()
        );
    }
    format!(
        "t={} msg/s={:.0} received={} written={} dropped={} lateness_p50={} p99={} 429s={} ru/s=[{}]{hub}",
        clock(snap.elapsed),
        snap.msgs_per_sec,
        snap.received,
        snap.written,
        drops,
        seconds(snap.lateness_p50),
        seconds(snap.lateness_p99),
        snap.throttled,
        heat.join(" ")
    )
}

/// A bar of [`BAR_WIDTH`] cells filled in proportion to `value / full` (over-full bars
/// are capped and end in `>`).
pub fn bar(value: f64, full: f64) -> String {
    let ratio = if full > 0.0 { value / full } else { 0.0 };
    let filled = ((ratio.clamp(0.0, 1.0)) * BAR_WIDTH as f64).round() as usize;
    let mut out = "#".repeat(filled);
    out.push_str(&" ".repeat(BAR_WIDTH - filled));
    if ratio > 1.0 {
        out.pop();
        out.push('>');
    }
    out
}

fn clock(d: Duration) -> String {
    let secs = d.as_secs();
    format!("{:02}:{:02}", secs / 60, secs % 60)
}

fn seconds(value: Option<f64>) -> String {
    match value {
        None => "-".to_owned(),
        Some(v) if v < 1.0 => format!("{:.0} ms", v * 1000.0),
        Some(v) => format!("{v:.1} s"),
    }
}

fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// Paints views to stdout: in place with ANSI cursor movement on a terminal, one
/// [`summary_line`] per call otherwise.
#[derive(Debug)]
pub struct Painter {
    terminal: bool,
    last_height: usize,
}

impl Painter {
    /// A painter for stdout; `terminal` chooses in-place redraws.
    pub fn new(terminal: bool) -> Painter {
        Painter {
            terminal,
            last_height: 0,
        }
    }

    /// Shows `snap`.
    pub fn paint(&mut self, snap: &Snapshot) {
        let mut out = String::new();
        if self.terminal {
            if self.last_height > 0 {
                // Up to the first line of the previous view, then clear to the end of screen.
                let _ = write!(out, "\x1b[{}A\r\x1b[J", self.last_height);
            }
            let lines = render(snap);
            self.last_height = lines.len();
            for line in lines {
                out.push_str(&line);
                out.push('\n');
            }
        } else {
            out.push_str(&summary_line(snap));
            out.push('\n');
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes());
        let _ = stdout.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        Snapshot {
            scenario: "hot-partition".to_owned(),
            registration: None,
            elapsed: Duration::from_secs(75),
            speedup: 10.0,
            msgs_per_sec: 1999.6,
            published: 150_000,
            received: 149_000,
            written: 100_000,
            drops: BTreeMap::from([(DropReason::Stale, 40_000), (DropReason::Invalid, 0)]),
            lateness_p50: Some(0.25),
            lateness_p99: Some(31.04),
            cutoff_secs: 30.0,
            throttled: 321,
            ru_per_range: vec![
                RangeLoad {
                    range: "0".to_owned(),
                    ru_per_sec: 10_000.0,
                    capacity: 5_000.0,
                    throttled: 321,
                },
                RangeLoad {
                    range: "1".to_owned(),
                    ru_per_sec: 0.0,
                    capacity: 5_000.0,
                    throttled: 0,
                },
                RangeLoad {
                    range: "2".to_owned(),
                    ru_per_sec: 2_500.0,
                    capacity: 5_000.0,
                    throttled: 0,
                },
            ],
            replicas: Vec::new(),
            partition_lag: BTreeMap::new(),
            remote_config: None,
        }
    }

    #[test]
    fn shows_partition_owners_lag_and_a_killed_replica() {
        let mut snap = snapshot();
        // Without the hub, no partition lines.
        assert!(!render(&snap).join("\n").contains("Event Hubs"));
        snap.replicas = vec![
            ReplicaView {
                name: "writer-a".to_owned(),
                state: ReplicaState::Running,
                owned: vec!["0".to_owned(), "1".to_owned(), "3".to_owned()],
            },
            ReplicaView {
                name: "writer-b".to_owned(),
                state: ReplicaState::Killed,
                owned: Vec::new(),
            },
        ];
        snap.partition_lag = BTreeMap::from([
            ("0".to_owned(), 0),
            ("1".to_owned(), 4),
            ("2".to_owned(), 1234),
            ("3".to_owned(), 0),
        ]);
        let text = render(&snap).join("\n");
        assert!(
            text.contains("     1  lag       4   owner writer-a"),
            "{text}"
        );
        assert!(text.contains("     2  lag    1234   owner -"), "{text}");
        assert!(
            text.contains("replicas  writer-a [0,1,3]   writer-b KILLED"),
            "{text}"
        );
        let line = summary_line(&snap);
        assert!(
            line.ends_with(" lag=1238 replicas=[writer-a [0,1,3] writer-b KILLED]"),
            "{line}"
        );
    }

    #[test]
    fn shows_the_drones_registered_and_failures_by_reason() {
        let mut snap = snapshot();
        assert!(!render(&snap).join("\n").contains("registered"));
        snap.registration = Some(RegistrationTotals {
            drones: 1000,
            registered: 998,
            failed: BTreeMap::from([("refused 401 (401002)".to_owned(), 2)]),
            secs: 2.5,
            concurrency: 50,
        });
        let lines = render(&snap);
        assert_eq!(
            lines[1],
            "drones registered through DPS: 998 of 1000 in 2.5 s (50 at once), failures refused 401 (401002) 2"
        );
        let line = summary_line(&snap);
        assert!(
            line.ends_with(" registered=998/1000 registration_failures=2"),
            "{line}"
        );
    }

    #[test]
    fn shows_every_field_metric() {
        let lines = render(&snapshot());
        let text = lines.join("\n");
        assert!(lines[0].contains("wall 01:15"), "{text}");
        assert!(lines[0].contains("flight time 12:30 (10x)"), "{text}");
        assert!(text.contains("messages/s     2000"), "{text}");
        assert!(text.contains("received    149000"), "{text}");
        assert!(text.contains("written    100000"), "{text}");
        // 149,000 received - 100,000 written - 40,000 dropped.
        assert!(text.contains("behind     9000"), "{text}");
        assert!(
            text.contains("p50 250 ms   p99 31.0 s   cutoff 30.0 s"),
            "{text}"
        );
        // Zero counts are not listed.
        assert!(text.contains("drops     stale 40000   429s 321"), "{text}");
        assert!(!text.contains(DropReason::Invalid.as_str()), "{text}");
    }

    #[test]
    fn heat_map_bars_scale_to_capacity() {
        let lines = render(&snapshot());
        let bars: Vec<&String> = lines.iter().filter(|l| l.contains('|')).collect();
        assert_eq!(bars.len(), 3);
        // Over capacity: full and marked.
        assert!(bars[0].contains(&format!("|{}>|", "#".repeat(BAR_WIDTH - 1))));
        assert!(bars[1].contains(&format!("|{}|", " ".repeat(BAR_WIDTH))));
        let half = format!(
            "|{}{}|",
            "#".repeat(BAR_WIDTH / 2),
            " ".repeat(BAR_WIDTH / 2)
        );
        assert!(bars[2].contains(&half), "{}", bars[2]);
        assert!(bars[0].contains("429s 321"));
    }

    #[test]
    fn empty_run_renders_placeholders() {
        let lines = render(&Snapshot::default());
        let text = lines.join("\n");
        assert!(text.contains("p50 -   p99 -"), "{text}");
        assert!(text.contains("drops     none"), "{text}");
        assert_eq!(bar(1.0, 0.0), " ".repeat(BAR_WIDTH));
    }

    #[test]
    fn summary_line_is_one_line_with_the_heat_map() {
        let line = summary_line(&snapshot());
        assert!(!line.contains('\n'));
        assert!(line.contains("dropped=40000"), "{line}");
        assert!(line.contains("ru/s=[0:10000 1:0 2:2500]"), "{line}");
    }
}
