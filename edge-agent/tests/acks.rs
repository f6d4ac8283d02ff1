//! Acknowledgements by packet id: a broker that acknowledges out of order (a relay in
//! front of a real Mosquitto withholds PUBACKs) makes the MQTT client reuse a packet id
//! that is still in flight; each record must still leave the buffer at its own PUBACK,
//! never earlier, never later.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::ack_gate::AckGate;
use common::{Running, Subscriber, sim_config};
use test_harness::Mosquitto;

/// The ids in the buffer's acknowledgement journal (12-byte entries: id, CRC-32).
fn journal(dir: &Path) -> BTreeSet<u64> {
    std::fs::read(dir.join("acks.log"))
        .unwrap_or_default()
        .chunks_exact(12)
        .map(|entry| u64::from_le_bytes(entry[..8].try_into().unwrap()))
        .collect()
}

#[tokio::test]
async fn a_reused_packet_id_acknowledges_each_record_at_its_own_puback() {
    let broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-acks").await;
    let gate = AckGate::start(broker.port()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = sim_config("drone-t1", gate.port(), dir.path());
    // Packet ids 1 and 2, then 1 again.
    config.transport.max_inflight = 2;

    // The PUBACK of the first publish (packet id 1) is withheld; the second (packet
    // id 2) passes; the third publish gets packet id 1 again while it is in flight, so
    // the client holds it back.
    gate.hold_next(1);
    let agent = Running::start(config);
    agent
        .wait_for("the second PUBACK and two more positions", |s| {
            s.acked >= 1 && s.generated >= 5
        })
        .await;
    let published = gate.published();
    assert_eq!(
        published.iter().map(|p| p.pkid).collect::<Vec<_>>(),
        [1, 2],
        "the third publish waits for packet id 1: {published:?}"
    );
    let (first, second) = (published[0].seq, published[1].seq);
    assert_eq!(journal(dir.path()), BTreeSet::from([second]));

    // The first PUBACK arrives; the held publish goes out with packet id 1, and its own
    // PUBACK is withheld in turn.
    gate.hold_next(1);
    gate.release().await;
    let status = agent.wait_for("the first PUBACK", |s| s.acked >= 2).await;
    let reused = gate.wait_published(3).await[2];
    assert_eq!(reused.pkid, 1, "{status:?}");
    let acked = journal(dir.path());
    assert!(
        acked.contains(&first),
        "the first PUBACK is the first record's: {acked:?}"
    );
    assert!(
        !acked.contains(&reused.seq),
        "a record left the buffer before its own PUBACK: {acked:?}"
    );

    // All PUBACKs pass from now on: everything leaves the buffer, nothing is left
    // behind, and everything arrived.
    gate.release().await;
    let done = agent
        .wait_for("every record acknowledged", |s| {
            s.buffer_depth == 0 && s.acked >= 6
        })
        .await;
    let last_seq = done.next_seq - 1;
    let received = subscriber
        .until(|all| {
            let seen: BTreeSet<u64> = all.iter().map(|r| r.position.seq).collect();
            (1..=last_seq).all(|seq| seen.contains(&seq))
        })
        .await;
    assert!(!received.is_empty());
    let status = agent.stop().await;
    assert_eq!(
        status.acked,
        status.generated - status.buffer_depth,
        "{status:?}"
    );
    assert_eq!(gate.withheld(), 0);
}
