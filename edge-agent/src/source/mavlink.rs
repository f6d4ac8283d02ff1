//! MAVLink from the flight controller: `GLOBAL_POSITION_INT` (id 33) gives the position,
//! `SYS_STATUS` the battery. Connection strings are those of the `mavlink` crate:
//! `udpin:ADDR:PORT` (listen), `tcpout:HOST:PORT` (connect), `serial:DEVICE:BAUD`.
//!
//! `GLOBAL_POSITION_INT` carries no fix state; a message at exactly 0,0 is what autopilots
//! send before their first fix and counts as "no fix".

use chrono::Utc;
use mavlink::dialects::common::{GLOBAL_POSITION_INT_DATA, MavMessage};

use super::{Fix, FixSink, SourceError};

/// `hdg` value meaning "unknown".
const HEADING_UNKNOWN: u16 = u16::MAX;

/// Checks a connection string's form; the error says what is wrong.
pub fn check_address(address: &str) -> Result<(), String> {
    let (scheme, rest) = address
        .split_once(':')
        .ok_or_else(|| format!("`{address}` has no `scheme:` prefix"))?;
    match scheme {
        "udpin" | "tcpout" => {
            let (_, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("`{address}` needs HOST:PORT after `{scheme}:`"))?;
            port.parse::<u16>()
                .map(|_| ())
                .map_err(|_| format!("`{port}` in `{address}` is not a port number"))
        }
        "serial" => {
            let (_, baud) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("`{address}` needs DEVICE:BAUD after `serial:`"))?;
            baud.parse::<u32>()
                .map(|_| ())
                .map_err(|_| format!("`{baud}` in `{address}` is not a baud rate"))
        }
        other => Err(format!(
            "`{other}:` is not supported; use udpin:, tcpout: or serial:"
        )),
    }
}

/// The fix in a `GLOBAL_POSITION_INT`, or `None` before the autopilot has one.
pub fn fix_from(position: &GLOBAL_POSITION_INT_DATA, battery_pct: Option<u8>) -> Option<Fix> {
    if position.lat == 0 && position.lon == 0 {
        return None;
    }
    let (vx, vy) = (f64::from(position.vx), f64::from(position.vy));
    Some(Fix {
        time: Utc::now(),
        lat: f64::from(position.lat) / 1e7,
        lon: f64::from(position.lon) / 1e7,
        alt_m: Some(f64::from(position.alt) / 1000.0),
        heading_deg: (position.hdg != HEADING_UNKNOWN).then(|| f64::from(position.hdg) / 100.0),
        speed_mps: Some(vx.hypot(vy) / 100.0),
        battery_pct,
    })
}

/// Connects to the flight controller and feeds `sink` until the connection fails.
pub(crate) async fn run(address: String, sink: FixSink) -> Result<(), SourceError> {
    let connection = mavlink::connect_async::<MavMessage>(&address).await?;
    let mut battery_pct = None;
    loop {
        let (_, message) = connection
            .recv()
            .await
            .map_err(|err| SourceError::Protocol(format!("MAVLink read failed: {err}")))?;
        match message {
            MavMessage::GLOBAL_POSITION_INT(position) => match fix_from(&position, battery_pct) {
                Some(fix) => sink.fix(fix),
                None => sink.no_fix(),
            },
            MavMessage::SYS_STATUS(status) => {
                battery_pct = u8::try_from(status.battery_remaining)
                    .ok()
                    .filter(|pct| *pct <= 100);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_units() {
        let position = GLOBAL_POSITION_INT_DATA {
            time_boot_ms: 1000,
            lat: 476_205_000,
            lon: -1_223_493_000,
            alt: 121_500,
            relative_alt: 100_000,
            vx: 300,
            vy: 400,
            vz: 0,
            hdg: 27_000,
        };
        let fix = fix_from(&position, Some(81)).unwrap();
        assert_eq!(fix.lat, 47.6205);
        assert_eq!(fix.lon, -122.3493);
        assert_eq!(fix.alt_m, Some(121.5));
        assert_eq!(fix.heading_deg, Some(270.0));
        assert_eq!(fix.speed_mps, Some(5.0));
        assert_eq!(fix.battery_pct, Some(81));
        let unknown = GLOBAL_POSITION_INT_DATA {
            hdg: u16::MAX,
            ..position.clone()
        };
        assert_eq!(fix_from(&unknown, None).unwrap().heading_deg, None);
        let none = GLOBAL_POSITION_INT_DATA {
            lat: 0,
            lon: 0,
            ..position
        };
        assert_eq!(fix_from(&none, None), None);
    }

    #[test]
    fn checks_connection_strings() {
        assert!(check_address("udpin:0.0.0.0:14550").is_ok());
        assert!(check_address("tcpout:127.0.0.1:5760").is_ok());
        assert!(check_address("serial:/dev/ttyAMA0:57600").is_ok());
        assert!(check_address("udpin:0.0.0.0").is_err());
        assert!(check_address("serial:/dev/ttyAMA0:fast").is_err());
        assert!(
            check_address("bluetooth:x:1")
                .unwrap_err()
                .contains("udpin")
        );
        assert!(check_address("nothing").is_err());
    }
}
