//! The ETag mode's read path: read what is stored for the position's drone (inside the
//! in-flight limit, at most [`MAX_READS`] at once), then Replace with its ETag, Create, or
//! find the position superseded ([`super::state::after_read`]).

use std::sync::Arc;
use std::time::Duration;

use super::state::{self, AfterRead, Final, Step};
use super::{Parked, Pending, Shared};
use crate::sink::refusal::{self, Refusal};
use crate::sink::stored::read_stored;

/// Point reads in flight at once (ETag mode).
pub(super) const MAX_READS: usize = 64;
/// Pause before reading again after a read failed for a reason that holds nothing (e.g.
/// an unreadable answer), so that such a failure does not spin.
const READ_RETRY_PAUSE: Duration = Duration::from_millis(100);

impl Shared {
    /// ETag mode: reads the stored document, then replaces, creates, or finds the
    /// position superseded.
    pub(super) fn read_then_write(self: Arc<Self>, mut pending: Box<Pending>) {
        tokio::spawn(async move {
            if !state::take_round(&mut pending.rounds) {
                self.finish(*pending, Final::Failed, None);
                return;
            }
            let read = {
                let _permit = self.reads.acquire().await;
                let device = &pending.position.device_id;
                read_stored(&self.container, &self.read_query, device, &pending.doc_id).await
            };
            let refusal = match &read {
                Ok(_) => Refusal::None,
                Err(err) => refusal::of_error(err),
            };
            match refusal {
                Refusal::Hold(cause) => return self.park(Parked::Latest(pending, None), cause),
                Refusal::None | Refusal::Again | Refusal::Document(_) => {
                    self.answered(&mut pending.probe);
                }
            }
            let stored = match read {
                Ok(stored) => stored,
                Err(err) => {
                    tracing::warn!(device = %pending.position.device_id, error = %err, "reading the stored document failed; retrying");
                    tokio::time::sleep(READ_RETRY_PAUSE).await;
                    self.retry_or_stale(pending, None).await;
                    return;
                }
            };
            let step = match state::after_read(stored.as_ref().map(|s| s.order), pending.order) {
                AfterRead::Superseded => {
                    if let Some(stored) = stored {
                        self.high_water
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .raise(&pending.position.device_id, stored.order, stored.etag);
                    }
                    return self.finish(*pending, Final::Superseded, None);
                }
                AfterRead::Replace => {
                    pending.if_match = stored.and_then(|s| s.etag);
                    Step::Replace
                }
                AfterRead::Create => Step::Create,
            };
            let op = self.op(pending, step);
            self.submit(op).await;
        });
    }
}
