//! KEDA's `azure-eventhub` scaler on the writer's blob checkpoints
//! (`deploy/cloud-writer/keda-scaledobject.yaml`): the ScaledObject names what the
//! Deployment uses, and the lag KEDA computes from the blobs (its `blobMetadata` strategy, its
//! formula) equals the writer's own `cloud_writer_eventhubs_lag_events`, partition by
//! partition, while the writer is held behind. The blobs are listed with the storage client
//! Microsoft's Python checkpoint store ships, not with the writer's.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;
use test_harness::eventually;

use common::replica::{BlobRig, route_round};
use test_harness::manifests::{env_value, load, text};

const DRONES: usize = 20;
const PATIENCE: Duration = Duration::from_secs(60);

/// The ScaledObject's `azure-eventhub` trigger metadata and the Deployment's container.
fn manifests() -> (yaml_rust2::Yaml, yaml_rust2::Yaml) {
    let keda = load("cloud-writer/keda-scaledobject.yaml");
    let scaled = keda
        .iter()
        .find(|d| text(&d["kind"]) == "ScaledObject")
        .expect("a ScaledObject");
    let trigger = scaled["spec"]["triggers"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|t| text(&t["type"]) == "azure-eventhub")
        .expect("KEDA's azure-eventhub scaler")
        .clone();
    let deployment = load("cloud-writer/deployment.yaml")
        .into_iter()
        .find(|d| text(&d["kind"]) == "Deployment")
        .unwrap();
    assert_eq!(
        text(&scaled["spec"]["scaleTargetRef"]["name"]),
        text(&deployment["metadata"]["name"])
    );
    // Keyless: KEDA's operator signs in with workload identity.
    let auth = text(&trigger["authenticationRef"]["name"]);
    let trigger_auth = keda
        .iter()
        .find(|d| text(&d["kind"]) == "TriggerAuthentication")
        .expect("a TriggerAuthentication");
    assert_eq!(text(&trigger_auth["metadata"]["name"]), auth);
    assert_eq!(
        text(&trigger_auth["spec"]["podIdentity"]["provider"]),
        "azure-workload"
    );
    let container = deployment["spec"]["template"]["spec"]["containers"][0].clone();
    (trigger["metadata"].clone(), container)
}

#[test]
fn the_scaled_object_reads_the_checkpoints_the_deployment_writes() {
    let (keda, writer) = manifests();
    let setting = |name| env_value(&writer, name).unwrap_or_else(|| panic!("{name} unset"));
    assert_eq!(text(&keda["checkpointStrategy"]), "blobMetadata");
    assert_eq!(
        text(&keda["blobContainer"]),
        setting("CHECKPOINT_BLOB_CONTAINER")
    );
    assert_eq!(
        format!(
            "https://{}.blob.core.windows.net/",
            text(&keda["storageAccountName"])
        ),
        setting("CHECKPOINT_BLOB_ACCOUNT_URL")
    );
    assert_eq!(
        text(&keda["consumerGroup"]),
        setting("EVENTHUBS_CONSUMER_GROUP")
    );
    // KEDA builds `{eventHubNamespace}.servicebus.windows.net/{eventHubName}/...` and does not
    // lower-case them; the writer writes its names in lower case.
    let (namespace, hub) = (
        text(&keda["eventHubNamespace"]),
        text(&keda["eventHubName"]),
    );
    assert_eq!(
        format!("sb://{namespace}.servicebus.windows.net/{hub}"),
        setting("WRITER_SOURCE")
    );
    for name in [namespace, hub] {
        assert_eq!(
            name,
            name.to_lowercase(),
            "KEDA would miss {name}'s checkpoints"
        );
    }
}

/// The lag of one partition as KEDA's scaler computes it (kedacore/keda,
/// `pkg/scalers/azure_eventhub_scaler.go`, `GetUnprocessedEventCountInPartition`): none for
/// an empty partition; without a checkpoint, every event from the beginning; else the last
/// enqueued sequence number minus the checkpoint's (wrapping past `i64::MAX`).
fn keda_lag(last: i64, beginning: i64, checkpoint: Option<i64>) -> i64 {
    if last == -1 {
        return 0;
    }
    match checkpoint {
        None if (last == 0 && beginning == 0) || last != beginning => last - beginning + 1,
        None => 0,
        Some(checkpoint) if last >= checkpoint => last - checkpoint,
        Some(checkpoint) => (i64::MAX - checkpoint) + last,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_keda_reads_from_the_blobs_is_the_writers_own() {
    let (keda, _) = manifests();
    let container = text(&keda["blobContainer"]).to_owned();
    let rig = BlobRig::start().await;
    let (hub, sim, azurite) = (&rig.hub, &rig.sim, &rig.azurite);
    let writer = rig.writer("writer", &container);
    let route = |seq: u64| route_round(hub, DRONES, seq);

    // Caught up: every partition checkpointed at its end.
    route(1);
    eventually(
        "the first positions settled and checkpointed",
        PATIENCE,
        async || (writer.counts().await.settled(), writer.lag_events().await),
        |(settled, lag)| {
            *settled == DRONES as u64
                && lag.len() == hub.partitions().count()
                && lag.values().all(|l| *l == 0)
        },
    )
    .await;

    // Held behind: writes stall, so the checkpoints stay where they are while events come.
    sim.set_latency(Duration::from_secs(3600));
    for seq in 2..5 {
        route(seq);
    }
    let namespace = &hub.config().host;
    let event_hub = &hub.config().hub_name;
    // The consumer group as KEDA lower-cases it (the writer's default, `$Default`).
    let group = "$default";
    let keda_view = || {
        let blobs = common::blobs::list(azurite, &container);
        (0..hub.partitions().count())
            .map(|index| {
                let info = hub.partitions().get(index).unwrap().info();
                let name = format!("{namespace}/{event_hub}/{group}/checkpoint/{index}");
                let checkpoint = blobs
                    .get(&name)
                    .and_then(|m| m.get("sequencenumber"))
                    .map(|s| s.parse::<i64>().expect("a sequence number"));
                let lag = keda_lag(
                    info.last_sequence_number,
                    info.begin_sequence_number,
                    checkpoint,
                );
                (index.to_string(), lag)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let (keda, ours) = eventually(
        "the writer's lag to equal KEDA's",
        PATIENCE,
        async || (keda_view(), writer.lag_events().await),
        |(keda, ours)| keda == ours && keda.values().sum::<i64>() == 3 * DRONES as i64,
    )
    .await;
    assert!(keda.values().all(|l| *l > 0), "{keda:?} against {ours:?}");
}

#[test]
fn keda_counts_every_event_of_a_partition_without_checkpoint() {
    assert_eq!(keda_lag(-1, 0, None), 0);
    assert_eq!(keda_lag(9, 0, None), 10);
    assert_eq!(keda_lag(9, 0, Some(4)), 5);
    assert_eq!(keda_lag(9, 0, Some(9)), 0);
}
