//! The live stream (`GET /api/drones/stream`) against the local Cosmos endpoint: a viewer
//! gets the whole fleet as a snapshot, then a drone's new position as an event after the
//! writer upserts it; a viewer that reconnects with `Last-Event-ID` gets only what it missed;
//! a hundred viewers cost Cosmos DB what one does: one snapshot query, and the feed polls of
//! one follower; and a drone flown into and out of a geofence makes exactly one `enter` and
//! one `leave`, also when the API restarts while it is inside.

mod common;

use common::sse::Viewer;
use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::RuBudget;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_get_the_fleet_then_its_moves_from_one_feed_reader() {
    let sim = CosmosSim::unthrottled().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    seed_latest(&c, &scatter(6, 3)).await;
    // A hundred viewers from this host's one address, each charged its snapshot.
    let options = ApiOptions {
        stream_max_clients_per_identity: 1000,
        ru_per_sec_per_identity: RuBudget::Off,
        ..ApiOptions::default()
    };
    let (base, _stop) = serve(c.clone(), options).await;

    let mut first = Viewer::open(&base, None).await;
    let snapshot = first.next().await;
    assert_eq!(snapshot.name, "snapshot");
    assert_eq!(snapshot.data["features"].as_array().unwrap().len(), 6);

    move_drone(&c, "drone-2", 99, (HOME.0 + 0.01, HOME.1)).await;
    let moved = first.next().await;
    assert_eq!(moved.name, "position");
    assert_eq!(moved.data["id"], "drone-2");
    assert_eq!(moved.data["properties"]["seq"], 99);
    assert_eq!(
        moved.data["geometry"]["coordinates"][0].as_f64(),
        Some(HOME.0 + 0.01)
    );
    assert!(moved.id > snapshot.id);

    // A reconnect after the move gets what followed it, no snapshot.
    move_drone(&c, "drone-4", 7, (HOME.0, HOME.1 + 0.01)).await;
    let next = first.next().await;
    let mut again = Viewer::open(&base, Some(moved.id)).await;
    let missed = again.next().await;
    assert_eq!((missed.name.as_str(), missed.id), ("position", next.id));
    assert_eq!(missed.data["id"], "drone-4");

    // A hundred more viewers: no further snapshot query, one follower's polls.
    let queries = |sim: &CosmosSim| sim.stats().operations.get("query").copied().unwrap_or(0);
    let before = queries(&sim);
    let mut viewers = Vec::new();
    for _ in 0..100 {
        let mut viewer = Viewer::open(&base, None).await;
        assert_eq!(viewer.next().await.name, "snapshot");
        viewers.push(viewer);
    }
    assert_eq!(
        queries(&sim),
        before,
        "a viewer made the API query Cosmos DB"
    );
    move_drone(&c, "drone-0", 50, HOME).await;
    for viewer in &mut viewers {
        let event = viewer.next().await;
        assert_eq!(
            (event.name.as_str(), event.data["id"].as_str()),
            ("position", Some("drone-0"))
        );
    }
}

/// Upserts `device` at `seq` and `at`, and reads the stream up to its position event: the
/// names of the events read after it that belong to the same move (its crossings, in order)
/// come back with the next call, so each call returns the crossings of the previous move.
async fn move_to(
    c: &cosmos::ContainerClient,
    viewer: &mut Viewer,
    device: &str,
    seq: u64,
    at: (f64, f64),
) -> Vec<String> {
    move_drone(c, device, seq, at).await;
    let mut before = Vec::new();
    loop {
        let event = viewer.next().await;
        match event.name.as_str() {
            "position" if event.data["id"] == device && event.data["properties"]["seq"] == seq => {
                return before;
            }
            "enter" | "leave" => before.push(format!(
                "{} {}",
                event.name,
                event.data["fence"].as_str().unwrap()
            )),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drone_flown_across_a_fence_enters_and_leaves_once_also_across_a_restart() {
    let sim = CosmosSim::unthrottled().await.unwrap();
    let cosmos = client(&sim.endpoint(), sim.key());
    let c = container(&cosmos, "positions").await;
    // A circle of 500 m around a depot 2 km east of HOME.
    let depot = (HOME.0 + 0.0266, HOME.1);
    put_circle_fence(&cosmos, "depot", depot, 500.0).await;
    move_drone(&c, "drone-9", 1, HOME).await;

    let (base, stop) = serve(c.clone(), ApiOptions::default()).await;
    let mut viewer = Viewer::open(&base, None).await;
    assert_eq!(viewer.next().await.name, "snapshot");
    // Each call returns the crossings of the move before it.
    let mut crossings = move_to(&c, &mut viewer, "drone-9", 2, depot).await;
    crossings.extend(move_to(&c, &mut viewer, "drone-9", 3, (depot.0 + 0.001, depot.1)).await);
    assert_eq!(
        crossings,
        ["enter depot"],
        "into the fence, then about inside it"
    );

    // The API restarts while the drone is inside: the new one repeats no crossing.
    stop.cancel();
    drop(viewer);
    let (base, _stop) = serve(c.clone(), ApiOptions::default()).await;
    let mut viewer = Viewer::open(&base, None).await;
    assert_eq!(viewer.next().await.name, "snapshot");
    let mut crossings = move_to(&c, &mut viewer, "drone-9", 4, (depot.0 + 0.002, depot.1)).await;
    crossings.extend(move_to(&c, &mut viewer, "drone-9", 5, HOME).await);
    assert!(
        crossings.is_empty(),
        "a move inside the fence after the restart: {crossings:?}"
    );
    let crossings = move_to(&c, &mut viewer, "drone-9", 6, (HOME.0 - 0.001, HOME.1)).await;
    assert_eq!(crossings, ["leave depot"]);
}
