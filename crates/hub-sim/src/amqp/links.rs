//! The tasks behind each accepted link: a request node's incoming requests, its outgoing
//! replies, and a partition receiver's deliveries (credit-based: `send` waits for the
//! client's credit).
//!
//! Deliveries are settled as the receiver asked at attach: unsettled (for the client to settle)
//! when it asked for `snd-settle-mode` `unsettled` (Python's pyamqp does), pre-settled when it
//! asked for `settled` (Microsoft's .NET and Go clients do) or `mixed` (fe2o3-amqp's default,
//! under Microsoft's Rust SDK), where the sender chooses per delivery. The hub chooses
//! pre-settled for `mixed` because fe2o3-amqp's sender records an unsettled delivery only after
//! its transfer is handed on, so a client's disposition that arrives first is lost and the
//! delivery is never settled; the client pays a disposition per event for nothing, as Event
//! Hubs ignores outcomes. The settlement of an unsettled delivery is not awaited either (a
//! lost one stays in fe2o3-amqp's map of the link until it detaches). Replies on `$cbs` and
//! `$management` follow the same rule.
//!
//! Credit is the client's: `send` waits for it. fe2o3-amqp's receivers in `CreditMode::Auto`
//! grant more credit only as they dispose of deliveries, so a reader on that crate must accept
//! each delivery, pre-settled or not (Microsoft's Rust SDK does), or it stops after its first
//! credit window.
//!
//! Messages go out with `send_batchable`, so the transfer carries its last field
//! (`batchable`) and its field list is complete: pyamqp reads a transfer's payload at a fixed
//! index and cannot read a transfer whose trailing default fields were left out.

use super::consumer::{PartitionAddress, start_of, to_message};
use super::requests::{self, ConnectionAuth, Node, Response};
use super::shared::AmqpShared;
use fe2o3_amqp::Sendable;
use fe2o3_amqp::link::{Receiver, Sender};
use fe2o3_amqp::types::definitions::{self, AmqpError, LinkError, SenderSettleMode};
use fe2o3_amqp::types::messaging::{Body, Source};
use fe2o3_amqp::types::primitives::Value;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The reply channels of one session, by node (`$cbs`, `$management`).
pub(crate) type Replies = Arc<Mutex<HashMap<String, mpsc::Sender<Response>>>>;

/// Which request node a link belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// `$cbs`.
    Cbs,
    /// `$management`.
    Management,
}

impl NodeKind {
    /// The node of an address, if it is one.
    pub(crate) fn of(address: &str) -> Option<NodeKind> {
        match address {
            "$cbs" => Some(NodeKind::Cbs),
            "$management" => Some(NodeKind::Management),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            NodeKind::Cbs => "$cbs",
            NodeKind::Management => "$management",
        }
    }
}

/// Whether the hub sends pre-settled to a receiver that asked for `mode` at attach (see the
/// module's documentation).
pub(crate) fn presettled(mode: &SenderSettleMode) -> bool {
    match mode {
        SenderSettleMode::Settled | SenderSettleMode::Mixed => true,
        SenderSettleMode::Unsettled => false,
    }
}

/// How long the hub holds its answer to a client's detach of a `$cbs` or `$management` link
/// when [`crate::HubConfig::unattached_handle_workaround`] is on.
const DETACH_ANSWER_HOLD: Duration = Duration::from_millis(100);

/// Whether to answer a client's detach of a `$cbs` or `$management` link: at once, as Event
/// Hubs does; with the workaround on, after [`DETACH_ANSWER_HOLD`], and not at all when the
/// client ended the session (`session_ended`) first.
///
/// The Rust SDK drops its CBS links and their session at once after authorizing: detach,
/// detach and end leave in one burst. On fe2o3-amqp 0.16 without the fix, an answering
/// detach that reaches it between its link drop and its session drop names a link it no
/// longer has: its session ends with an error, frees the channel early, and the next frame
/// of the hub's on that channel makes it close the whole connection ("Session is not
/// found"; the SDK reports "Connection dropped"). `tests/sdk_rust_tls.rs` failed that way
/// in 6 to 12 of 20 runs before the workspace carried the fix; answering no detach at all
/// made it 0 of 20. The end of the session detaches its links, so no answer is owed then.
async fn answer_detach(workaround: bool, session_ended: &CancellationToken) -> bool {
    if !workaround {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(DETACH_ANSWER_HOLD) => !session_ended.is_cancelled(),
        () = session_ended.cancelled() => false,
    }
}

/// Forwards replies of `node` to the client's receiver link, pre-settled or not as for events.
/// `session_ended` is cancelled when the client ends the link's session.
pub(crate) async fn reply_link(
    mut sender: Sender,
    node: NodeKind,
    replies: Replies,
    settled: bool,
    workaround: bool,
    session_ended: CancellationToken,
) {
    let (tx, mut rx) = mpsc::channel::<Response>(16);
    replies.lock().insert(node.name().to_owned(), tx);
    loop {
        let response = tokio::select! {
            response = rx.recv() => match response {
                Some(response) => response,
                None => break,
            },
            // The client closes its reply link: answer its detach, unless it ends the session.
            _ = sender.on_detach() => {
                if answer_detach(workaround, &session_ended).await {
                    break;
                }
                return;
            }
        };
        let reply = Sendable::builder()
            .message(response)
            .settled(settled)
            .build();
        if sender.send_batchable(reply).await.is_err() {
            break;
        }
    }
    let _ = sender.close().await;
}

/// Serves requests arriving on the client's sender link to `node`. `session_ended` is
/// cancelled when the client ends the link's session.
pub(crate) async fn request_link(
    mut receiver: Receiver,
    node: NodeKind,
    amqp: Arc<AmqpShared>,
    auth: Arc<ConnectionAuth>,
    replies: Replies,
    session_ended: CancellationToken,
) {
    loop {
        let delivery = match receiver.recv::<Body<Value>>().await {
            Ok(delivery) => delivery,
            // Detached by the client: answer, unless it ends the session.
            Err(_) if answer_detach(amqp.unattached_handle_workaround, &session_ended).await => {
                break;
            }
            Err(_) => return,
        };
        let _ = receiver.accept(&delivery).await;
        let context = Node {
            hub: &amqp.hub_name,
            key: &amqp.key,
            entra: amqp.entra.as_deref(),
            partitions: &amqp.hub.partitions,
            created_ms: amqp.created_ms,
        };
        let (response, refused) = match node {
            NodeKind::Cbs => requests::cbs(&context, &auth, delivery.message()).await,
            NodeKind::Management => {
                amqp.hub.faults.delay_management().await;
                requests::management(&context, &auth, delivery.message())
            }
        };
        match (refused, node) {
            (Some(reason), _) => amqp.hub.counters.add("amqp_refused", reason, 1),
            (None, NodeKind::Cbs) => amqp.hub.counters.add("amqp_tokens_accepted", "", 1),
            (None, NodeKind::Management) => {}
        }
        let reply = replies.lock().get(node.name()).cloned();
        match reply {
            Some(reply) => {
                if reply.send(response).await.is_err() {
                    break;
                }
            }
            None => tracing::debug!(node = node.name(), "a request arrived with no reply link"),
        }
    }
    let _ = receiver.close().await;
}

fn link_error(
    condition: impl Into<definitions::ErrorCondition>,
    text: String,
) -> definitions::Error {
    definitions::Error::new(condition, Some(text), None)
}

/// Refuses a link that was accepted only to be detached with `error`.
pub(crate) async fn refuse_sender(
    sender: Sender,
    amqp: &AmqpShared,
    reason: &'static str,
    text: String,
) {
    amqp.hub.counters.add("amqp_refused", reason, 1);
    let condition = match reason {
        "link_unauthorized" => AmqpError::UnauthorizedAccess.into(),
        "owner_level" => LinkError::Stolen.into(),
        _ => definitions::ErrorCondition::from(AmqpError::NotFound),
    };
    let _ = sender.close_with_error(link_error(condition, text)).await;
}

/// What a partition receiver asked for at attach.
pub(crate) struct PartitionReceiver {
    /// The partition address.
    pub(crate) address: PartitionAddress,
    /// Its source (the filter that says where to start).
    pub(crate) source: Option<Source>,
    /// Its owner level.
    pub(crate) epoch: Option<i64>,
    /// Whether its deliveries go out pre-settled (it did not ask for `unsettled`).
    pub(crate) settled: bool,
}

/// Delivers a partition's events to one receiver until it detaches, is stolen, or the
/// server stops; stalled by the fault ([`crate::HubSim::stall_receivers`]), it delivers
/// nothing more and answers no detach until then.
pub(crate) async fn partition_link(
    mut sender: Sender,
    receiver: PartitionReceiver,
    amqp: Arc<AmqpShared>,
    auth: Arc<ConnectionAuth>,
    stop: CancellationToken,
) {
    let PartitionReceiver {
        address,
        source,
        epoch,
        settled,
    } = receiver;
    if !auth.is_authorized() {
        return refuse_sender(
            sender,
            &amqp,
            "link_unauthorized",
            "put a token on $cbs first".into(),
        )
        .await;
    }
    let index = match address.partition.parse::<usize>() {
        Ok(i)
            if address.hub.eq_ignore_ascii_case(&amqp.hub_name)
                && i < amqp.hub.partitions.count() =>
        {
            i
        }
        _ => {
            let text = format!("no partition {} of {}", address.partition, address.hub);
            return refuse_sender(sender, &amqp, "link_not_found", text).await;
        }
    };
    let start = match start_of(source.as_ref()) {
        Ok(start) => start,
        Err(text) => return refuse_sender(sender, &amqp, "link_filter", text).await,
    };
    let (reader, stolen) = match amqp.owners.claim(&address.group, index, epoch) {
        Ok(claim) => claim,
        Err(refused) => return refuse_sender(sender, &amqp, "owner_level", refused.0).await,
    };
    let stolen_text = || format!("a receiver with a higher owner level took partition {index}");
    let expired = auth.expired();
    tokio::pin!(expired);
    let partition = amqp.hub.partitions.get(index).expect("index checked");
    let mut next = partition.resolve(start);
    let mut watch = partition.watch();
    // The fault that stalls the receivers attached so far: this one then delivers nothing
    // more and answers no detach, as a link whose connection is stuck.
    let mut stalls = amqp.hub.faults.receiver_stalls();
    let mut stalled = false;
    let mut batch = Vec::with_capacity(256);
    let outcome: Option<LinkEnd> = 'deliver: loop {
        batch.clear();
        if !stalled {
            partition.read(next, 256, &mut batch);
        }
        if batch.is_empty() {
            tokio::select! {
                _ = stop.cancelled() => break None,
                _ = stolen.cancelled() => break Some(LinkEnd::Stolen(stolen_text())),
                () = &mut expired => break Some(LinkEnd::Expired(auth.until())),
                _ = watch.changed(), if !stalled => continue,
                Ok(()) = stalls.changed(), if !stalled => {
                    stalled = true;
                    continue;
                }
                _ = sender.on_detach(), if !stalled => break None,
            }
        }
        for event in batch.drain(..) {
            let message = Sendable::builder()
                .message(to_message(&event))
                .settled(settled)
                .build();
            // The settlement of an unsettled delivery is not awaited: Event Hubs ignores
            // outcomes, and the client's credit alone paces delivery.
            tokio::select! {
                _ = stop.cancelled() => break 'deliver None,
                _ = stolen.cancelled() => break 'deliver Some(LinkEnd::Stolen(stolen_text())),
                () = &mut expired => break 'deliver Some(LinkEnd::Expired(auth.until())),
                Ok(()) = stalls.changed() => {
                    stalled = true;
                    continue 'deliver;
                }
                sent = sender.send_batchable(message) => if sent.is_err() { break 'deliver None },
            }
            next = event.sequence_number + 1;
            amqp.hub.counters.add("events_delivered", "", 1);
        }
    };
    amqp.owners.release(&address.group, index, reader);
    let error = match outcome {
        Some(LinkEnd::Stolen(text)) => {
            amqp.hub.counters.add("amqp_links_dropped", "stolen", 1);
            link_error(LinkError::Stolen, text)
        }
        Some(LinkEnd::Expired(until)) => {
            amqp.hub
                .counters
                .add("amqp_links_dropped", "token_expired", 1);
            link_error(
                AmqpError::UnauthorizedAccess,
                format!(
                    "the token put on $cbs expired at {until} (seconds since the epoch) and no fresh one was put"
                ),
            )
        }
        None => {
            let _ = sender.close().await;
            return;
        }
    };
    let _ = sender.close_with_error(error).await;
}

/// Why the hub ends a receiver's link.
enum LinkEnd {
    /// Another receiver took the partition.
    Stolen(String),
    /// The connection's token expired at these seconds since the epoch.
    Expired(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_receiver_that_asks_for_unsettled_gets_unsettled_deliveries() {
        assert!(presettled(&SenderSettleMode::Settled));
        assert!(presettled(&SenderSettleMode::Mixed));
        assert!(!presettled(&SenderSettleMode::Unsettled));
    }
}
