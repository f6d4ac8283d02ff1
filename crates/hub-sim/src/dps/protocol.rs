//! The provisioning service's MQTT shapes: the CONNECT user name, the request topics, the
//! response topics and the error bodies with their codes. Pure.
//!
//! Requests: `$dps/registrations/PUT/iotdps-register/?$rid={rid}` with
//! `{"registrationId", "payload"}`, and
//! `$dps/registrations/GET/iotdps-get-operationstatus/?$rid={rid}&operationId={id}`. Answers on
//! `$dps/registrations/res/{status}/?$rid={rid}` (with `&retry-after={s}` on 202), errors with
//! `{"errorCode", "trackingId", "message", "timestampUtc"}` as the service sends them.

use std::time::SystemTime;

/// The topic filter devices subscribe to for answers.
pub const RESPONSE_FILTER: &str = "$dps/registrations/res/#";
const REGISTER: &str = "$dps/registrations/PUT/iotdps-register/";
const STATUS: &str = "$dps/registrations/GET/iotdps-get-operationstatus/";

/// The ID scope and registration id a provisioning CONNECT names in its user name
/// `{idScope}/registrations/{registrationId}/api-version=...`; `None` for any other user name
/// (a device's is `{host}/{deviceId}/?api-version=...`).
pub fn registration_login(username: &str) -> Option<(&str, &str)> {
    let mut parts = username.splitn(4, '/');
    let scope = parts.next()?;
    let marker = parts.next()?;
    let registration_id = parts.next()?;
    let rest = parts.next()?;
    (marker == "registrations" && rest.starts_with("api-version=") && !registration_id.is_empty())
        .then_some((scope, registration_id))
}

/// A request a registering device publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Register (the body names the registration and may carry a payload).
    Register {
        /// The request id echoed in the answer.
        rid: String,
    },
    /// Ask how a registration operation stands.
    Status {
        /// The request id echoed in the answer.
        rid: String,
        /// The operation the register answer named.
        operation_id: String,
    },
}

/// Reads a request topic; `None` when it is neither request.
pub fn parse_request(topic: &str) -> Option<Request> {
    let (path, query) = topic.split_once('?')?;
    let mut rid = None;
    let mut operation_id = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("$rid", value)) => rid = Some(value.to_owned()),
            Some(("operationId", value)) => operation_id = Some(value.to_owned()),
            _ => {}
        }
    }
    let rid = rid?;
    match path {
        REGISTER => Some(Request::Register { rid }),
        STATUS => Some(Request::Status {
            rid,
            operation_id: operation_id?,
        }),
        _ => None,
    }
}

/// The topic of an answer.
pub fn response_topic(status: u16, rid: &str, retry_after: Option<u64>) -> String {
    match retry_after {
        Some(secs) => format!("$dps/registrations/res/{status}/?$rid={rid}&retry-after={secs}"),
        None => format!("$dps/registrations/res/{status}/?$rid={rid}"),
    }
}

/// Why a request is refused, with the service's status and error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The body is not the request's JSON (400, `400004`).
    #[error("bad request")]
    BadRequest,
    /// Attestation failed: a wrong key, an unknown device, a disabled enrollment, or a
    /// registration id other than the connection's (401, `401002`).
    #[error("unauthorized")]
    Unauthorized,
    /// The operation id is not one of this registration's (404, `404201`).
    #[error("not found")]
    NotFound,
    /// The device could not be created on the assigned hub (500, `500000`).
    #[error("internal error")]
    Internal,
}

impl Failure {
    /// The status in the answer's topic.
    pub fn status(self) -> u16 {
        match self {
            Failure::BadRequest => 400,
            Failure::Unauthorized => 401,
            Failure::NotFound => 404,
            Failure::Internal => 500,
        }
    }

    /// The `errorCode` in the answer's body.
    pub fn error_code(self) -> u32 {
        match self {
            Failure::BadRequest => 400_004,
            Failure::Unauthorized => 401_002,
            Failure::NotFound => 404_201,
            Failure::Internal => 500_000,
        }
    }

    fn message(self) -> &'static str {
        match self {
            Failure::BadRequest => "Bad Request",
            Failure::Unauthorized => "Unauthorized",
            Failure::NotFound => "Not Found",
            Failure::Internal => "Internal Server Error",
        }
    }

    /// The answer's body.
    pub fn body(self, tracking_id: &str, now: SystemTime) -> serde_json::Value {
        serde_json::json!({
            "errorCode": self.error_code(),
            "trackingId": tracking_id,
            "message": self.message(),
            "timestampUtc": timestamp(now),
        })
    }
}

/// A time as the service writes it (`2019-06-17T14:25:14.718358Z`).
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_micros(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_user_name_is_told_from_a_device_one() {
        assert_eq!(
            registration_login(
                "0ne00ABCDEF/registrations/drone-7/api-version=2019-03-31&ClientVersion=py"
            ),
            Some(("0ne00ABCDEF", "drone-7"))
        );
        assert_eq!(
            registration_login("localhost/registrations/?api-version=2021-04-12"),
            None
        );
        assert_eq!(
            registration_login("localhost/drone-7/?api-version=2021-04-12"),
            None
        );
        assert_eq!(
            registration_login("0ne1/registrations//api-version=1"),
            None
        );
    }

    #[test]
    fn request_topics_are_read_as_the_sdk_writes_them() {
        assert_eq!(
            parse_request("$dps/registrations/PUT/iotdps-register/?$rid=7"),
            Some(Request::Register { rid: "7".into() })
        );
        assert_eq!(
            parse_request(
                "$dps/registrations/GET/iotdps-get-operationstatus/?$rid=8&operationId=4.a.b"
            ),
            Some(Request::Status {
                rid: "8".into(),
                operation_id: "4.a.b".into()
            })
        );
        assert_eq!(
            parse_request("$dps/registrations/GET/iotdps-get-operationstatus/?$rid=8"),
            None
        );
        assert_eq!(parse_request("devices/d/messages/events/"), None);
        assert_eq!(
            response_topic(202, "7", Some(3)),
            "$dps/registrations/res/202/?$rid=7&retry-after=3"
        );
    }

    #[test]
    fn errors_carry_the_services_codes() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_500);
        let body = Failure::Unauthorized.body("t-1", at);
        assert_eq!(
            body,
            serde_json::json!({
                "errorCode": 401002,
                "trackingId": "t-1",
                "message": "Unauthorized",
                "timestampUtc": "1970-01-01T00:00:01.500000Z",
            })
        );
        assert_eq!(Failure::NotFound.error_code(), 404201);
        assert_eq!(Failure::BadRequest.status(), 400);
    }
}
