//! The admin HTTP endpoint (plain HTTP on `--admin-port`, no authentication: bind it to
//! loopback). Everything it does is also a method of [`crate::HubSim`].
//!
//! | method and path | body | answer |
//! | --- | --- | --- |
//! | `GET /metrics` | | Prometheus text: messages accepted and refused by reason, connections, AMQP deliveries, per partition depth and last sequence number |
//! | `GET /stats` | | the same as JSON ([`crate::Stats`]) |
//! | `GET /faults` | | the current [`FaultSettings`] |
//! | `POST /faults` | [`FaultSettings`] (`latencyMs`, `throttlePerSec`, `managementDelayMs`; missing fields are 0) | the settings after the change |
//! | `POST /faults/drop-devices` | | closes every device connection |
//! | `POST /faults/amqp/stop` | | stops the AMQP side (listener and connections) |
//! | `POST /faults/amqp/start` | | starts the AMQP side again on its port |
//! | `POST /faults/amqp/stall` | | every partition receiver attached so far stays attached, delivers nothing more and answers no detach |
//! | `POST /devices/{id}` | optional `{"x509Thumbprint": "..."}` | `{"connectionString": ...}` for a SAS device, `{}` for X.509 |
//! | `GET /dps` | | `{"idScope", "linkedHubs", "registrations"}` of the provisioning service |
//! | `POST /enrollments/groups/{name}` | optional `{"x509CaPem": "...", "enabled": false}` | `{"primaryKey": ...}` for a symmetric-key group, `{}` for X.509 |
//! | `POST /enrollments/individual/{registrationId}` | optional `{"x509Thumbprint": "...", "enabled": false}` | `{"primaryKey": ...}` for a symmetric key, `{}` for X.509 |

use crate::amqp::server::AmqpServer;
use crate::dps::service::Dps;
use crate::dps::{Attestation, EnrollmentId};
use crate::faults::FaultSettings;
use crate::hub::Hub;
use crate::state_dir;
use crate::stats::Stats;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use http_serve::Limits;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What the admin endpoint acts on.
pub(crate) struct Admin {
    pub(crate) hub: Arc<Hub>,
    pub(crate) dps: Arc<Dps>,
    pub(crate) amqp: Arc<AmqpServer>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Enroll {
    x509_ca_pem: Option<String>,
    x509_thumbprint: Option<String>,
    enabled: Option<bool>,
}

/// Adds (or finds) an enrollment: a group when `group`, else an individual enrollment.
fn enroll(dps: &Dps, group: bool, name: &str, request: Enroll) -> Response<Full<Bytes>> {
    let enrollments = &dps.enrollments;
    let added = match (group, request.x509_ca_pem, request.x509_thumbprint) {
        (true, None, None) => enrollments
            .add_symmetric_key_group(name)
            .map(|key| json!({ "primaryKey": key })),
        (true, Some(ca_pem), None) => enrollments
            .add_x509_group(name, &ca_pem)
            .map(|()| json!({})),
        (false, None, None) => {
            let attestation = Attestation::new_symmetric_key();
            let answer = match &attestation {
                Attestation::SymmetricKey { primary_key, .. } => {
                    json!({ "primaryKey": primary_key })
                }
                _ => json!({}),
            };
            enrollments
                .add_individual(name, attestation)
                .map(|()| answer)
        }
        (false, None, Some(thumbprint)) => enrollments
            .add_individual(name, Attestation::X509Thumbprint { thumbprint })
            .map(|()| json!({})),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "groups take x509CaPem, individual enrollments x509Thumbprint",
            );
        }
    };
    let id = if group {
        EnrollmentId::Group(name.to_owned())
    } else {
        EnrollmentId::Individual(name.to_owned())
    };
    let enabled = match request.enabled {
        Some(enabled) => enrollments.set_enabled(&id, enabled),
        None => Ok(()),
    };
    match added.and_then(|answer| enabled.map(|()| answer)) {
        Ok(answer) => reply(StatusCode::OK, answer),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct AddDevice {
    x509_thumbprint: Option<String>,
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("valid response")
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response<Full<Bytes>> {
    reply(status, json!({ "error": message.to_string() }))
}

async fn handle(admin: &Admin, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().trim_end_matches('/').to_owned();
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let hub = &admin.hub;
    let stats = || Stats::collect(&hub.counters, &hub.partitions);
    match (&method, path.as_str()) {
        (&Method::GET, "/metrics") => Response::builder()
            .header("content-type", "text/plain; version=0.0.4")
            .body(Full::new(Bytes::from(stats().to_prometheus())))
            .expect("valid response"),
        (&Method::GET, "/stats") => reply(StatusCode::OK, json!(stats())),
        (&Method::GET, "/faults") => reply(StatusCode::OK, json!(hub.faults.settings())),
        (&Method::POST, "/faults") => match serde_json::from_slice::<FaultSettings>(&body) {
            Ok(settings) => {
                hub.faults.update(settings);
                reply(StatusCode::OK, json!(hub.faults.settings()))
            }
            Err(e) => error(
                StatusCode::BAD_REQUEST,
                format!("expected {{\"latencyMs\",\"throttlePerSec\",\"managementDelayMs\"}}: {e}"),
            ),
        },
        (&Method::POST, "/faults/drop-devices") => {
            hub.faults.drop_device_connections();
            reply(StatusCode::OK, json!({}))
        }
        (&Method::POST, "/faults/amqp/stop") => {
            admin.amqp.stop();
            reply(StatusCode::OK, json!({}))
        }
        (&Method::POST, "/faults/amqp/stall") => {
            hub.faults.stall_receivers();
            reply(StatusCode::OK, json!({}))
        }
        (&Method::POST, "/faults/amqp/start") => match admin.amqp.restart().await {
            Ok(()) => reply(StatusCode::OK, json!({})),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        },
        (&Method::GET, "/dps") => reply(
            StatusCode::OK,
            json!({
                "idScope": admin.dps.id_scope,
                "linkedHubs": admin.dps.linked_hosts(),
                "registrations": admin.dps.registrations(),
            }),
        ),
        (&Method::POST, p) if p.starts_with("/enrollments/") => {
            let request: Enroll = if body.is_empty() {
                Enroll::default()
            } else {
                match serde_json::from_slice(&body) {
                    Ok(r) => r,
                    Err(e) => return error(StatusCode::BAD_REQUEST, e),
                }
            };
            match p["/enrollments/".len()..].split_once('/') {
                Some(("groups", name)) => enroll(&admin.dps, true, name, request),
                Some(("individual", name)) => enroll(&admin.dps, false, name, request),
                _ => error(
                    StatusCode::NOT_FOUND,
                    format!("no admin route {method} {path}"),
                ),
            }
        }
        (&Method::POST, p) if p.starts_with("/devices/") => {
            let id = &p["/devices/".len()..];
            let request: AddDevice = if body.is_empty() {
                AddDevice::default()
            } else {
                match serde_json::from_slice(&body) {
                    Ok(r) => r,
                    Err(e) => return error(StatusCode::BAD_REQUEST, e),
                }
            };
            match request.x509_thumbprint {
                Some(thumbprint) => match hub.registry.add_x509(id, &thumbprint) {
                    Ok(()) => reply(StatusCode::OK, json!({})),
                    Err(e) => error(StatusCode::BAD_REQUEST, e),
                },
                None => match hub.registry.add_sas(id) {
                    Ok(key) => reply(
                        StatusCode::OK,
                        json!({
                            "connectionString": state_dir::device_connection_string(&hub.host, id, &key)
                        }),
                    ),
                    Err(e) => error(StatusCode::BAD_REQUEST, e),
                },
            }
        }
        _ => error(
            StatusCode::NOT_FOUND,
            format!("no admin route {method} {path}"),
        ),
    }
}

/// Serves the admin endpoint on `listener` until `stop` is cancelled (by `http_serve`:
/// headers within 10 s, connections closed at once on the stop).
pub(crate) async fn run(admin: Arc<Admin>, listener: TcpListener, stop: CancellationToken) {
    let service = tower::service_fn(move |request| {
        let admin = admin.clone();
        async move { Ok::<_, Infallible>(handle(&admin, request).await) }
    });
    if let Err(e) = http_serve::serve(listener, service, Limits::LOCAL, None, stop).await {
        tracing::warn!(error = %e, "the admin endpoint stopped serving");
    }
}
