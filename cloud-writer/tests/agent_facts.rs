//! Agent facts (connection state, version) on the drone's latest document, against the
//! local endpoint: each in its own order (an older connection event replayed after a
//! newer one leaves the newer; a lower twin version leaves the higher's version), a fact
//! for a drone without a document creates one without a position, which the drone's first
//! position then fills in, and positions and facts leave each other's fields alone.

mod common;

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use cloud_writer::internals::{
    Ack, AgentFact, AgentWrite, ConnectionOp, CosmosSink, PositionWrite, TwinOp,
};
use cloud_writer::{DropReason, Metrics, NewestWins};
use common::sink::{latent_endpoint, position_write, sink_settings, start_sink, writer_container};
use common::stored;
use cosmos::ContainerClient;
use cosmos_sim::CosmosSim;

async fn start(name: &str) -> (CosmosSim, ContainerClient, CosmosSink, Arc<Metrics>) {
    let sim = latent_endpoint().await;
    let container = writer_container(&sim, name).await;
    let (sink, metrics) = start_sink(&container, sink_settings(NewestWins::Patch));
    (sim, container, sink, metrics)
}

/// A connection state event's fact; `sequence` is the low digit of a 64-digit sequence number
/// shaped as Microsoft's example.
fn connection(device: &str, op: ConnectionOp, sequence: u8, at: DateTime<Utc>) -> AgentWrite {
    AgentWrite {
        device_id: device.into(),
        fact: AgentFact::Connection {
            op,
            at,
            sequence: format!(
                "000000000000000001D8713FF7E08514000000020000000000000000000000{sequence:02X}"
            ),
        },
        ack: Ack::none(),
    }
}

fn version(device: &str, twin_version: u64, version: &str) -> AgentWrite {
    AgentWrite {
        device_id: device.into(),
        fact: AgentFact::Version {
            op: TwinOp::Update,
            twin_version,
            version: version.into(),
        },
        ack: Ack::none(),
    }
}

fn position(device: &str, seq: u64, ts: DateTime<Utc>) -> PositionWrite {
    position_write(device, seq, ts, 47.6, -122.3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_connection_event_replayed_leaves_the_newer_state() {
    let (_sim, container, sink, metrics) = start("agent-order").await;
    let t0 = Utc::now() - TimeDelta::seconds(60);
    // The drone connected (sequence 7) after it disconnected (sequence 6); the
    // disconnection arrives last, as when a partition is read again.
    sink.agent(connection(
        "drone-1",
        ConnectionOp::Connected,
        7,
        t0 + TimeDelta::seconds(10),
    ))
    .await;
    sink.wait_idle().await;
    sink.agent(connection("drone-1", ConnectionOp::Disconnected, 6, t0))
        .await;
    // Versions by twin version: 5 then 3.
    sink.agent(version("drone-1", 5, "1.2.0")).await;
    sink.wait_idle().await;
    sink.agent(version("drone-1", 3, "1.1.0")).await;
    sink.close().await;

    let doc = stored(&container, "drone-1").await;
    assert_eq!(doc["agentConnected"], true, "{doc}");
    assert_eq!(
        doc["agentConnectedAt"],
        (t0 + TimeDelta::seconds(10))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            .as_str()
    );
    assert!(doc.get("agentDisconnectedAt").is_none(), "{doc}");
    assert_eq!(doc["agentVersion"], "1.2.0");
    assert_eq!(doc["agentTwinVersion"], 5);
    // A document of facts alone: no position, so no location.
    assert!(doc.get("location").is_none() && doc.get("deviceTimeMs").is_none());
    let counts = metrics.counts();
    assert_eq!(counts.agent_written, 2, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::Superseded), 2, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_and_facts_leave_each_other_alone() {
    let (_sim, container, sink, metrics) = start("agent-positions").await;
    let t0 = Utc::now() - TimeDelta::seconds(60);
    // The agent connects before the drone's first position: the fact makes the document.
    sink.agent(connection("drone-2", ConnectionOp::Connected, 1, t0))
        .await;
    sink.wait_idle().await;
    // The first position finds a document without a position and fills it in.
    sink.write(position("drone-2", 1, t0 + TimeDelta::seconds(1)))
        .await;
    sink.wait_idle().await;
    sink.agent(version("drone-2", 2, "0.1.0")).await;
    sink.write(position("drone-2", 2, t0 + TimeDelta::seconds(6)))
        .await;
    sink.wait_idle().await;
    sink.agent(connection(
        "drone-2",
        ConnectionOp::Disconnected,
        2,
        t0 + TimeDelta::seconds(8),
    ))
    .await;
    sink.close().await;

    let doc = stored(&container, "drone-2").await;
    assert_eq!(doc["seq"], 2, "{doc}");
    assert_eq!(
        doc["location"]["coordinates"],
        serde_json::json!([-122.3, 47.6])
    );
    assert_eq!(doc["agentConnected"], false);
    assert!(doc["agentConnectedAt"].is_string() && doc["agentDisconnectedAt"].is_string());
    assert_eq!(doc["agentVersion"], "0.1.0");
    let counts = metrics.counts();
    assert_eq!((counts.written, counts.agent_written), (2, 3), "{counts:?}");
    assert_eq!(counts.dropped(DropReason::Superseded), 0, "{counts:?}");
}
