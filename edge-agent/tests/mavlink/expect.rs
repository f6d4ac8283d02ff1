//! What the agent may publish, worked out from what the flight controller says it sent
//! (its JSON lines), with the protocol's scaling; never from our own MAVLink code.

use serde_json::Value;
use telemetry::wire::{FixType, Gnss, Position};

use crate::peer::events;

/// "Unknown" in `hdg`, `vel` and `cog`.
const UNKNOWN_U16: i64 = 65535;
/// "Unknown" in `satellites_visible`.
const UNKNOWN_U8: i64 = 255;

/// One position a vehicle sent, as the agent must publish it.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub system_id: u64,
    pub component_id: u64,
    /// The message that carried it.
    pub msg: &'static str,
    pub lat: f64,
    pub lon: f64,
    pub alt_m: Option<f64>,
    pub heading_deg: Option<f64>,
    pub speed_mps: Option<f64>,
    /// The GPS time of the fix in milliseconds since 1970, when the vehicle gave one.
    pub ts_ms: Option<i64>,
    /// The GNSS health of the vehicle's latest `GPS_RAW_INT` (or of the message itself).
    pub gnss: Gnss,
}

impl Expected {
    /// Whether `p` is this position (and, with `with_time`, carries its GPS time).
    pub fn matches(&self, p: &Position, with_time: bool) -> bool {
        self.same_place(p)
            && p.alt_m == self.alt_m
            && p.heading_deg == self.heading_deg
            && p.speed_mps == self.speed_mps
            && p.gnss == self.gnss
            && (!with_time || Some(p.ts.timestamp_millis()) == self.ts_ms)
    }

    /// Whether `p` is at this position's place.
    pub fn same_place(&self, p: &Position) -> bool {
        p.lat == self.lat && p.lon == self.lon
    }
}

fn int(line: &Value, field: &str) -> i64 {
    line["fields"][field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} in {line}"))
}

fn known(value: i64, scale: f64) -> Option<f64> {
    (value != UNKNOWN_U16).then(|| value as f64 / scale)
}

/// The GNSS health of a `GPS_RAW_INT` line by `common.xml`: `fix_type` as `GPS_FIX_TYPE`
/// (0 "No GPS connected": no health at all; 7 "Static fixed, typically used for base
/// stations": no type on the wire; 8 "PPP, 3D position": 3D), `satellites_visible`
/// (visible, not used; 255 unknown), `h_acc` in mm (an extension: 0 when not sent).
/// `eph` is an HDOP and gives nothing.
fn gps_health(line: &Value) -> Gnss {
    let fix = match int(line, "fix_type") {
        0 => return Gnss::default(),
        1 => Some(FixType::None),
        2 => Some(FixType::Fix2d),
        3 | 8 => Some(FixType::Fix3d),
        4 => Some(FixType::Dgps),
        5 => Some(FixType::RtkFloat),
        6 => Some(FixType::RtkFixed),
        7 => None,
        other => panic!("GPS_FIX_TYPE {other} in {line}"),
    };
    let sats = int(line, "satellites_visible");
    let h_acc = line["fields"]["h_acc"].as_i64().unwrap_or(0);
    Gnss {
        fix,
        sats: None,
        sats_visible: (sats != UNKNOWN_U8).then(|| u8::try_from(sats).unwrap()),
        h_acc_m: (h_acc != 0).then(|| h_acc as f64 / 1000.0),
    }
}

/// Every position the vehicles delivered to the link, in the order sent:
/// `GLOBAL_POSITION_INT` at any place but 0,0; `GPS_RAW_INT` with a 2D or 3D fix, from a
/// vehicle that sent no `GLOBAL_POSITION_INT`. Times from the vehicle's latest
/// `SYSTEM_TIME` (GPS time at a boot time) or `GPS_RAW_INT.time_usec` above 1e15.
pub fn expected_positions(lines: &[Value]) -> Vec<Expected> {
    let sent: Vec<&Value> = events(lines, "sent", None)
        .filter(|l| l["delivered"] == true)
        .collect();
    let has_global = |sender: &Value| {
        sent.iter().any(|l| {
            l["sys"] == sender["sys"]
                && l["comp"] == sender["comp"]
                && l["msg"] == "GLOBAL_POSITION_INT"
        })
    };
    // (system id, component id) -> (time_unix_usec, time_boot_ms) of its latest SYSTEM_TIME.
    let mut system_time = std::collections::HashMap::new();
    // (system id, component id) -> the health of its latest GPS_RAW_INT since its first
    // HEARTBEAT (before which the agent reads nothing of it).
    let mut health = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in &sent {
        let system_id = line["sys"].as_u64().unwrap();
        let component_id = line["comp"].as_u64().unwrap();
        match line["msg"].as_str().unwrap() {
            "SYSTEM_TIME" if int(line, "time_unix_usec") != 0 => {
                system_time.insert(
                    (system_id, component_id),
                    (int(line, "time_unix_usec"), int(line, "time_boot_ms")),
                );
            }
            "GLOBAL_POSITION_INT" => {
                let (lat, lon) = (int(line, "lat"), int(line, "lon"));
                if lat == 0 && lon == 0 {
                    continue;
                }
                let (vx, vy) = (int(line, "vx") as f64, int(line, "vy") as f64);
                let ts_ms =
                    system_time
                        .get(&(system_id, component_id))
                        .map(|&(unix_us, boot_ms)| {
                            (unix_us + (int(line, "time_boot_ms") - boot_ms) * 1000)
                                .div_euclid(1000)
                        });
                out.push(Expected {
                    system_id,
                    component_id,
                    msg: "GLOBAL_POSITION_INT",
                    lat: lat as f64 / 1e7,
                    lon: lon as f64 / 1e7,
                    alt_m: Some(int(line, "alt") as f64 / 1000.0),
                    heading_deg: known(int(line, "hdg"), 100.0),
                    speed_mps: Some(vx.hypot(vy) / 100.0),
                    ts_ms,
                    gnss: health
                        .get(&(system_id, component_id))
                        .copied()
                        .unwrap_or_default(),
                });
            }
            "HEARTBEAT" => {
                health
                    .entry((system_id, component_id))
                    .or_insert_with(Gnss::default);
            }
            "GPS_RAW_INT" if has_global(line) => {
                if let Some(latest) = health.get_mut(&(system_id, component_id)) {
                    *latest = gps_health(line);
                }
            }
            "GPS_RAW_INT" if int(line, "fix_type") >= 2 => {
                let time_usec = int(line, "time_usec");
                out.push(Expected {
                    system_id,
                    component_id,
                    msg: "GPS_RAW_INT",
                    lat: int(line, "lat") as f64 / 1e7,
                    lon: int(line, "lon") as f64 / 1e7,
                    alt_m: Some(int(line, "alt") as f64 / 1000.0),
                    heading_deg: known(int(line, "cog"), 100.0),
                    speed_mps: known(int(line, "vel"), 100.0),
                    ts_ms: (time_usec > 1_000_000_000_000_000).then(|| time_usec.div_euclid(1000)),
                    gnss: gps_health(line),
                });
            }
            _ => {}
        }
    }
    out
}

/// The battery each vehicle reported (the flight controller keeps it constant).
pub fn batteries(lines: &[Value], system_id: u64) -> Vec<i64> {
    let mut out: Vec<i64> = events(lines, "sent", Some("SYS_STATUS"))
        .filter(|l| l["sys"] == system_id)
        .map(|l| int(l, "battery_remaining"))
        .collect();
    out.dedup();
    out
}

/// A short description of a published position, for failure messages.
pub fn describe(p: &Position) -> String {
    format!(
        "{} {} alt {:?} hdg {:?} speed {:?} battery {:?} {:?} ts {} ({})",
        p.lat,
        p.lon,
        p.alt_m,
        p.heading_deg,
        p.speed_mps,
        p.battery_pct,
        p.gnss,
        p.ts.timestamp_millis(),
        p.ts
    )
}
