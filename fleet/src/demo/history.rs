//! The demo's history as stored: the bytes of the container's history documents, one per
//! position (`kind` "history") or track segments (`kind` "segment"), read back after the
//! flight. Read once at the end: its query costs RU the run's figures do not count.

use cosmos::{
    CosmosClient, CosmosConfig, CosmosError, Credential, MasterKey, QueryRequest, QueryScope,
};
use cosmos_sim::CosmosSim;

use super::{CONTAINER, DATABASE};

/// The bytes of every history document in the demo's container, as the endpoint answers
/// them (system properties included).
pub(super) async fn stored_bytes(sim: &CosmosSim) -> Result<u64, CosmosError> {
    let key = MasterKey::from_base64(sim.key()).expect("the endpoint's key is base64");
    let client = CosmosClient::new(CosmosConfig::new(
        sim.endpoint().parse().expect("the endpoint is a URL"),
        Credential::MasterKey(key),
    ))?;
    let query = QueryRequest {
        query: "SELECT * FROM c WHERE c.kind = 'history' OR c.kind = 'segment'".into(),
        parameters: Vec::new(),
    };
    let answer = client
        .container(DATABASE, CONTAINER)
        .query(&query, QueryScope::AllRanges)
        .await?;
    Ok(answer
        .documents
        .iter()
        .map(|doc| doc.to_string().len() as u64)
        .sum())
}
