//! What the switched-on faults ([`crate::faults`]) do to a request before it is served: the
//! added latency, an injected 503, or a hold answered 408.

use super::reply::Reply;
use crate::endpoint_state::EndpointState;
use crate::faults::Injected;

/// Waits the added latency, then draws a fault: the reply that ends the request, or `None` to
/// serve it.
pub(super) async fn inject(state: &EndpointState) -> Option<Reply> {
    let latency = state.faults.delay();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match state.faults.draw() {
        Injected::None => None,
        Injected::Unavailable => Some(Reply::error(
            503,
            0,
            "Service is currently unavailable (injected fault).",
        )),
        Injected::Timeout(hold) => {
            tokio::time::sleep(hold).await;
            Some(Reply::error(408, 0, "Request timed out (injected fault)."))
        }
    }
}
