//! The master-key signature check, with the service's 401 messages.

use crate::endpoint_state::EndpointState;
use crate::server::headers::header;
use crate::server::reply::Reply;
use cosmos_wire::auth::{resource_for_path, string_to_sign};
use cosmos_wire::headers as h;
use http::{HeaderMap, Method};

/// Checks a master-key `signature` exactly as the service does.
pub(super) fn check(
    state: &EndpointState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    signature: &str,
) -> Result<(), Reply> {
    let Some(date) = header(headers, h::DATE).or_else(|| header(headers, "date")) else {
        return Err(Reply::error(401, 0, "The request has no x-ms-date header."));
    };
    let (rtype, link) = resource_for_path(path);
    if state
        .key
        .read()
        .verifies(signature, method.as_str(), &rtype, &link, date)
    {
        return Ok(());
    }
    let signed = string_to_sign(method.as_str(), &rtype, &link, date).replace('\n', "\\n");
    Err(Reply::error(
        401,
        0,
        format!(
            "The input authorization token can't serve the request. Please check that the expected payload is built as per the protocol, and check the key being used. Server used the following payload to sign: '{signed}'"
        ),
    ))
}
