//! The writer as AKS workload identity runs it: a local Entra ID issuer (over HTTPS) where
//! the writer's app trusts its service account's tokens, and the environment the workload
//! identity webhook sets in the pod, set in this test process. A test binary that uses it
//! has one test, which calls [`workload_identity`] before it starts anything that reads the
//! environment.

use cosmos_sim::COSMOS_AUDIENCE;
use entra_sim::{App, Builder, EntraSim};

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
