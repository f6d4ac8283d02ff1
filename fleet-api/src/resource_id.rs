//! The id a route takes from its path (a drone's, a geofence's): one check for every route,
//! so that no id reaches Cosmos DB that it would refuse or that names another resource.
//!
//! An id is 1 to 128 characters, without control characters, `/` or `\`, and is neither `.`
//! nor `..` (path segments that URL handling folds onto the parent: `/docs/..` would name the
//! container itself). A geofence's id, its document's id as it is, also holds neither `?` nor
//! `#` (Cosmos DB refuses them in an id); a device id may (the writer escapes them).

use std::marker::PhantomData;

use axum::async_trait;
use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Longest id, characters (IoT Hub's limit on device ids).
pub const MAX_ID_CHARS: usize = 128;

/// What an id names: its name in messages and the characters refused besides control
/// characters.
pub trait IdKind: Send + Sync + 'static {
    /// How a message names the id (`drone id`).
    const NAME: &'static str;
    /// Characters refused in the id.
    const REFUSED: &'static [char];
}

/// A drone's device id. IoT Hub allows `?` and `#` in one (the writer escapes them in the
/// document id), never `/` or `\`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device;

impl IdKind for Device {
    const NAME: &'static str = "drone id";
    const REFUSED: &'static [char] = &['/', '\\'];
}

/// A geofence's id, its document's id as it is: none of the four Cosmos DB refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence;

impl IdKind for Fence {
    const NAME: &'static str = "geofence id";
    const REFUSED: &'static [char] = &['/', '\\', '?', '#'];
}

/// A checked id of kind `K` from the route's `:id` segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceId<K>(String, PhantomData<K>);

/// A drone's id from the path.
pub type DeviceId = ResourceId<Device>;
/// A geofence's id from the path.
pub type FenceId = ResourceId<Fence>;

/// Why a path's id was refused: a 400 whose JSON body says what an id may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadId(pub String);

impl<K: IdKind> ResourceId<K> {
    /// `id`, if it is one the API takes.
    pub fn parse(id: String) -> Result<Self, BadId> {
        let chars = id.chars().count();
        let plain = !id
            .chars()
            .any(|c| c.is_control() || K::REFUSED.contains(&c));
        if (1..=MAX_ID_CHARS).contains(&chars) && plain && id != "." && id != ".." {
            Ok(ResourceId(id, PhantomData))
        } else {
            let refused: String = K::REFUSED.iter().map(|c| format!(" {c}")).collect();
            Err(BadId(format!(
                "{} {id:?}: 1 to {MAX_ID_CHARS} characters, without control characters or{refused}, and neither . nor ..",
                K::NAME
            )))
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[async_trait]
impl<S: Send + Sync, K: IdKind> FromRequestParts<S> for ResourceId<K> {
    type Rejection = BadId;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| {
                BadId(format!(
                    "{}: not a valid path segment ({})",
                    K::NAME,
                    e.body_text()
                ))
            })?;
        ResourceId::parse(id)
    }
}

impl IntoResponse for BadId {
    fn into_response(self) -> Response {
        (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "bad_request", "message": self.0})),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drone(s: &str) -> Result<String, BadId> {
        ResourceId::<Device>::parse(s.to_string()).map(|id| id.as_str().to_string())
    }

    fn fence(s: &str) -> Result<String, BadId> {
        ResourceId::<Fence>::parse(s.to_string()).map(|id| id.as_str().to_string())
    }

    #[test]
    fn ids_are_bounded_and_never_dot_segments() {
        for good in ["drone-1", "depot-north", "a.b", "...", "%2e%2e", "a b"] {
            assert_eq!(drone(good).as_deref(), Ok(good));
            assert_eq!(fence(good).as_deref(), Ok(good));
        }
        let long = "x".repeat(MAX_ID_CHARS + 1);
        for bad in ["", ".", "..", "a/b", "a\\b", "a\nb", &long] {
            assert!(drone(bad).is_err(), "{bad:?}");
            assert!(fence(bad).is_err(), "{bad:?}");
        }
        assert!(drone(&"é".repeat(MAX_ID_CHARS)).is_ok());
        let message = drone("..").unwrap_err().0;
        assert!(message.starts_with("drone id \"..\""), "{message}");
    }

    #[test]
    fn a_device_id_may_hold_what_iot_hub_allows_a_fence_id_what_cosmos_db_does() {
        for id in ["a?b", "a#b", "odd#1?x"] {
            assert_eq!(drone(id).as_deref(), Ok(id));
            assert!(fence(id).is_err(), "{id:?}");
        }
    }
}
