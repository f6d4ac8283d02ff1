//! What the cloud asks of a running agent: the cadence the device twin sets, and the
//! answers to direct methods (`status`, `reportNow`), made through the same buffer and
//! publish path as every other message.

use tokio::time::Instant;

use super::{Agent, Link};
use crate::batch::Batching;
use crate::cadence::Cadence;
use crate::source::Source;
use crate::transport::MethodRequest;
use crate::twin::{Answer, Method};

impl Agent {
    /// Takes the cadence the twin set: the batch being gathered goes now, and the new
    /// intervals apply from here.
    pub(super) fn set_cadence(&mut self, cadence: Cadence, link: Option<&mut Link>) {
        self.cadence = cadence;
        let held = self.batching.as_mut().map(Batching::take);
        self.set_batching(cadence);
        if let Some(held) = held.filter(|held| !held.is_empty()) {
            match link {
                Some(link) => {
                    link.live.push_back(held);
                    self.pump(link);
                }
                // Buffered records go with the backlog of the next link.
                None => self.lose_unbuffered(),
            }
        }
    }

    pub(super) fn set_batching(&mut self, cadence: Cadence) {
        self.batching = cadence.publish_every().and_then(|publish_every| {
            Batching::new(
                &self.config.device_id,
                cadence.report_interval(),
                publish_every,
            )
        });
    }

    /// The answer to a direct method call on `link` (the current link, if the call came on
    /// it).
    pub(super) fn answer(
        &mut self,
        request: &MethodRequest,
        source: &Source,
        link: Option<&mut Link>,
    ) -> Answer {
        match Method::of(request) {
            Err(refused) => refused,
            Ok(Method::Status) => {
                self.refresh_status();
                match serde_json::to_value(self.status.handle().status()) {
                    Ok(status) => Answer::ok(status),
                    Err(err) => Answer::error(500, err.to_string()),
                }
            }
            Ok(Method::ReportNow) => match link {
                Some(link) => self.report_now(source, link),
                None => Answer::error(503, "the link this call came on is gone"),
            },
        }
    }

    /// Publishes the latest fix at once (with the batch being gathered, if any); answers
    /// its `seq`, or 409 when there is no fix or no time to stamp it with.
    fn report_now(&mut self, source: &Source, link: &mut Link) -> Answer {
        let Some(fix) = source.latest(Instant::now(), self.config.max_fix_age) else {
            return Answer::error(
                409,
                format!(
                    "no fix: the position source gave none in the last {:?}",
                    self.config.max_fix_age
                ),
            );
        };
        let Some(ts) = self.stamp(&fix) else {
            return Answer::error(
                409,
                "no time: the board clock reads before any plausible date and the source gives no GPS time",
            );
        };
        let Some(record) = self.store(&fix, ts) else {
            return Answer::error(409, "the latest fix is not a valid position");
        };
        let seq = record.id;
        let mut records = self
            .batching
            .as_mut()
            .map(Batching::take)
            .unwrap_or_default();
        records.push(record);
        link.live.push_back(records);
        self.pump(link);
        self.write_status_file();
        Answer::ok(serde_json::json!({ "seq": seq }))
    }

    /// Sends what the control plane has due.
    pub(super) fn flush_control(&mut self) {
        if let Some(control) = self.control.as_mut() {
            control.flush(Instant::now(), &self.status.handle().status());
        }
    }
}
