//! One registration with DPS over MQTT, as Microsoft's "IoT Hub DPS MQTT support" describes
//! it: client id = registration id, user name `{idScope}/registrations/{id}/api-version=...`,
//! a SAS token over `{idScope}/registrations/{id}` signed by the drone's key with
//! `skn=registration` as the password, or the drone's certificate in TLS and no password;
//! publish `iotdps-register`, then poll `iotdps-get-operationstatus` after each
//! `retry-after` (at most [`MAX_RETRY_AFTER`]) until the answer is not 202. An assignment
//! is taken only to a hub the drone allows ([`super::HubSuffix`]) and a well-formed device id.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use client_tls::Trust;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS, Transport};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{ANSWER_TIMEOUT, Assignment, Attestation, DpsConfig};
use crate::transport::sas::sas_token;

const API_VERSION: &str = "2019-03-31";
/// The wait DPS asks for when its answer names none.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(3);
/// The longest wait taken from DPS's `retry-after` (the service asks for a few seconds): a
/// longer one, a DPS's mistake or an impostor's, would hold the drone off the hub.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long a registration's SAS token is valid.
const TOKEN_TTL: u64 = 3600;

/// Why a registration did not end assigned.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The drone's key is not base64.
    #[error("the device key is not base64: {0}")]
    Key(#[from] base64::DecodeError),
    /// TLS could not be set up (the CA file).
    #[error(transparent)]
    Tls(#[from] client_tls::TlsError),
    /// The connection failed or was refused at CONNECT.
    #[error("no connection to DPS at {endpoint}: {detail}")]
    Connection {
        /// `host:port`.
        endpoint: String,
        /// What failed.
        detail: String,
    },
    /// DPS answered with an error status.
    #[error("DPS refused the registration: status {status}{}, {message}", error_code.map(|c| format!(" (errorCode {c})")).unwrap_or_default())]
    Refused {
        /// The answer's status.
        status: u16,
        /// DPS's error code (401002: the key or the enrollment).
        error_code: Option<u64>,
        /// DPS's message.
        message: String,
        /// The wait DPS asked for (throttled).
        retry_after: Option<Duration>,
    },
    /// No answer in time.
    #[error("DPS did not answer within {0:?}")]
    Timeout(Duration),
    /// An answer the agent cannot read.
    #[error("an answer of DPS the agent cannot read: {0}")]
    Unreadable(String),
    /// DPS assigned a hub outside `DPS_ALLOWED_HUB_SUFFIX`: refused, nothing kept.
    #[error(
        "DPS assigned the hub {hub:?}, outside DPS_ALLOWED_HUB_SUFFIX ({allowed}): refused; if your hubs are there, set DPS_ALLOWED_HUB_SUFFIX to their domain"
    )]
    HubNotAllowed {
        /// The host name DPS named.
        hub: String,
        /// The suffix it is not under.
        allowed: String,
    },
}

impl RegisterError {
    /// The wait DPS asked for, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            RegisterError::Refused { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// An answer on `$dps/registrations/res/{status}/?$rid=..&retry-after=..`.
struct Answer {
    status: u16,
    retry_after: Option<Duration>,
    body: Value,
}

fn answer(topic: &str, payload: &[u8]) -> Result<Answer, RegisterError> {
    let status = topic
        .strip_prefix("$dps/registrations/res/")
        .and_then(|rest| rest.split('/').next())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| RegisterError::Unreadable(format!("topic {topic}")))?;
    let retry_after = topic
        .split(['?', '&'])
        .find_map(|p| p.strip_prefix("retry-after="))
        .and_then(|s| s.parse().ok())
        .map(bounded_retry_after);
    let body = if payload.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(payload)
            .map_err(|err| RegisterError::Unreadable(format!("body on {topic}: {err}")))?
    };
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

/// DPS's `retry-after` in seconds, at most [`MAX_RETRY_AFTER`].
fn bounded_retry_after(secs: u64) -> Duration {
    let asked = Duration::from_secs(secs);
    if asked > MAX_RETRY_AFTER {
        tracing::warn!(
            asked_secs = secs,
            waiting = ?MAX_RETRY_AFTER,
            "DPS asked for a longer wait than the agent takes"
        );
    }
    asked.min(MAX_RETRY_AFTER)
}

/// Registers `config`'s drone presenting `attestation`.
pub async fn register(
    config: &DpsConfig,
    attestation: &Attestation,
) -> Result<Assignment, RegisterError> {
    let resource = format!(
        "{}/registrations/{}",
        config.id_scope, config.registration_id
    );
    let (password, identity) = match attestation {
        Attestation::SymmetricKey(key) => {
            let key = BASE64.decode(key.expose())?;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let token = sas_token(&resource, &key, now + TOKEN_TTL);
            (format!("{token}&skn=registration"), None)
        }
        Attestation::X509(identity) => (String::new(), Some(identity)),
    };
    let mut options = MqttOptions::new(&config.registration_id, &config.host, config.port);
    options.set_credentials(format!("{resource}/api-version={API_VERSION}"), password);
    options.set_keep_alive(Duration::from_secs(30));
    let trust = match &config.ca_file {
        Some(ca) => Trust::CaFile(ca.clone()),
        None => Trust::System,
    };
    options.set_transport(Transport::Tls(client_tls::mqtt_tls(
        &trust, identity, None,
    )?));
    let (client, mut events) = AsyncClient::new(options, 10);
    let endpoint = format!("{}:{}", config.host, config.port);
    let result = exchange(config, &client, &mut events, &endpoint).await;
    let _ = client.try_disconnect();
    result
}

async fn exchange(
    config: &DpsConfig,
    client: &AsyncClient,
    events: &mut rumqttc::EventLoop,
    endpoint: &str,
) -> Result<Assignment, RegisterError> {
    let lost = |detail: String| RegisterError::Connection {
        endpoint: endpoint.to_owned(),
        detail,
    };
    client
        .subscribe("$dps/registrations/res/#", QoS::AtLeastOnce)
        .await
        .map_err(|err| lost(err.to_string()))?;
    let body = json!({ "registrationId": config.registration_id }).to_string();
    client
        .publish(
            "$dps/registrations/PUT/iotdps-register/?$rid=1",
            QoS::AtLeastOnce,
            false,
            body,
        )
        .await
        .map_err(|err| lost(err.to_string()))?;
    let mut rid = 1u32;
    // After a 202: the status poll to send, and when. The event loop runs meanwhile, so
    // its keep-alive pings hold the connection through a wait longer than the keep-alive.
    let mut poll: Option<(Instant, String)> = None;
    let mut answer_by = Instant::now() + ANSWER_TIMEOUT;
    loop {
        let deadline = poll.as_ref().map_or(answer_by, |(at, _)| *at);
        let event = tokio::select! {
            event = events.poll() => event.map_err(|err| lost(err.to_string()))?,
            () = tokio::time::sleep_until(deadline) => {
                let Some((_, operation)) = poll.take() else {
                    return Err(RegisterError::Timeout(ANSWER_TIMEOUT));
                };
                rid += 1;
                client
                    .publish(
                        format!(
                            "$dps/registrations/GET/iotdps-get-operationstatus/?$rid={rid}&operationId={operation}"
                        ),
                        QoS::AtLeastOnce,
                        false,
                        "",
                    )
                    .await
                    .map_err(|err| lost(err.to_string()))?;
                answer_by = Instant::now() + ANSWER_TIMEOUT;
                continue;
            }
        };
        let Event::Incoming(Packet::Publish(publish)) = event else {
            continue;
        };
        let answer = answer(&publish.topic, &publish.payload)?;
        match answer.status {
            202 => {
                let operation = answer.body["operationId"]
                    .as_str()
                    .ok_or_else(|| RegisterError::Unreadable("202 without operationId".into()))?
                    .to_owned();
                let wait = answer.retry_after.unwrap_or(DEFAULT_RETRY_AFTER);
                poll = Some((Instant::now() + wait, operation));
            }
            200 => return assigned(config, &answer.body),
            status => {
                return Err(RegisterError::Refused {
                    status,
                    error_code: answer.body["errorCode"].as_u64(),
                    message: answer.body["message"]
                        .as_str()
                        .unwrap_or("no message")
                        .to_owned(),
                    retry_after: answer.retry_after,
                });
            }
        }
    }
}

/// The assignment in a 200 answer, or why there is none.
fn assigned(config: &DpsConfig, body: &Value) -> Result<Assignment, RegisterError> {
    let state = &body["registrationState"];
    let status = body["status"].as_str().unwrap_or_default();
    if status != "assigned" {
        return Err(RegisterError::Refused {
            status: 200,
            error_code: state["errorCode"].as_u64(),
            message: format!(
                "registration {status}: {}",
                state["errorMessage"].as_str().unwrap_or("no message")
            ),
            retry_after: None,
        });
    }
    let text = |field: &str| {
        state[field]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| RegisterError::Unreadable(format!("assigned without {field}")))
    };
    let assigned_hub = text("assignedHub")?;
    if !config.allowed_hubs.allows(&assigned_hub) {
        return Err(RegisterError::HubNotAllowed {
            hub: assigned_hub,
            allowed: config.allowed_hubs.to_string(),
        });
    }
    let device_id = text("deviceId")?;
    telemetry::wire::check_device_id(&device_id)
        .map_err(|err| RegisterError::Unreadable(format!("deviceId {device_id:?}: {err}")))?;
    Ok(Assignment {
        id_scope: config.id_scope.clone(),
        registration_id: config.registration_id.clone(),
        assigned_hub,
        device_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_name_their_status_and_wait() {
        let a = answer(
            "$dps/registrations/res/202/?$rid=1&retry-after=3",
            br#"{"operationId":"op","status":"assigning"}"#,
        )
        .unwrap();
        assert_eq!(
            (a.status, a.retry_after),
            (202, Some(Duration::from_secs(3)))
        );
        let a = answer(
            "$dps/registrations/res/401/?$rid=1",
            br#"{"errorCode":401002}"#,
        )
        .unwrap();
        assert_eq!((a.status, a.retry_after), (401, None));
        assert!(answer("$dps/registrations/res/x/?$rid=1", b"").is_err());
    }

    #[test]
    fn a_wait_longer_than_the_cap_is_cut_to_it() {
        let a = answer(
            "$dps/registrations/res/429/?$rid=1&retry-after=86400",
            br#"{"errorCode":429001}"#,
        )
        .unwrap();
        assert_eq!(a.retry_after, Some(MAX_RETRY_AFTER));
        let a = answer(
            "$dps/registrations/res/202/?$rid=1&retry-after=18446744073709551615",
            b"{}",
        )
        .unwrap();
        assert_eq!(a.retry_after, Some(MAX_RETRY_AFTER));
    }
}
