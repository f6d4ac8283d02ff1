//! gpsd's address as `GPSD_ADDRESS` gives it, checked at start: `HOST:PORT`, `HOST` alone
//! (gpsd's port, 2947), `[IPv6]:PORT` or `[IPv6]`. A URL (`gpsd://…`) or an IPv6 address
//! without brackets is refused with the form to write instead.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

/// gpsd's own port.
pub const GPSD_PORT: u16 = 2947;

/// Where gpsd listens: a host name or address, and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpsdAddress {
    /// A host name, an IPv4 address or an IPv6 address (without brackets).
    host: String,
    port: u16,
}

impl GpsdAddress {
    /// gpsd on this computer, at its own port: `127.0.0.1:2947`.
    pub fn local() -> GpsdAddress {
        GpsdAddress {
            host: "127.0.0.1".to_owned(),
            port: GPSD_PORT,
        }
    }

    /// The host name or address (an IPv6 address without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Why a `GPSD_ADDRESS` is refused; each says what to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Nothing was given.
    #[error(
        "the address is empty: write HOST:PORT (e.g. 127.0.0.1:2947), or HOST for gpsd's port 2947"
    )]
    Empty,
    /// A URL instead of an address.
    #[error("`{given}` is a URL; gpsd's address has no scheme: write `{instead}`")]
    Scheme {
        /// The value given.
        given: String,
        /// The same address without the scheme.
        instead: String,
    },
    /// An IPv6 address without brackets.
    #[error(
        "`{given}`: an IPv6 address goes in brackets: write `[{ip}]:{GPSD_PORT}` (or another port)"
    )]
    Ipv6Brackets {
        /// The value given.
        given: String,
        /// The address.
        ip: Ipv6Addr,
    },
    /// The port is not a number from 1 to 65535.
    #[error(
        "`{given}`: `{port}` is not a port (1 to 65535): write HOST:PORT, or HOST for gpsd's port 2947"
    )]
    Port {
        /// The value given.
        given: String,
        /// The port part.
        port: String,
    },
    /// The host is not a name or an address.
    #[error(
        "`{given}`: `{host}` is not a host name or address: write HOST:PORT (e.g. 127.0.0.1:2947 or gpsd.local:2947), [IPv6]:PORT, or HOST for gpsd's port 2947"
    )]
    Host {
        /// The value given.
        given: String,
        /// The host part.
        host: String,
    },
}

impl FromStr for GpsdAddress {
    type Err = AddressError;

    fn from_str(given: &str) -> Result<GpsdAddress, AddressError> {
        let text = given.trim();
        if text.is_empty() {
            return Err(AddressError::Empty);
        }
        if let Some((_, rest)) = text.split_once("://") {
            let instead = rest.split('/').next().unwrap_or_default();
            return Err(AddressError::Scheme {
                given: given.to_owned(),
                instead: if instead.is_empty() {
                    format!("127.0.0.1:{GPSD_PORT}")
                } else {
                    instead.to_owned()
                },
            });
        }
        if let Ok(ip) = text.parse::<Ipv6Addr>() {
            return Err(AddressError::Ipv6Brackets {
                given: given.to_owned(),
                ip,
            });
        }
        let (host, port) = match text.strip_prefix('[') {
            Some(bracketed) => {
                let (inside, after) =
                    bracketed
                        .split_once(']')
                        .ok_or_else(|| AddressError::Host {
                            given: given.to_owned(),
                            host: text.to_owned(),
                        })?;
                let ip: Ipv6Addr = inside.parse().map_err(|_| AddressError::Host {
                    given: given.to_owned(),
                    host: inside.to_owned(),
                })?;
                let port = match after {
                    "" => None,
                    _ => Some(after.strip_prefix(':').ok_or_else(|| AddressError::Port {
                        given: given.to_owned(),
                        port: after.to_owned(),
                    })?),
                };
                (ip.to_string(), port)
            }
            None => {
                let (host, port) = match text.rsplit_once(':') {
                    Some((host, port)) => (host, Some(port)),
                    None => (text, None),
                };
                if let Ok(ip) = host.parse::<Ipv6Addr>() {
                    return Err(AddressError::Ipv6Brackets {
                        given: given.to_owned(),
                        ip,
                    });
                }
                if !is_host(host) {
                    return Err(AddressError::Host {
                        given: given.to_owned(),
                        host: host.to_owned(),
                    });
                }
                (host.to_owned(), port)
            }
        };
        let port = match port {
            None => GPSD_PORT,
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| AddressError::Port {
                    given: given.to_owned(),
                    port: port.to_owned(),
                })?,
        };
        Ok(GpsdAddress { host, port })
    }
}

/// A host name (letters, digits, `-`, `_` and `.`-separated labels) or an IPv4 address.
fn is_host(host: &str) -> bool {
    !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

impl fmt::Display for GpsdAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(String, u16), String> {
        text.parse::<GpsdAddress>()
            .map(|a| (a.host().to_owned(), a.port()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_documented_forms() {
        assert_eq!(parse("127.0.0.1:2947"), Ok(("127.0.0.1".into(), 2947)));
        assert_eq!(parse("127.0.0.1"), Ok(("127.0.0.1".into(), 2947)));
        assert_eq!(parse("gpsd.local:3000"), Ok(("gpsd.local".into(), 3000)));
        assert_eq!(parse("localhost"), Ok(("localhost".into(), 2947)));
        assert_eq!(parse("[::1]:2948"), Ok(("::1".into(), 2948)));
        assert_eq!(parse("[fe80::1]"), Ok(("fe80::1".into(), 2947)));
        assert_eq!(parse(" 10.0.0.2:2947 "), Ok(("10.0.0.2".into(), 2947)));
    }

    #[test]
    fn display_reads_back() {
        for text in ["127.0.0.1:2947", "[::1]:2948", "gpsd.local:3000"] {
            let address: GpsdAddress = text.parse().unwrap();
            assert_eq!(address.to_string(), text);
        }
        assert_eq!(GpsdAddress::local().to_string(), "127.0.0.1:2947");
    }

    #[test]
    fn wrong_forms_say_what_to_write() {
        let cases = [
            ("gpsd://localhost:2947", "write `localhost:2947`"),
            ("tcp://127.0.0.1:2947/", "write `127.0.0.1:2947`"),
            ("gpsd://", "write `127.0.0.1:2947`"),
            ("::1", "write `[::1]:2947`"),
            ("fe80::1:2947", "write `[fe80::1:2947]:2947`"),
            ("[::1]2947", "`2947` is not a port"),
            ("[nonsense]:2947", "`nonsense` is not a host"),
            ("127.0.0.1:", "`` is not a port"),
            ("127.0.0.1:0", "`0` is not a port"),
            ("127.0.0.1:99999", "`99999` is not a port"),
            (":2947", "`` is not a host"),
            ("tcp:localhost:2947", "`tcp:localhost` is not a host"),
            ("gps d:2947", "`gps d` is not a host"),
            ("", "the address is empty"),
        ];
        for (given, expected) in cases {
            let message = parse(given).unwrap_err();
            assert!(message.contains(expected), "{given}: {message}");
        }
    }
}
