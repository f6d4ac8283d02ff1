//! The byte link to the flight stack: UDP (listening, or sending to a router), TCP
//! (listening or connecting) or a serial port. Reads are cancel-safe, so the source can
//! wait for bytes and for its heartbeat tick at once.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio_serial::{SerialPortBuilderExt, SerialStream};

use super::address::MavlinkAddress;

/// An open link.
#[derive(Debug)]
pub(super) enum Link {
    Udp {
        socket: UdpSocket,
        /// Where frames go: the router (`udpout`), or whoever sent last (`udpin`).
        peer: Option<SocketAddr>,
    },
    Tcp(TcpStream),
    Serial(SerialStream),
}

impl Link {
    /// Opens the link (for `tcpin`, waits for the first connection).
    pub(super) async fn open(address: &MavlinkAddress) -> io::Result<Link> {
        Ok(match address {
            MavlinkAddress::UdpIn(local) => Link::Udp {
                socket: UdpSocket::bind(local).await?,
                peer: None,
            },
            MavlinkAddress::UdpOut(remote) => {
                let peer = tokio::net::lookup_host(remote.as_str())
                    .await?
                    .next()
                    .ok_or_else(|| {
                        io::Error::new(io::ErrorKind::NotFound, format!("{remote}: no address"))
                    })?;
                let any: SocketAddr = if peer.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    ([0u16; 8], 0).into()
                };
                Link::Udp {
                    socket: UdpSocket::bind(any).await?,
                    peer: Some(peer),
                }
            }
            MavlinkAddress::TcpIn(local) => {
                let listener = TcpListener::bind(local).await?;
                let (stream, from) = listener.accept().await?;
                tracing::info!(%from, "MAVLink peer connected");
                stream.set_nodelay(true)?;
                Link::Tcp(stream)
            }
            MavlinkAddress::TcpOut(remote) => {
                let stream = TcpStream::connect(remote.as_str()).await?;
                stream.set_nodelay(true)?;
                Link::Tcp(stream)
            }
            MavlinkAddress::Serial { device, baud } => Link::Serial(
                tokio_serial::new(device.to_string_lossy(), *baud)
                    .open_native_async()
                    .map_err(io::Error::other)?,
            ),
        })
    }

    /// Reads what arrived into `buf`; 0 means the peer closed a stream link.
    pub(super) async fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            // An empty datagram is not the end of a UDP link.
            Link::Udp { socket, peer } => loop {
                let (read, from) = socket.recv_from(buf).await?;
                *peer = Some(from);
                if read > 0 {
                    return Ok(read);
                }
            },
            Link::Tcp(stream) => stream.read(buf).await,
            Link::Serial(port) => port.read(buf).await,
        }
    }

    /// Sends `frame`; on UDP, `false` while no peer is known yet.
    pub(super) async fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        match self {
            Link::Udp { socket, peer } => match peer {
                Some(peer) => socket.send_to(frame, *peer).await.map(|_| true),
                None => Ok(false),
            },
            Link::Tcp(stream) => stream.write_all(frame).await.map(|()| true),
            Link::Serial(port) => port.write_all(frame).await.map(|()| true),
        }
    }
}
