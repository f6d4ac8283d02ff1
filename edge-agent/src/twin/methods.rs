//! The direct methods a drone answers, and nothing else: `reportNow` (publish the latest
//! fix at once, through the buffer like every position) and `status` (the status file's
//! content). Any other name is answered 404; a payload over
//! [`MAX_METHOD_PAYLOAD`] bytes 413. No method runs a command, touches a file or changes a
//! setting: settings change only through the twin's desired properties.

use serde_json::{Value, json};

use crate::transport::{MAX_METHOD_PAYLOAD, MethodRequest};

/// A method the agent answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// Publish the latest fix now; answers `{"seq": n}`.
    ReportNow,
    /// The agent's status.
    Status,
}

/// An answer: an HTTP-like status and a JSON payload.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) payload: Value,
}

impl Answer {
    /// 200 with `payload`.
    pub(crate) fn ok(payload: Value) -> Answer {
        Answer {
            status: 200,
            payload,
        }
    }

    /// `status` with `{"error": reason}`.
    pub(crate) fn error(status: u16, reason: impl Into<String>) -> Answer {
        Answer {
            status,
            payload: json!({ "error": reason.into() }),
        }
    }
}

/// The longest method name quoted back in an answer.
const NAME_MAX: usize = 64;

impl Method {
    /// The method `request` calls, or the answer that refuses it.
    pub(crate) fn of(request: &MethodRequest) -> Result<Method, Answer> {
        let method = match request.name.as_str() {
            "reportNow" => Method::ReportNow,
            "status" => Method::Status,
            other => {
                let name: String = other.chars().take(NAME_MAX).collect();
                return Err(Answer::error(
                    404,
                    format!("no method `{name}`: this agent answers reportNow and status"),
                ));
            }
        };
        if request.payload_len > MAX_METHOD_PAYLOAD {
            return Err(Answer::error(
                413,
                format!(
                    "the payload is {} bytes; this agent's methods take none (at most {MAX_METHOD_PAYLOAD} bytes are read)",
                    request.payload_len
                ),
            ));
        }
        Ok(method)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, payload_len: usize) -> MethodRequest {
        MethodRequest {
            rid: "1".into(),
            name: name.into(),
            payload_len,
        }
    }

    #[test]
    fn only_the_two_methods_are_answered() {
        assert_eq!(Method::of(&request("reportNow", 4)), Ok(Method::ReportNow));
        assert_eq!(Method::of(&request("status", 0)), Ok(Method::Status));
        let unknown = Method::of(&request(&"reboot".repeat(100), 0)).unwrap_err();
        assert_eq!(unknown.status, 404);
        assert!(unknown.payload["error"].as_str().unwrap().len() < 200);
        let big = Method::of(&request("status", MAX_METHOD_PAYLOAD + 1)).unwrap_err();
        assert_eq!(big.status, 413);
    }
}
