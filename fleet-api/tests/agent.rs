//! The agent's connection state and version, and the GNSS health, as the API returns them,
//! from latest documents shaped as the writer stores them (the agent fields written here
//! by hand, as its patches set them); a document with agent facts but no position yet is no
//! drone on the map, in the lists or by id.

mod common;

use std::time::Duration;

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use serde_json::{Value, json};
use telemetry::DocumentLayout;

#[tokio::test]
async fn drones_carry_their_agent_and_gnss_health() {
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let layout = DocumentLayout::default();
    let mut connected = layout.latest(&position("drone-up", 4, HOME, Duration::from_secs(2)), None);
    connected["agentConnected"] = json!(true);
    connected["agentConnectedAt"] = json!("2026-11-28T06:00:00.000Z");
    connected["agentConnectionSeq"] = json!("00000000000000000000000000000002");
    connected["agentVersion"] = json!("0.1.0");
    connected["agentTwinVersion"] = json!(7);
    connected["gnss"] = json!({"fix": "3d", "sats": 12, "satsVisible": 14, "hAccM": 1.5});
    let mut gone = layout.latest(
        &position(
            "drone-down",
            9,
            (HOME.0 + 0.001, HOME.1),
            Duration::from_secs(600),
        ),
        None,
    );
    gone["agentConnected"] = json!(false);
    gone["agentConnectedAt"] = json!("2026-11-28T05:00:00.000Z");
    gone["agentDisconnectedAt"] = json!("2026-11-28T05:50:00.000Z");
    gone["agentConnectionSeq"] = json!("00000000000000000000000000000003");
    // Connected before its first position: facts and ids only.
    let unplaced = json!({"id": "drone-new", "deviceId": "drone-new", "kind": "latest",
        "schemaVersion": 1, "agentConnected": true,
        "agentConnectedAt": "2026-11-28T06:10:00.000Z",
        "agentConnectionSeq": "00000000000000000000000000000001"});
    for (device, doc) in [
        ("drone-up", &connected),
        ("drone-down", &gone),
        ("drone-new", &unplaced),
    ] {
        c.upsert(device, &serde_json::to_vec(doc).unwrap())
            .await
            .unwrap();
    }
    let (base, _stop) = serve(c, ApiOptions::default()).await;

    let all = get(&format!("{base}/api/drones")).await;
    assert_eq!(all.status, 200, "{}", all.body);
    assert_eq!(ids(&all.body), ["drone-down", "drone-up"]);
    let near = get(&format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=5000",
        HOME.1, HOME.0
    ))
    .await;
    assert_eq!(ids(&near.body), ["drone-up", "drone-down"]);

    let up = get(&format!("{base}/api/drones/drone-up")).await;
    assert_eq!(up.status, 200, "{}", up.body);
    let properties = &up.body["properties"];
    assert_eq!(
        properties["agent"],
        json!({"connected": true, "connectedAt": "2026-11-28T06:00:00.000Z", "version": "0.1.0"})
    );
    assert_eq!(
        properties["gnss"],
        json!({"fix": "3d", "sats": 12, "satsVisible": 14, "hAccM": 1.5})
    );
    let down = get(&format!("{base}/api/drones/drone-down")).await;
    assert_eq!(
        down.body["properties"]["agent"],
        json!({"connected": false, "connectedAt": "2026-11-28T05:00:00.000Z",
               "disconnectedAt": "2026-11-28T05:50:00.000Z"})
    );
    assert_eq!(down.body["properties"].get("gnss"), None::<&Value>);
    let new = get(&format!("{base}/api/drones/drone-new")).await;
    assert_eq!(new.status, 404, "{}", new.body);
}
