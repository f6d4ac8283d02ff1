//! What the tests against the local endpoint share: a client, the test container, its
//! documents and upserts, and what the endpoint stored.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use cosmos::{
    BulkOperation, ContainerClient, ContainerSetup, CosmosClient, CosmosConfig, Credential,
    MasterKey, OperationType,
};
use cosmos_sim::CosmosSim;
use serde_json::json;

/// The longest any test may take.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(300);

pub const DB: &str = "telemetry";
pub const COLL: &str = "positions";

pub fn client_with_key(sim: &CosmosSim, key: &str) -> CosmosClient {
    let config = CosmosConfig::new(
        sim.endpoint().parse().unwrap(),
        Credential::MasterKey(MasterKey::from_base64(key).unwrap()),
    );
    CosmosClient::new(config).unwrap()
}

/// The test container [`COLL`] on `sim`, created when missing.
pub async fn setup(sim: &CosmosSim) -> ContainerClient {
    positions_container(&client_with_key(sim, sim.key()), COLL).await
}

/// Container `name` of database [`DB`], keyed on `/deviceId` with `/location` spatially
/// indexed, created when missing.
pub async fn positions_container(client: &CosmosClient, name: &str) -> ContainerClient {
    let container = client.container(DB, name);
    container
        .create_if_missing(&ContainerSetup {
            location_path: Some("/location".into()),
            ..ContainerSetup::new("/deviceId")
        })
        .await
        .unwrap();
    container
}

pub fn doc(device: &str, id: &str, time_ms: u64, seq: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": id,
        "deviceId": device,
        "deviceTimeMs": time_ms,
        "seq": seq,
        "location": {"type": "Point", "coordinates": [8.5 + seq as f64 * 1e-4, 47.3]},
        "altitudeM": 420.5,
        "speedMps": 12.25,
    }))
    .unwrap()
}

pub fn upsert(device: String, id: String, context: u64) -> BulkOperation<u64> {
    BulkOperation {
        kind: OperationType::Upsert,
        body: Bytes::from(doc(&device, &id, 1_000, context)),
        partition_key: device.into(),
        id: None,
        if_match: None,
        context,
    }
}

/// Documents stored in the container's live partitions.
pub fn stored(sim: &CosmosSim) -> usize {
    let stats = sim.stats();
    let container = stats.container(DB, COLL).expect("container exists");
    container
        .partitions
        .iter()
        .filter(|p| p.live)
        .map(|p| p.documents)
        .sum()
}
