//! One registration connection, after the device listener has read a CONNECT whose user name
//! names a registration: the CONNECT decided (client id = registration id, this service's ID
//! scope, and an X.509 chain attested at once as the service does; a SAS token is checked by
//! each register request), then the subscription to the answers and the register and status
//! requests answered, until the device leaves or its keep-alive lapses.

use super::attestation::{AttestError, Credential, attest};
use super::protocol::{
    RESPONSE_FILTER, Request, parse_request, registration_login, response_topic,
};
use super::service::Dps;
use crate::mqtt_codec::{read_packet, write};
use crate::sas::now_secs;
use bytes::BytesMut;
use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::{
    ConnAck, Connect, ConnectReturnCode, Packet, PingResp, PubAck, Publish, SubAck,
    SubscribeReasonCode, UnsubAck,
};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Why a registration's CONNECT is refused, if it is.
fn refusal(
    dps: &Dps,
    connect: &Connect,
    scope: &str,
    registration_id: &str,
    credential: Credential<'_>,
) -> Option<(ConnectReturnCode, &'static str)> {
    if connect.client_id != registration_id {
        return Some((
            ConnectReturnCode::BadClientId,
            "client_id_not_registration_id",
        ));
    }
    if !scope.eq_ignore_ascii_case(&dps.id_scope) {
        return Some((ConnectReturnCode::NotAuthorized, "unknown_id_scope"));
    }
    if let Credential::Chain(_) = credential {
        let book = dps.enrollments.book();
        match attest(
            &book,
            &dps.id_scope,
            registration_id,
            credential,
            now_secs(),
        ) {
            // A disabled enrollment is refused per request, with 401002.
            Ok(_) | Err(AttestError::Disabled) => {}
            Err(e) => return Some((ConnectReturnCode::NotAuthorized, e.reason())),
        }
    }
    None
}

/// Serves a registration connection whose CONNECT has been read.
pub(crate) async fn serve<R, W>(
    dps: &Dps,
    mut reader: R,
    mut writer: W,
    mut buf: BytesMut,
    connect: Connect,
    client_chain: Vec<Vec<u8>>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let login = connect.login.as_ref();
    let Some((scope, registration_id)) = login.and_then(|l| registration_login(&l.username)) else {
        return;
    };
    let password = login.map_or("", |l| l.password.as_str());
    let credential = if password.is_empty() && !client_chain.is_empty() {
        Credential::Chain(&client_chain)
    } else {
        Credential::Token(password)
    };
    if let Some((code, reason)) = refusal(dps, &connect, scope, registration_id, credential) {
        tracing::info!(
            registration = registration_id,
            reason,
            "registration connection refused"
        );
        dps.count("registrations_refused", reason);
        let _ = write(&mut writer, |b| ConnAck::new(code, false).write(b)).await;
        return;
    }
    if write(&mut writer, |b| {
        ConnAck::new(ConnectReturnCode::Success, false).write(b)
    })
    .await
    .is_err()
    {
        return;
    }
    let keep_alive = match connect.keep_alive {
        0 => Duration::from_secs(100 * 365 * 86_400),
        secs => Duration::from_millis(u64::from(secs) * 1500),
    };
    let mut pkid: u16 = 0;
    loop {
        let packet =
            match tokio::time::timeout(keep_alive, read_packet(&mut reader, &mut buf)).await {
                Ok(Ok(packet)) => packet,
                _ => break,
            };
        let written = match packet {
            Packet::Subscribe(subscribe) => {
                let codes = subscribe
                    .filters
                    .iter()
                    .map(|f| match (f.path.as_str(), f.qos) {
                        (RESPONSE_FILTER, QoS::AtMostOnce) => {
                            SubscribeReasonCode::Success(QoS::AtMostOnce)
                        }
                        (RESPONSE_FILTER, _) => SubscribeReasonCode::Success(QoS::AtLeastOnce),
                        _ => SubscribeReasonCode::Failure,
                    })
                    .collect();
                write(&mut writer, |b| SubAck::new(subscribe.pkid, codes).write(b)).await
            }
            Packet::Publish(publish) => {
                let Some(request) = parse_request(&publish.topic) else {
                    tracing::info!(registration = registration_id, topic = %publish.topic, "not a provisioning request");
                    break;
                };
                if publish.qos == QoS::AtLeastOnce
                    && write(&mut writer, |b| PubAck::new(publish.pkid).write(b))
                        .await
                        .is_err()
                {
                    break;
                }
                let now = SystemTime::now();
                let (rid, answer) = match request {
                    Request::Register { rid } => (
                        rid,
                        dps.register(registration_id, credential, &publish.payload, now),
                    ),
                    Request::Status { rid, operation_id } => {
                        (rid, dps.status(registration_id, &operation_id, now))
                    }
                };
                pkid = pkid.checked_add(1).unwrap_or(1);
                let mut response = Publish::new(
                    response_topic(answer.status, &rid, answer.retry_after),
                    QoS::AtLeastOnce,
                    answer.body.to_string(),
                );
                response.pkid = pkid;
                write(&mut writer, |b| response.write(b)).await
            }
            Packet::Unsubscribe(unsubscribe) => {
                write(&mut writer, |b| UnsubAck::new(unsubscribe.pkid).write(b)).await
            }
            Packet::PingReq => write(&mut writer, |b| PingResp.write(b)).await,
            Packet::PubAck(_) => Ok(()),
            _ => break,
        };
        if written.is_err() {
            break;
        }
    }
    let _ = writer.shutdown().await;
}
