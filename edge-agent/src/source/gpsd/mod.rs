//! gpsd over TCP: sends `?WATCH={"enable":true,"json":true}` and reads `TPV` and `SKY`
//! reports. Mode 2 (2D) and 3 (3D) are fixes; mode 0 or 1 is "no fix" and clears the
//! latest fix. Other report classes (`VERSION`, `DEVICES`, `WATCH`, ...) are ignored.
//! Where gpsd listens is [`GpsdAddress`] ([`address`]).
//!
//! GNSS health, as gpsd's JSON protocol defines it:
//! - fix type from `TPV` `mode` (2: 2D, 3: 3D) refined by `status` (2: DGPS, 3: RTK fixed,
//!   4: RTK float); dead reckoning, GNSS with dead reckoning, time only and simulated
//!   (`status` 5 to 8) have no fix type of ours and leave it out;
//! - accuracy from `TPV` `eph`, gpsd's estimated horizontal position error in metres
//!   (computed by gpsd from the receiver's own estimate, or from HDOP and its range error
//!   model when the receiver gives none, as plain NMEA receivers do);
//! - satellites used and visible from `SKY` `uSat` and `nSat` (or its `satellites` list,
//!   before gpsd 3.20). gpsd sends a cycle's `SKY` after its `TPV`: a `SKY` updates the
//!   latest fix when that fix is at most [`SKY_MAX_AGE`] old, and a new fix takes the
//!   latest `SKY` if it is at most that old and no report without a fix came between.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use telemetry::{FixType, Gnss};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{Fix, FixSink, FixTime, SourceError};

mod address;
pub use address::{AddressError, GpsdAddress};

/// The longest report line accepted (gpsd's own limit is about 10 KB).
const MAX_LINE: usize = 64 * 1024;

const WATCH: &[u8] = b"?WATCH={\"enable\":true,\"json\":true}\n";

/// How far apart a `SKY` and a fix may arrive for the one to describe the other: two
/// cycles of a 1 Hz receiver.
const SKY_MAX_AGE: Duration = Duration::from_secs(2);

/// What one report line says about the position.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// A TPV report with a 2D or 3D fix.
    Fix(Fix),
    /// A TPV report without a fix.
    NoFix,
    /// A SKY report.
    Sky(Sky),
    /// Any other report.
    Other,
}

/// The satellites of a SKY report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sky {
    /// Satellites used in the fix.
    pub used: Option<u8>,
    /// Satellites visible.
    pub visible: Option<u8>,
}

impl Sky {
    /// Puts these counts into `gnss`.
    fn apply(self, gnss: &mut Gnss) {
        gnss.sats = self.used;
        gnss.sats_visible = self.visible;
    }
}

/// The fields read of any report; which apply depends on `class`.
#[derive(Deserialize)]
struct Fields {
    class: String,
    #[serde(default)]
    mode: u8,
    status: Option<u8>,
    eph: Option<f64>,
    #[serde(rename = "uSat")]
    used: Option<u64>,
    #[serde(rename = "nSat")]
    visible: Option<u64>,
    satellites: Option<Vec<Satellite>>,
    time: Option<String>,
    lat: Option<f64>,
    lon: Option<f64>,
    #[serde(rename = "altMSL")]
    alt_msl: Option<f64>,
    #[serde(rename = "altHAE")]
    alt_hae: Option<f64>,
    /// Older gpsd versions (before 3.20).
    alt: Option<f64>,
    track: Option<f64>,
    speed: Option<f64>,
}

/// One satellite of a SKY report's list.
#[derive(Deserialize)]
struct Satellite {
    #[serde(default)]
    used: bool,
}

/// Interprets one gpsd JSON line; `received` stamps a fix whose report has no time.
pub fn parse_line(line: &str, received: DateTime<Utc>) -> Result<Report, SourceError> {
    let report: Fields = match serde_json::from_str(line) {
        Ok(report) => report,
        Err(err) => {
            return Err(SourceError::Protocol(format!(
                "not a gpsd JSON report ({err}): {}",
                line.chars().take(80).collect::<String>()
            )));
        }
    };
    if report.class == "SKY" {
        let list = report.satellites.as_deref();
        let count = |n: Option<u64>, listed: Option<usize>| {
            n.or(listed.map(|l| l as u64))
                .and_then(|n| u8::try_from(n).ok())
        };
        return Ok(Report::Sky(Sky {
            used: count(
                report.used,
                list.map(|l| l.iter().filter(|s| s.used).count()),
            ),
            visible: count(report.visible, list.map(<[Satellite]>::len)),
        }));
    }
    if report.class != "TPV" {
        return Ok(Report::Other);
    }
    let (Some(lat), Some(lon)) = (report.lat, report.lon) else {
        return Ok(Report::NoFix);
    };
    if report.mode < 2 {
        return Ok(Report::NoFix);
    }
    let time = report
        .time
        .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
        .map_or(FixTime::Board(received), |t| {
            FixTime::Gps(t.with_timezone(&Utc))
        });
    Ok(Report::Fix(Fix {
        time,
        lat,
        lon,
        alt_m: if report.mode >= 3 {
            report.alt_msl.or(report.alt).or(report.alt_hae)
        } else {
            None
        },
        heading_deg: report.track,
        speed_mps: report.speed,
        battery_pct: None,
        gnss: Gnss {
            fix: fix_type(report.mode, report.status),
            h_acc_m: report.eph.filter(|eph| eph.is_finite() && *eph >= 0.0),
            ..Gnss::default()
        },
    }))
}

/// The fix type of a TPV report with a fix (`mode` 2 or 3) and its `status`.
fn fix_type(mode: u8, status: Option<u8>) -> Option<FixType> {
    match (mode, status) {
        // Dead reckoning, GNSS with dead reckoning, time only (surveyed), simulated.
        (_, Some(5..=8)) => None,
        (2, _) => Some(FixType::Fix2d),
        (_, Some(2)) => Some(FixType::Dgps),
        (_, Some(3)) => Some(FixType::RtkFixed),
        (_, Some(4)) => Some(FixType::RtkFloat),
        // Unknown (0), normal (1) or absent, P(Y) (9).
        _ => Some(FixType::Fix3d),
    }
}

/// Connects to gpsd at `address` and feeds `sink` until the connection fails.
pub(crate) async fn run(address: GpsdAddress, sink: FixSink) -> Result<(), SourceError> {
    let mut stream = TcpStream::connect((address.host(), address.port())).await?;
    stream.write_all(WATCH).await?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut sky: Option<(Instant, Sky)> = None;
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE as u64)
            .read_line(&mut line)
            .await?;
        if read == 0 {
            return Err(SourceError::Closed);
        }
        if !line.ends_with('\n') && read >= MAX_LINE {
            return Err(SourceError::Protocol(format!(
                "a report line is longer than {MAX_LINE} bytes"
            )));
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match parse_line(text, Utc::now()) {
            Ok(Report::Fix(mut fix)) => {
                if let Some((_, latest)) = sky.filter(|(at, _)| at.elapsed() <= SKY_MAX_AGE) {
                    latest.apply(&mut fix.gnss);
                }
                sink.fix(fix);
            }
            Ok(Report::Sky(latest)) => {
                sky = Some((Instant::now(), latest));
                sink.update_recent(SKY_MAX_AGE, |fix| latest.apply(&mut fix.gnss));
            }
            Ok(Report::NoFix) => {
                // A SKY before a report without a fix does not describe a later fix.
                sky = None;
                sink.no_fix();
            }
            Ok(Report::Other) => {}
            // One garbled line is not worth a reconnect.
            Err(err) => tracing::debug!(%err, "gpsd line skipped"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_3d_tpv_is_a_fix() {
        let line = r#"{"class":"TPV","device":"/dev/ttyACM0","mode":3,"time":"2026-11-22T09:15:02.000Z","ept":0.005,"lat":47.620500000,"lon":-122.349300000,"altHAE":100.5,"altMSL":121.5,"track":270.0,"speed":12.3}"#;
        let Report::Fix(fix) = parse_line(line, now()).unwrap() else {
            panic!("expected a fix")
        };
        assert_eq!(fix.lat, 47.6205);
        assert_eq!(fix.lon, -122.3493);
        assert_eq!(fix.alt_m, Some(121.5));
        assert_eq!(fix.heading_deg, Some(270.0));
        assert_eq!(fix.speed_mps, Some(12.3));
        assert_eq!(
            fix.time,
            FixTime::Gps("2026-11-22T09:15:02Z".parse().unwrap())
        );
    }

    #[test]
    fn no_fix_and_other_classes() {
        let no_fix =
            r#"{"class":"TPV","device":"/dev/ttyACM0","mode":1,"time":"2026-11-22T09:15:02.000Z"}"#;
        assert_eq!(parse_line(no_fix, now()).unwrap(), Report::NoFix);

        let version =
            r#"{"class":"VERSION","release":"3.25","rev":"3.25","proto_major":3,"proto_minor":15}"#;
        assert_eq!(parse_line(version, now()).unwrap(), Report::Other);
        assert!(parse_line("garbage", now()).is_err());
    }

    #[test]
    fn a_2d_fix_has_no_altitude() {
        let line = r#"{"class":"TPV","mode":2,"lat":1.5,"lon":2.5,"altMSL":10.0}"#;
        let Report::Fix(fix) = parse_line(line, now()).unwrap() else {
            panic!("expected a fix")
        };
        assert_eq!(fix.alt_m, None);
        assert_eq!(fix.time, FixTime::Board(now()));
    }

    /// A TPV report of gpsd 3.22 replaying a GGA of fix quality 4 (RTK fixed).
    const RTK_TPV: &str = r#"{"class":"TPV","device":"/dev/pts/1","status":3,"mode":3,"time":"2026-10-14T09:15:43.000Z","ept":0.005,"lat":47.621843333,"lon":-122.347305000,"altHAE":111.5000,"altMSL":130.5000,"alt":130.5000,"epv":29.900,"track":45.0000,"magtrack":60.3853,"magvar":15.4,"speed":9.980,"climb":0.500,"epc":2329.67,"geoidSep":-19.000,"eph":17.100,"sep":30.400}"#;

    #[test]
    fn tpv_mode_status_and_eph_are_the_health() {
        let Report::Fix(fix) = parse_line(RTK_TPV, now()).unwrap() else {
            panic!("expected a fix")
        };
        assert_eq!(
            fix.gnss,
            Gnss {
                fix: Some(FixType::RtkFixed),
                h_acc_m: Some(17.1),
                ..Gnss::default()
            }
        );
        // gpsd's status values (gpsd_json(5)) with mode 3, and mode 2.
        let with = |mode: u8, status: Option<u8>| {
            let status = status.map_or(String::new(), |s| format!(r#""status":{s},"#));
            let line = format!(r#"{{"class":"TPV",{status}"mode":{mode},"lat":1.5,"lon":2.5}}"#);
            match parse_line(&line, now()).unwrap() {
                Report::Fix(fix) => fix.gnss.fix,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(with(3, None), Some(FixType::Fix3d));
        assert_eq!(with(3, Some(0)), Some(FixType::Fix3d));
        assert_eq!(with(3, Some(1)), Some(FixType::Fix3d));
        assert_eq!(with(3, Some(2)), Some(FixType::Dgps));
        assert_eq!(with(3, Some(3)), Some(FixType::RtkFixed));
        assert_eq!(with(3, Some(4)), Some(FixType::RtkFloat));
        for dead_reckoning_time_or_simulated in 5..=8 {
            assert_eq!(with(3, Some(dead_reckoning_time_or_simulated)), None);
        }
        assert_eq!(with(2, None), Some(FixType::Fix2d));
        assert_eq!(with(2, Some(2)), Some(FixType::Fix2d));
        // No eph, or an unusable one: no accuracy.
        for eph in ["", r#""eph":-1.0,"#] {
            let line = format!(r#"{{"class":"TPV","mode":3,{eph}"lat":1.5,"lon":2.5}}"#);
            let Report::Fix(fix) = parse_line(&line, now()).unwrap() else {
                panic!("expected a fix")
            };
            assert_eq!(fix.gnss.h_acc_m, None, "{line}");
        }
    }

    #[test]
    fn sky_gives_satellites_used_and_visible() {
        // gpsd 3.22 replaying GSA (9 used) and GSV (11 in view).
        let sky = r#"{"class":"SKY","device":"/dev/pts/3","xdop":0.62,"ydop":0.72,"vdop":1.30,"tdop":1.04,"hdop":0.90,"gdop":2.16,"pdop":1.60,"nSat":11,"uSat":9,"satellites":[{"PRN":2,"el":45.0,"az":120.0,"ss":40.0,"used":true,"gnssid":0,"svid":2},{"PRN":24,"el":10.0,"az":100.0,"ss":22.0,"used":false,"gnssid":0,"svid":24}]}"#;
        let expected = Sky {
            used: Some(9),
            visible: Some(11),
        };
        assert_eq!(parse_line(sky, now()).unwrap(), Report::Sky(expected));
        // Before gpsd 3.20: no uSat or nSat, the list counts.
        let old = r#"{"class":"SKY","satellites":[{"PRN":2,"used":true},{"PRN":5,"used":true},{"PRN":24,"used":false}]}"#;
        let counted = Sky {
            used: Some(2),
            visible: Some(3),
        };
        assert_eq!(parse_line(old, now()).unwrap(), Report::Sky(counted));
        let none = r#"{"class":"SKY","device":"/dev/ttyACM0"}"#;
        let unknown = Sky {
            used: None,
            visible: None,
        };
        assert_eq!(parse_line(none, now()).unwrap(), Report::Sky(unknown));
    }
}
