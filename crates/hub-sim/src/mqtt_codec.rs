//! Reading and writing MQTT 3.1.1 packets on a byte stream with rumqttc's codec, for the
//! device sessions ([`crate::mqtt`]) and the provisioning sessions ([`crate::dps`]) alike.

use bytes::BytesMut;
use rumqttc::mqttbytes::Error as CodecError;
use rumqttc::mqttbytes::v4::{self, Packet};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// IoT Hub's limit on a device-to-cloud message's payload.
pub const MAX_PAYLOAD: usize = 256 * 1024;

/// The largest packet read: a full payload plus a topic and property bag.
const MAX_PACKET: usize = MAX_PAYLOAD + 64 * 1024;

/// Why no packet was read.
pub(crate) enum ReadError {
    /// The peer closed the stream (or it broke).
    Closed,
    /// The packet is larger than [`MAX_PACKET`].
    TooLarge,
    /// The bytes are not an MQTT 3.1.1 packet.
    Malformed,
}

/// Reads the next packet, keeping what follows it in `buf`. Cancel-safe.
pub(crate) async fn read_packet<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> Result<Packet, ReadError> {
    loop {
        match v4::read(buf, MAX_PACKET) {
            Ok(packet) => return Ok(packet),
            Err(CodecError::InsufficientBytes(_)) => {}
            Err(CodecError::PayloadSizeLimitExceeded(_)) => return Err(ReadError::TooLarge),
            Err(_) => return Err(ReadError::Malformed),
        }
        // `read_buf` is cancel-safe: a select that drops this future loses no bytes.
        match reader.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(ReadError::Closed),
            Ok(_) => {}
        }
    }
}

/// Encodes one packet with `encode` and writes it.
pub(crate) async fn write<W: AsyncWrite + Unpin>(
    writer: &mut W,
    encode: impl FnOnce(&mut BytesMut) -> Result<usize, CodecError>,
) -> std::io::Result<()> {
    let mut out = BytesMut::with_capacity(16);
    encode(&mut out).map_err(std::io::Error::other)?;
    writer.write_all(&out).await?;
    writer.flush().await
}
