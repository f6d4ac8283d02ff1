//! History documents (HISTORY=true): one Create per fresh position, `id` =
//! `{deviceId}:{seq}`; a 409 is a replay and final. Their refusals are classified like
//! the positions' ([`super::refusal`]); those not written are counted in
//! `history_dropped{reason}`.

use std::sync::Arc;

use cosmos::{BulkOperation, OperationType};

use super::driver::WriteEngine;
use super::in_flight::{Ctx, HistoryDoc, OutcomeInfo, Parked};
use super::refusal::{self, Refusal};
use crate::metrics::{DocumentKind, DropReason};

impl WriteEngine {
    pub(super) fn history_op(&self, doc: HistoryDoc) -> BulkOperation<Ctx> {
        BulkOperation {
            kind: OperationType::Create,
            partition_key: self.encoder.partition_key(&doc.device_id),
            id: None,
            body: doc.body.clone(),
            if_match: None,
            context: Ctx::History(doc),
        }
    }

    /// Handles one outcome of a history document.
    pub(super) async fn on_history(self: &Arc<Self>, mut doc: HistoryDoc, info: OutcomeInfo) {
        let refusal = refusal::of_outcome(
            OperationType::Create,
            info.status,
            info.error.as_ref(),
            info.whole_request,
        );
        match refusal {
            Refusal::Hold(cause) => return self.park(Parked::History(doc), cause),
            Refusal::Again => {
                self.answered(&mut doc.probe);
                self.resubmit_history(doc).await;
                return;
            }
            Refusal::Document(reason) => {
                self.metrics.history_dropped(reason);
                let detail = format!("Cosmos DB refused the history document {}", doc.id);
                tracing::warn!(id = doc.id, reason = reason.as_str(), %detail, "history document not written");
            }
            // Written, or already written (409: a replay).
            Refusal::None if matches!(info.status, 200..=299) => {
                self.metrics.written(DocumentKind::History)
            }
            Refusal::None if info.status == 409 => {}
            Refusal::None => {
                tracing::error!(
                    id = doc.id,
                    status = info.status,
                    "history document not written"
                );
                self.metrics.history_dropped(DropReason::WriteFailed);
            }
        }
        self.answered(&mut doc.probe);
        doc.ack.finish();
        self.leave();
    }

    /// Submits a history document again unless it turned stale; `false` when it did.
    pub(super) async fn resubmit_history(&self, doc: HistoryDoc) -> bool {
        match self.keep_history_if_fresh(doc) {
            Some(doc) => {
                self.submit(self.history_op(doc)).await;
                true
            }
            None => false,
        }
    }

    /// Gives a history document back while it is fresh; drops it as `stale_in_retry`
    /// (acknowledged, counted) when it turned stale.
    pub(super) fn keep_history_if_fresh(&self, mut doc: HistoryDoc) -> Option<HistoryDoc> {
        if self.is_fresh(doc.device_time, None) {
            return Some(doc);
        }
        self.metrics.history_dropped(DropReason::StaleInRetry);
        self.unanswered(&mut doc.probe);
        doc.ack.finish();
        self.leave();
        None
    }
}
