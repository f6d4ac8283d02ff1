//! Where the flight stack is (`MAVLINK_ADDRESS`), in the connection-string forms flight
//! stacks, mavlink-router and MAVProxy use:
//!
//! | form | meaning |
//! |---|---|
//! | `udpin:HOST:PORT` | listen on UDP; answer whoever sent last (an autopilot or router sending to us) |
//! | `udpout:HOST:PORT` | send to a router's UDP endpoint (a mavlink-router server endpoint waits for us to speak) |
//! | `tcpin:HOST:PORT` | listen on TCP for one connection |
//! | `tcpout:HOST:PORT` | connect over TCP (SITL on 5760, mavlink-router's TCP server on 5760) |
//! | `serial:DEVICE:BAUD` | a serial port, 8N1 (TELEM2 on `/dev/ttyAMA0` or `/dev/serial0`, often 921600 baud) |

use std::fmt;
use std::path::PathBuf;

/// A parsed `MAVLINK_ADDRESS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MavlinkAddress {
    /// Listen on UDP at `HOST:PORT`.
    UdpIn(String),
    /// Send to UDP `HOST:PORT`.
    UdpOut(String),
    /// Listen on TCP at `HOST:PORT`.
    TcpIn(String),
    /// Connect to TCP `HOST:PORT`.
    TcpOut(String),
    /// A serial port.
    Serial {
        /// The device, e.g. `/dev/ttyAMA0`.
        device: PathBuf,
        /// Bits per second.
        baud: u32,
    },
}

const FORMS: &str = "udpin:0.0.0.0:14550, udpout:192.168.1.10:14550, tcpin:0.0.0.0:5760, tcpout:127.0.0.1:5760 or serial:/dev/ttyAMA0:921600";

impl MavlinkAddress {
    /// Parses a connection string; the error says what to write instead.
    pub fn parse(text: &str) -> Result<MavlinkAddress, String> {
        let Some((scheme, rest)) = text.split_once(':') else {
            return Err(format!(
                "`{text}` has no `scheme:` prefix; write one of {FORMS}"
            ));
        };
        let host_port = |rest: &str| -> Result<String, String> {
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| {
                format!("`{text}` needs HOST:PORT after `{scheme}:`, e.g. {scheme}:127.0.0.1:14550")
            })?;
            if host.is_empty() {
                return Err(format!(
                    "`{text}` has an empty host; write e.g. {scheme}:0.0.0.0:{port}"
                ));
            }
            port.parse::<u16>()
                .map_err(|_| format!("`{port}` in `{text}` is not a port number"))?;
            Ok(rest.to_owned())
        };
        match scheme {
            "udpin" => host_port(rest).map(MavlinkAddress::UdpIn),
            "udpout" | "udp" => host_port(rest).map(MavlinkAddress::UdpOut),
            "tcpin" => host_port(rest).map(MavlinkAddress::TcpIn),
            "tcpout" | "tcp" => host_port(rest).map(MavlinkAddress::TcpOut),
            "serial" => {
                let (device, baud) = rest.rsplit_once(':').ok_or_else(|| {
                    format!("`{text}` needs DEVICE:BAUD after `serial:`, e.g. serial:/dev/ttyAMA0:921600")
                })?;
                if device.is_empty() {
                    return Err(format!(
                        "`{text}` names no device; write e.g. serial:/dev/ttyAMA0:{baud}"
                    ));
                }
                let baud = baud.parse::<u32>().ok().filter(|b| *b > 0).ok_or_else(|| {
                    format!("`{baud}` in `{text}` is not a baud rate, e.g. 921600 or 57600")
                })?;
                Ok(MavlinkAddress::Serial {
                    device: device.into(),
                    baud,
                })
            }
            other => Err(format!("`{other}:` is not supported; write one of {FORMS}")),
        }
    }
}

impl fmt::Display for MavlinkAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MavlinkAddress::UdpIn(a) => write!(f, "udpin:{a}"),
            MavlinkAddress::UdpOut(a) => write!(f, "udpout:{a}"),
            MavlinkAddress::TcpIn(a) => write!(f, "tcpin:{a}"),
            MavlinkAddress::TcpOut(a) => write!(f, "tcpout:{a}"),
            MavlinkAddress::Serial { device, baud } => {
                write!(f, "serial:{}:{baud}", device.display())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            MavlinkAddress::parse("udpin:0.0.0.0:14550"),
            Ok(MavlinkAddress::UdpIn("0.0.0.0:14550".into()))
        );
        assert_eq!(
            MavlinkAddress::parse("udpout:10.0.0.2:14550"),
            Ok(MavlinkAddress::UdpOut("10.0.0.2:14550".into()))
        );
        assert_eq!(
            MavlinkAddress::parse("tcpin:[::]:5760"),
            Ok(MavlinkAddress::TcpIn("[::]:5760".into()))
        );
        assert_eq!(
            MavlinkAddress::parse("tcpout:127.0.0.1:5760"),
            Ok(MavlinkAddress::TcpOut("127.0.0.1:5760".into()))
        );
        let serial = MavlinkAddress::parse("serial:/dev/ttyAMA0:921600").unwrap();
        assert_eq!(
            serial,
            MavlinkAddress::Serial {
                device: "/dev/ttyAMA0".into(),
                baud: 921_600
            }
        );
        assert_eq!(serial.to_string(), "serial:/dev/ttyAMA0:921600");
    }

    #[test]
    fn wrong_forms_say_what_to_write() {
        for (wrong, hint) in [
            ("udpin:0.0.0.0", "HOST:PORT"),
            ("udpin::14550", "empty host"),
            ("tcpout:host:http", "not a port"),
            ("serial:/dev/ttyAMA0:fast", "baud rate"),
            ("serial:/dev/ttyAMA0", "DEVICE:BAUD"),
            ("bluetooth:x:1", "udpin:0.0.0.0:14550"),
            ("/dev/ttyAMA0", "scheme"),
        ] {
            let err = MavlinkAddress::parse(wrong).unwrap_err();
            assert!(err.contains(hint), "{wrong}: {err}");
        }
    }
}
