//! The id a route takes from its path (a drone's, a geofence's): one check for every route,
//! so that no id reaches Cosmos DB that it would refuse or that names another resource.
//!
//! An id is 1 to 128 characters, without control characters or the four Cosmos DB refuses in
//! an id (`/ \ ? #`), and is neither `.` nor `..` (path segments that URL handling folds onto
//! the parent: `/docs/..` would name the container itself).

use axum::async_trait;
use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Longest id, characters (IoT Hub's limit on device ids).
pub const MAX_ID_CHARS: usize = 128;

/// A checked id from the route's `:id` segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceId(String);

/// Why a path's id was refused: a 400 whose JSON body says what an id may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadId(pub String);

impl ResourceId {
    /// `id`, if it is one the API takes.
    pub fn parse(id: String) -> Result<ResourceId, BadId> {
        let chars = id.chars().count();
        let plain = !id
            .chars()
            .any(|c| c.is_control() || matches!(c, '/' | '\\' | '?' | '#'));
        if (1..=MAX_ID_CHARS).contains(&chars) && plain && id != "." && id != ".." {
            Ok(ResourceId(id))
        } else {
            Err(BadId(format!(
                "id {id:?}: 1 to {MAX_ID_CHARS} characters, without control characters, / \\ ? or #, and neither . nor .."
            )))
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[async_trait]
impl<S: Send + Sync> FromRequestParts<S> for ResourceId {
    type Rejection = BadId;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| BadId(format!("id: not a valid path segment ({})", e.body_text())))?;
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

    #[test]
    fn ids_are_bounded_and_plain() {
        let id = |s: &str| ResourceId::parse(s.to_string()).map(|id| id.as_str().to_string());
        for good in ["drone-1", "depot-north", "a.b", "...", "%2e%2e", "a b"] {
            assert_eq!(id(good).as_deref(), Ok(good));
        }
        let long = "x".repeat(MAX_ID_CHARS + 1);
        for bad in ["", ".", "..", "a/b", "a?b", "a#b", "a\\b", "a\nb", &long] {
            assert!(id(bad).is_err(), "{bad:?}");
        }
        assert!(id(&"é".repeat(MAX_ID_CHARS)).is_ok());
    }
}
