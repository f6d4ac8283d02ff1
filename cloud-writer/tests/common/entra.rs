//! The writer as AKS workload identity runs it: a local Entra ID issuer (over HTTPS) where
//! the writer's app trusts its service account's tokens, and the environment the workload
//! identity webhook sets in the pod, set in this test process. A test binary that uses it
//! has one test, which calls [`workload_identity`] before it starts anything that reads the
//! environment.

use std::collections::HashMap;
use std::path::Path;

use cloud_writer::{Secret, Settings};
use cosmos_sim::{COSMOS_AUDIENCE, CosmosSim, DataRole, EntraTrust};
use entra_sim::{App, Builder, EntraSim};
use hub_sim::{HubConfig, HubSim};
use settings::CosmosAuth;

/// The writer's app (client) id.
pub const WRITER: &str = "0f3c2a7e-5b1d-4e8a-9c6f-2d4b8e1a7c35";
/// The writer's Kubernetes service account.
pub const SERVICE_ACCOUNT: &str = "system:serviceaccount:telemetry:cloud-writer";
/// The resource of Event Hubs tokens.
pub const EVENTHUBS: &str = "https://eventhubs.azure.net";

/// An issuer, as `issuer` configures it (clock, lifetime), with the Cosmos DB and Event Hubs
/// resources and the writer's app, started over HTTPS; and this process's environment set as
/// the webhook sets a pod's. The directory holds the issuer's CA and the token file.
pub async fn workload_identity(issuer: Builder) -> (EntraSim, tempfile::TempDir) {
    let entra = issuer
        .app(App::new("cosmos").app_id_uri(COSMOS_AUDIENCE))
        .app(App::new("eventhubs").app_id_uri(EVENTHUBS))
        .app(App::new(WRITER).federated(SERVICE_ACCOUNT))
        .https()
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("issuer-ca.pem");
    std::fs::write(&ca, entra.ca_pem().unwrap()).unwrap();
    let token_file = dir.path().join("azure-identity-token");
    std::fs::write(
        &token_file,
        entra.service_account_token(SERVICE_ACCOUNT).unwrap(),
    )
    .unwrap();
    for (name, value) in [
        ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ("AZURE_AUTHORITY_HOST", entra.base_url()),
        ("AZURE_TENANT_ID", entra.tenant_id()),
        ("AZURE_CLIENT_ID", WRITER),
        ("AZURE_FEDERATED_TOKEN_FILE", token_file.to_str().unwrap()),
    ] {
        // SAFETY: the binary's one test calls this before it starts anything that reads the
        // environment (see the module's documentation).
        unsafe { std::env::set_var(name, value) }
    }
    (entra, dir)
}

/// A client of the container reading as the writer's identity, with a token issued when it
/// is built (the endpoints under test take no key).
pub fn reader(endpoint: &str, container: &str) -> cosmos::ContainerClient {
    cosmos::CosmosClient::new(cosmos::CosmosConfig::new(
        endpoint.parse().unwrap(),
        entra_credential::cosmos_credential(&settings::AccountAuth::Entra).unwrap(),
    ))
    .unwrap()
    .container("telemetry", container)
}

/// A 2-range Cosmos endpoint that takes `entra`'s tokens and no key, where the writer's
/// identity is a data contributor.
pub async fn account(entra: &EntraSim) -> CosmosSim {
    let oid = entra.object_id(WRITER).unwrap();
    CosmosSim::builder()
        .partitions(2)
        .ru_per_sec(f64::INFINITY)
        .entra(EntraTrust::new(entra.issuer(), entra.tenant_id()).ca_pem(entra.ca_pem().unwrap()))
        .role_assignment(oid, DataRole::Contributor)
        .local_auth(false)
        .start()
        .await
        .unwrap()
}

/// The local hub playing an Event Hubs namespace that takes `entra`'s tokens and no shared
/// access signature, and a 2-range Cosmos endpoint with local authentication disabled where
/// the writer's identity is a data contributor, with the containers `hub` and
/// `checkpoints`; the hub's state in `dir`.
pub async fn namespace_and_account(entra: &EntraSim, dir: &Path) -> (HubSim, CosmosSim) {
    let mut config = HubConfig::new(dir.join("hub"));
    config.entra = Some(hub_sim::EntraTrust {
        issuer: entra.issuer(),
        tenant_id: entra.tenant_id().to_owned(),
        ca_pem: entra.ca_pem().map(str::to_owned),
        roles: HashMap::new(),
        local_auth: false,
    });
    let hub = HubSim::start(config).await.unwrap();
    let sim = account(entra).await;
    sim.create_container("telemetry", "hub", "/deviceId")
        .unwrap();
    sim.create_container("telemetry", "checkpoints", "/scope")
        .unwrap();
    (hub, sim)
}

/// The writer's settings for [`namespace_and_account`]: Entra ID tokens for both, the
/// namespace as `sb://localhost/{hub}` dialled at the hub's AMQP port, from the earliest event.
pub fn token_settings(hub: &HubSim, sim: &CosmosSim) -> Settings {
    let mut settings = super::settings(&sim.endpoint(), "mqtt://unused:1883", "hub");
    settings.cosmos_auth = Some(CosmosAuth::Entra);
    settings.cosmos_key = None;
    settings.cosmos_create_if_missing = None;
    settings.writer_source = Some(Secret::new(format!(
        "sb://localhost/{}",
        hub.config().hub_name
    )));
    settings.eventhubs_custom_endpoint =
        Some(format!("amqp://{}", hub.amqp_addr()).parse().unwrap());
    settings.eventhubs_start_position = Some("earliest".into());
    settings
}
