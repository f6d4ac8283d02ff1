//! gpsd over TCP: sends `?WATCH={"enable":true,"json":true}` and reads `TPV` reports.
//! Mode 2 (2D) and 3 (3D) are fixes; mode 0 or 1 is "no fix" and clears the latest fix.
//! Other report classes (`VERSION`, `DEVICES`, `WATCH`, `SKY`, ...) are ignored.
//! Where gpsd listens is [`GpsdAddress`] ([`address`]).

use chrono::{DateTime, Utc};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::{Fix, FixSink, FixTime, SourceError};

mod address;
pub use address::{AddressError, GPSD_PORT, GpsdAddress};

/// The longest report line accepted (gpsd's own limit is about 10 KB).
const MAX_LINE: usize = 64 * 1024;

const WATCH: &[u8] = b"?WATCH={\"enable\":true,\"json\":true}\n";

/// What one report line says about the position.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// A TPV report with a 2D or 3D fix.
    Fix(Fix),
    /// A TPV report without a fix.
    NoFix,
    /// Any other report.
    Other,
}

#[derive(Deserialize)]
struct Tpv {
    class: String,
    #[serde(default)]
    mode: u8,
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

/// Interprets one gpsd JSON line; `received` stamps a fix whose report has no time.
pub fn parse_line(line: &str, received: DateTime<Utc>) -> Result<Report, SourceError> {
    let tpv: Tpv = match serde_json::from_str(line) {
        Ok(tpv) => tpv,
        Err(err) => {
            return Err(SourceError::Protocol(format!(
                "not a gpsd JSON report ({err}): {}",
                line.chars().take(80).collect::<String>()
            )));
        }
    };
    if tpv.class != "TPV" {
        return Ok(Report::Other);
    }
    let (Some(lat), Some(lon)) = (tpv.lat, tpv.lon) else {
        return Ok(Report::NoFix);
    };
    if tpv.mode < 2 {
        return Ok(Report::NoFix);
    }
    let time = tpv
        .time
        .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
        .map_or(FixTime::Board(received), |t| {
            FixTime::Gps(t.with_timezone(&Utc))
        });
    Ok(Report::Fix(Fix {
        time,
        lat,
        lon,
        alt_m: if tpv.mode >= 3 {
            tpv.alt_msl.or(tpv.alt).or(tpv.alt_hae)
        } else {
            None
        },
        heading_deg: tpv.track,
        speed_mps: tpv.speed,
        battery_pct: None,
    }))
}

/// Connects to gpsd at `address` and feeds `sink` until the connection fails.
pub(crate) async fn run(address: GpsdAddress, sink: FixSink) -> Result<(), SourceError> {
    let mut stream = TcpStream::connect((address.host(), address.port())).await?;
    stream.write_all(WATCH).await?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
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
            Ok(Report::Fix(fix)) => sink.fix(fix),
            Ok(Report::NoFix) => sink.no_fix(),
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
        let sky = r#"{"class":"SKY","device":"/dev/ttyACM0","satellites":[]}"#;
        assert_eq!(parse_line(sky, now()).unwrap(), Report::Other);
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
}
