//! Which buffered record each MQTT packet id of one link carries: the record ↔ packet-id
//! bookkeeping, fed with the MQTT client's outgoing events and the broker's PUBACKs.
//!
//! Pure state (no I/O, no clock), like rumqttc's own `MqttState`; the link's
//! [`super::Publisher`] drives it, and the agent acknowledges in the disk buffer exactly
//! the record this module names.
//!
//! # How rumqttc numbers publishes
//! The client hands publishes to its event loop in order. Each gets the next packet id
//! (1 to the in-flight limit, then 1 again) and one of two outgoing events:
//! - `Publish(pkid)`: written to the network with `pkid`;
//! - `AwaitAck(pkid)`: `pkid` is still held by an unacknowledged publish (the broker
//!   acknowledged out of order), so the new publish is held back. When the PUBACK for
//!   `pkid` arrives, the client writes the held publish with the same `pkid` and emits
//!   `Publish(pkid)` *before* the `PubAck(pkid)` event of the old one.
//!
//! So a packet id can name two records at once: the old one (whose PUBACK comes next)
//! and the held one. PUBACKs of one packet id come in the order the publishes with that
//! id were written, so each packet id keeps a queue of records.
//!
//! Not here: what to publish next (the agent), the buffer, the network.

use std::collections::{HashMap, HashSet, VecDeque};

/// An event that does not fit the state (a client or broker that breaks the protocol).
/// The record mapping is left as it was; the link's records are sent again on the next
/// link if they are never acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unexpected {
    /// The client reported a packet id for a publish the agent never handed to it.
    #[error("packet id {0} reported for no queued publish")]
    NoQueuedPublish(u16),
    /// A second publish was held back while one already was.
    #[error("publish held for packet id {0} while another is held")]
    AlreadyHeld(u16),
    /// A PUBACK for a packet id that carries no record.
    #[error("PUBACK for packet id {0}, which carries no record")]
    UnknownAck(u16),
}

/// The records of one link that await their PUBACK.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    /// Handed to the client, no packet id reported yet (in order).
    queued: VecDeque<u64>,
    /// Held back by the client until `pkid` is acknowledged (`AwaitAck`).
    held: Option<(u16, u64)>,
    /// Written with a packet id, oldest first per packet id.
    written: HashMap<u16, VecDeque<u64>>,
    /// Every record above (queued, held or written).
    records: HashSet<u64>,
}

impl Inflight {
    /// `record` was handed to the client.
    pub(crate) fn queued(&mut self, record: u64) {
        self.queued.push_back(record);
        self.records.insert(record);
    }

    /// `record`, the last queued, was not taken by the client after all.
    pub(crate) fn unqueue_last(&mut self, record: u64) {
        if self.queued.back() == Some(&record) {
            self.queued.pop_back();
            self.records.remove(&record);
        }
    }

    /// The client wrote a publish with `pkid` (`Outgoing::Publish`).
    pub(crate) fn written(&mut self, pkid: u16) -> Result<(), Unexpected> {
        let record = match self.held {
            Some((held_pkid, record)) if held_pkid == pkid => {
                self.held = None;
                record
            }
            _ => self
                .queued
                .pop_front()
                .ok_or(Unexpected::NoQueuedPublish(pkid))?,
        };
        self.written.entry(pkid).or_default().push_back(record);
        Ok(())
    }

    /// The client held the next publish back until `pkid` is acknowledged
    /// (`Outgoing::AwaitAck`).
    pub(crate) fn held(&mut self, pkid: u16) -> Result<(), Unexpected> {
        if self.held.is_some() {
            return Err(Unexpected::AlreadyHeld(pkid));
        }
        let record = self
            .queued
            .pop_front()
            .ok_or(Unexpected::NoQueuedPublish(pkid))?;
        self.held = Some((pkid, record));
        Ok(())
    }

    /// The broker acknowledged `pkid`: returns the record it carried, the oldest written
    /// with that packet id.
    pub(crate) fn acked(&mut self, pkid: u16) -> Result<u64, Unexpected> {
        let records = self
            .written
            .get_mut(&pkid)
            .ok_or(Unexpected::UnknownAck(pkid))?;
        let record = records.pop_front().ok_or(Unexpected::UnknownAck(pkid))?;
        if records.is_empty() {
            self.written.remove(&pkid);
        }
        self.records.remove(&record);
        Ok(record)
    }

    /// How many records await their PUBACK (queued, held or written).
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether `record` is on this link and not yet acknowledged.
    pub(crate) fn contains(&self, record: u64) -> bool {
        self.records.contains(&record)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use rumqttc::{Event, Incoming, MqttState, Outgoing, Packet, PubAck, Publish, QoS, Request};

    use super::*;

    #[test]
    fn a_collision_keeps_each_record_on_its_own_packet() {
        // In-flight limit 2: records 1 and 2 get packet ids 1 and 2; the broker
        // acknowledges 2 first; record 3 gets packet id 1 again and is held back.
        let mut inflight = Inflight::default();
        for record in [1, 2, 3] {
            inflight.queued(record);
        }
        inflight.written(1).unwrap();
        inflight.written(2).unwrap();
        assert_eq!(inflight.acked(2), Ok(2));
        inflight.held(1).unwrap();
        assert_eq!(inflight.len(), 2);
        // The PUBACK for packet id 1 arrives: the client writes record 3 with packet id
        // 1 and reports that before the PUBACK, which still belongs to record 1.
        inflight.written(1).unwrap();
        assert_eq!(inflight.acked(1), Ok(1));
        assert!(inflight.contains(3));
        assert_eq!(inflight.acked(1), Ok(3));
        assert_eq!(inflight.len(), 0);
    }

    #[test]
    fn events_that_do_not_fit_are_refused_and_change_nothing() {
        let mut inflight = Inflight::default();
        assert_eq!(inflight.written(1), Err(Unexpected::NoQueuedPublish(1)));
        assert_eq!(inflight.acked(1), Err(Unexpected::UnknownAck(1)));
        inflight.queued(7);
        inflight.queued(8);
        inflight.held(1).unwrap();
        assert_eq!(inflight.held(2), Err(Unexpected::AlreadyHeld(2)));
        assert!(inflight.contains(7) && inflight.contains(8) && inflight.len() == 2);
    }

    /// What the test broker does next.
    #[derive(Debug, Clone)]
    enum Step {
        /// The agent hands the client one more record (if the event loop would read it).
        Publish,
        /// The broker acknowledges one of the publishes it holds (picked by index).
        Ack(usize),
    }

    fn steps() -> impl Strategy<Value = (u16, Vec<Step>)> {
        let step = prop_oneof![Just(Step::Publish), any::<usize>().prop_map(Step::Ack)];
        (1u16..=4, prop::collection::vec(step, 1..200))
    }

    /// Runs rumqttc's own protocol state (the code the event loop drives) against a
    /// broker that acknowledges in any order; every PUBACK must name the record whose
    /// packet the broker received with that id, and nothing may be left over.
    fn run(max_inflight: u16, steps: &[Step]) {
        let mut state = MqttState::new(max_inflight, false, 1 << 20);
        let mut inflight = Inflight::default();
        // The broker's view: packet id -> record, of publishes it has not acknowledged.
        let mut broker: BTreeMap<u16, u64> = BTreeMap::new();
        let mut next_record = 1;
        let drain = |state: &mut MqttState,
                     inflight: &mut Inflight,
                     broker: &mut BTreeMap<u16, u64>,
                     truth: Option<u64>| {
            let mut wire = std::mem::take(&mut state.write);
            while let Ok(Packet::Publish(publish)) = rumqttc::read(&mut wire, 1 << 20) {
                let record = u64::from_be_bytes(publish.payload[..].try_into().unwrap());
                assert!(broker.insert(publish.pkid, record).is_none());
            }
            for event in state.events.drain(..) {
                match event {
                    Event::Outgoing(Outgoing::Publish(pkid)) => inflight.written(pkid).unwrap(),
                    Event::Outgoing(Outgoing::AwaitAck(pkid)) => inflight.held(pkid).unwrap(),
                    Event::Incoming(Incoming::PubAck(ack)) => {
                        assert_eq!(inflight.acked(ack.pkid), Ok(truth.unwrap()));
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        };
        let mut handed = 0;
        for step in steps {
            match step {
                // The event loop reads the next request only with a free slot and no
                // collision pending.
                Step::Publish if state.inflight() < max_inflight && state.collision.is_none() => {
                    let record = next_record;
                    next_record += 1;
                    handed += 1;
                    inflight.queued(record);
                    let publish = Publish::new("t", QoS::AtLeastOnce, record.to_be_bytes());
                    state
                        .handle_outgoing_packet(Request::Publish(publish))
                        .unwrap();
                    drain(&mut state, &mut inflight, &mut broker, None);
                }
                Step::Publish => {}
                Step::Ack(pick) if !broker.is_empty() => {
                    let (&pkid, &record) = broker.iter().nth(pick % broker.len()).unwrap();
                    broker.remove(&pkid);
                    state
                        .handle_incoming_packet(Incoming::PubAck(PubAck::new(pkid)))
                        .unwrap();
                    drain(&mut state, &mut inflight, &mut broker, Some(record));
                }
                Step::Ack(_) => {}
            }
        }
        // Everything not acknowledged is still on the link, and nothing else.
        let left: Vec<u64> = (1..next_record).filter(|r| inflight.contains(*r)).collect();
        let mut expected: Vec<u64> = broker.values().copied().collect();
        expected.extend(
            state
                .collision
                .as_ref()
                .map(|p| u64::from_be_bytes(p.payload[..].try_into().unwrap())),
        );
        expected.sort_unstable();
        assert_eq!(left, expected);
        assert_eq!(inflight.len(), left.len());
        assert!(handed >= left.len());
    }

    proptest! {
        #[test]
        fn every_puback_names_the_record_of_its_own_packet((max_inflight, steps) in steps()) {
            run(max_inflight, &steps);
        }
    }
}
