//! The writer with Entra ID tokens only (`COSMOS_AUTH=entra`, AKS workload identity: a
//! federated service-account token exchanged at the local issuer) against a local endpoint
//! that refuses keys (local authentication disabled) and grants data roles by principal:
//! - positions are written with the token;
//! - the role assignment removed mid-stream holds the stream (403: nothing written or
//!   acknowledged, the broker keeps the messages), and assigned again, the writer resumes
//!   by itself with every drone at its newest position;
//! - a cached token the service no longer takes (its clock has passed the token's expiry)
//!   is refused, a new one is asked for, and writing goes on without a restart and without
//!   losing a position.
//!
//! The credential reads its settings from the process environment: this binary's one test
//! sets it (`common::entra::workload_identity`) before any credential exists.

mod common;

use std::time::Duration;

use chrono::Utc;
use cloud_writer::{DropReason, HoldReason};
use common::entra::{WRITER, account, reader, workload_identity};
use common::hold::{hold_mid_stream, publish_and_finish};
use common::*;
use cosmos_sim::DataRole;
use entra_sim::EntraSim;
use settings::CosmosAuth;
use test_harness::Mosquitto;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_writes_with_entra_tokens_only_and_holds_while_its_role_is_missing() {
    // Tokens issued while the issuer's clock is 50 minutes behind expire 10 minutes from
    // now: long enough to be cached, short enough for a service clock to pass.
    let (entra, _dir) =
        workload_identity(EntraSim::builder().clock_behind(Duration::from_secs(50 * 60))).await;
    let oid = entra.object_id(WRITER).unwrap().to_owned();
    let sim = account(&entra).await;
    sim.create_container("telemetry", "positions", "/deviceId")
        .unwrap();
    let broker = Mosquitto::start().unwrap();
    let mut settings = settings(&sim.endpoint(), &broker.url(), "positions");
    settings.cosmos_auth = Some(CosmosAuth::Entra);
    settings.cosmos_key = None;
    settings.cosmos_create_if_missing = None;
    let writer = start_writer(settings).await;
    let reader = || reader(&sim.endpoint(), "positions");

    // The role taken away and given back mid-stream.
    let (_, second) = hold_mid_stream(
        &writer,
        &broker,
        &sim,
        HoldReason::Unauthorized,
        || sim.assign_role(&oid, None).unwrap(),
        || sim.assign_role(&oid, Some(DataRole::Contributor)).unwrap(),
    )
    .await;
    assert_newest(&latest_documents(&reader()).await, &second.expected);

    // The cached token expires in the endpoint's eyes; tokens issued from now on do not.
    entra.set_clock_behind(Duration::ZERO);
    sim.set_clock_ahead(Duration::from_secs(20 * 60)).unwrap();
    let holds = writer.metrics().holds();
    let before = writer.counts().finished();
    let renewed = scenario(200, 3, Utc::now());
    let counts = publish_and_finish(&writer, &broker, "fleet-3", &renewed, before).await;
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::StaleInRetry), 0, "{counts:?}");
    assert!(
        writer.metrics().holds() > holds,
        "the expired token was never refused"
    );
    assert_eq!(writer.metrics().blocked(), None);
    assert_newest(&latest_documents(&reader()).await, &renewed.expected);
    writer.shutdown();
    writer.wait().await.unwrap();
}
