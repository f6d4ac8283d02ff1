//! Writer replicas on the local IoT Hub's Event Hubs endpoint (`crates/hub-sim`), as real
//! `cloud-writer` processes sharing its 4 partitions through the SDK's `EventProcessor` and
//! the Cosmos checkpoint store (`crates/cosmos-sim`) or, where a test says so, the Blob
//! Storage one (Azurite), with short balancing settings
//! (interval 1 s, ownership expiry 4 s, checkpoint interval 1 s; `common/hub_rig.rs`):
//!
//! - two replicas balance 2 and 2; one killed with SIGKILL mid-stream: its partitions move to
//!   the other after the ownership expiry (the time is printed), nothing is lost and no
//!   drone's document ever goes backwards;
//! - a replica stopped with SIGTERM gives its partitions up: the other owns them within
//!   about one balancing interval, far less than the expiry;
//! - a writer restarted on the same consumer group reads again nothing after a graceful
//!   stop, and after SIGKILL at most what arrived in the last checkpoint interval.
//!
//! Positions enter the hub as it enqueues a SAS device's message (the routing the MQTT
//! side uses). The hub's own faults are in `eventhubs_faults.rs`.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};
use test_harness::eventually;

use common::hub_rig::{
    CHECKPOINT_INTERVAL, DRONES, FAST, PATIENCE, Rig, StoreKind, events_after, settled,
};
use common::replica::{Counts, Replica, newest_accepted, route_round, watch_documents};

/// Replica a reading the 4 partitions, then replica b taking 2 of them; returns both with
/// the partitions each owns, read from their `eventhubs_partition_owned` metrics.
async fn balanced_pair(rig: &Rig, env: &[(&str, &str)]) -> (Replica, Replica, Counts, Counts) {
    let a = rig.replica("writer-a", env);
    eventually(
        "replica a owning the 4 partitions",
        PATIENCE,
        async || a.counts().await,
        |c| c.owned.len() == 4,
    )
    .await;
    let b = rig.replica("writer-b", env);
    let (on_a, on_b) = eventually(
        "replicas a and b owning 2 partitions each",
        PATIENCE,
        async || (a.counts().await, b.counts().await),
        |(a, b)| a.owned.len() == 2 && b.owned.len() == 2 && a.owned.is_disjoint(&b.owned),
    )
    .await;
    (a, b, on_a, on_b)
}

/// Which replica takes over a stopped one's partitions, and how fast.
enum Stop {
    Kill,
    Term,
}

/// Two balanced replicas under a stream; a is stopped mid-stream; b takes its partitions,
/// and reads exactly the events after a's checkpoints: nothing lost, no document backwards.
/// Returns how long the move took.
async fn replica_stops_mid_stream(how: Stop, env: &[(&str, &str)], store: StoreKind) -> Duration {
    let rig = Rig::with_store(0, store).await;
    let (mut a, b, on_a, on_b) = balanced_pair(&rig, env).await;
    let (stop_stream, stream) = rig.stream(1);
    let (stop_watch, watch) = watch_documents(rig.sim.endpoint());
    let before = eventually(
        "both replicas writing",
        PATIENCE,
        async || (a.counts().await, b.counts().await),
        |(a, b)| a.written >= 200 && b.written >= 200,
    )
    .await;
    let stopped = Instant::now();
    match how {
        Stop::Kill => a.kill(),
        Stop::Term => {
            a.stop(PATIENCE).await;
        }
    }
    let exited = stopped.elapsed();
    // a writes nothing more: its checkpoints are where b starts reading its partitions.
    let checkpoints = rig.checkpoints().await;
    eventually(
        "replica b owning the 4 partitions",
        PATIENCE,
        async || b.counts().await,
        |c| c.owned.len() == 4,
    )
    .await;
    let moved = stopped.elapsed();
    eprintln!(
        "partitions {:?} moved from replica a to b {:.2} s after a was {} ({:.2} s to exit); settings {env:?}",
        on_a.owned,
        moved.as_secs_f64(),
        match how {
            Stop::Kill => "killed (SIGKILL)",
            Stop::Term => "stopped (SIGTERM)",
        },
        exited.as_secs_f64()
    );
    // The stream goes on through b alone: 1,000 more positions.
    let at_move = rig.enqueued();
    eventually(
        "1,000 more positions after the move",
        PATIENCE,
        async || rig.enqueued(),
        |n| *n >= at_move + 1_000,
    )
    .await;
    stop_stream.cancel();
    stream.await.unwrap();

    let (expected, accepted) = newest_accepted(&rig.hub);
    assert_eq!(expected.len(), DRONES);
    let events = rig.events();
    let on_b_reads = events_after(&events, &on_b.owned, &HashMap::new());
    let after_checkpoints = events_after(&events, &on_a.owned, &checkpoints);
    let counts = settled(&rig, &b, on_b_reads + after_checkpoints, &expected).await;
    stop_watch.cancel();
    let (reads, backwards) = watch.await.unwrap();
    eprintln!(
        "hub accepted {accepted}; replica a had settled {} when stopped (its checkpoints cover {} events); replica b {counts:?}; documents read {reads} times",
        before.0.settled(),
        accepted - on_b_reads - after_checkpoints
    );
    // b read its own partitions whole and a's from a's checkpoints on, each event once.
    assert_eq!(
        counts.received,
        on_b_reads + after_checkpoints,
        "{counts:?}"
    );
    assert!(
        backwards.is_empty(),
        "documents went backwards: {backwards:?}"
    );
    assert!(reads >= 10, "the documents were read {reads} times only");
    let mut b = b;
    b.stop(PATIENCE).await;
    rig.shutdown().await;
    moved
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_partitions_move_and_nothing_is_lost() {
    replica_stops_mid_stream(Stop::Kill, &FAST, StoreKind::Cosmos).await;
}

/// The same with the checkpoints and ownerships in Blob Storage (Azurite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_blob_checkpoints_a_killed_replicas_partitions_move_and_nothing_is_lost() {
    replica_stops_mid_stream(Stop::Kill, &FAST, StoreKind::Blob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_gives_its_partitions_up_before_they_expire() {
    gives_up_before_expiry(StoreKind::Cosmos).await;
}

/// The same with the ownerships in Blob Storage (Azurite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_blob_checkpoints_a_stopped_replica_gives_its_partitions_up_before_they_expire() {
    gives_up_before_expiry(StoreKind::Blob).await;
}

/// A replica stopped with SIGTERM mid-stream: its partitions move within the ownership
/// expiry, which only its release can do.
async fn gives_up_before_expiry(store: StoreKind) {
    // A long expiry, so that a move within it can only be the release.
    let expiry = Duration::from_secs(20);
    let env = [
        ("EVENTHUBS_LOAD_BALANCING_INTERVAL", "1s"),
        ("EVENTHUBS_OWNERSHIP_EXPIRY", "20s"),
        ("EVENTHUBS_CHECKPOINT_INTERVAL", "1s"),
    ];
    let moved = replica_stops_mid_stream(Stop::Term, &env, store).await;
    assert!(
        moved < expiry,
        "the partitions moved after {moved:?}, not before the ownership expiry ({expiry:?})"
    );
}

/// A writer writes a stream and is stopped (`how`) once it has received every event (and,
/// before SIGTERM, given each a final outcome); a new writer starts on the same consumer
/// group and reads exactly the events after the first one's checkpoints, all of which the
/// first had received: its replays. Returns them, and how many events the first writer
/// received in the last `window` before the stop (sampled from its metrics).
async fn restart(how: Stop, env: &[(&str, &str)], window: Duration) -> (u64, u64) {
    let rig = Rig::start(0).await;
    let mut first = rig.replica("writer-1", env);
    eventually(
        "the first writer owning the 4 partitions",
        PATIENCE,
        async || first.counts().await,
        |c| c.owned.len() == 4,
    )
    .await;
    let (stop_stream, stream) = rig.stream(1);
    // The first writer's received count over time.
    let mut received: Vec<(Instant, u64)> = Vec::new();
    eventually(
        "the first writer writing 4,000 positions (10 s of the stream)",
        PATIENCE,
        async || {
            let counts = first.counts().await;
            received.push((Instant::now(), counts.received));
            counts
        },
        |c| c.written >= 4_000,
    )
    .await;
    stop_stream.cancel();
    let last_seq = stream.await.unwrap();
    let enqueued = rig.enqueued();
    eventually(
        "the first writer having received every event (and, before SIGTERM, settled them)",
        PATIENCE,
        async || {
            let counts = first.counts().await;
            received.push((Instant::now(), counts.received));
            counts
        },
        |c| c.received == enqueued && (matches!(how, Stop::Kill) || c.settled() == enqueued),
    )
    .await;
    let stopped = Instant::now();
    match how {
        Stop::Kill => first.kill(),
        Stop::Term => first.stop(PATIENCE).await,
    }
    let before_window = received
        .iter()
        .rev()
        .find(|(at, _)| *at + window <= stopped)
        .map_or(0, |(_, n)| *n);
    let recent = enqueued - before_window;
    let checkpoints = rig.checkpoints().await;
    let events = rig.events();
    let partitions: BTreeSet<String> = events.keys().cloned().collect();
    let replays = events_after(&events, &partitions, &checkpoints);

    // The second writer, and one more round of new positions.
    let second = rig.replica("writer-2", env);
    route_round(&rig.hub, DRONES, last_seq + 1);
    let (expected, accepted) = newest_accepted(&rig.hub);
    let counts = settled(&rig, &second, replays + DRONES as u64, &expected).await;
    let read_again = counts.received - DRONES as u64;
    eprintln!(
        "hub accepted {accepted}; after {} the second writer read {} events: {read_again} again (the first writer received {recent} in the last {window:?} before the stop), {DRONES} new",
        match how {
            Stop::Kill => "SIGKILL",
            Stop::Term => "SIGTERM",
        },
        counts.received
    );
    assert_eq!(read_again, replays, "{counts:?}");
    let mut second = second;
    second.stop(PATIENCE).await;
    rig.shutdown().await;
    (read_again, recent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_graceful_stop_nothing_is_read_again() {
    // Checkpoints at an hour: only the stop's last checkpoint can spare the replays.
    let env = [
        ("EVENTHUBS_LOAD_BALANCING_INTERVAL", "1s"),
        ("EVENTHUBS_OWNERSHIP_EXPIRY", "4s"),
        ("EVENTHUBS_CHECKPOINT_INTERVAL", "1h"),
    ];
    let (read_again, _) = restart(Stop::Term, &env, CHECKPOINT_INTERVAL).await;
    assert_eq!(read_again, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_at_most_the_last_checkpoint_interval_is_read_again() {
    // What the first writer received in the last checkpoint interval, and 1 s more for
    // those events' outcomes and the checkpoint's write on busy cores.
    let window = CHECKPOINT_INTERVAL + Duration::from_secs(1);
    let (read_again, recent) = restart(Stop::Kill, &FAST, window).await;
    assert!(
        read_again <= recent,
        "{read_again} events read again, more than the {recent} received in the last {window:?}"
    );
}
