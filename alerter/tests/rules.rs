//! A silent airborne drone and a low battery alert once each; a drone flying along a border
//! within the margin alerts once (when it went in), not per position; a landed drone that
//! goes quiet does not alert. With the agent's connection state on the latest document (as
//! the writer stores IoT Hub's connection state events): an agent that disconnected
//! mid-flight alerts once, with the disconnect's time, also across a SIGKILL and a restart;
//! one that disconnected after landing does not.

mod common;

use std::time::Duration;

use common::*;

const RULES: &str = r#"{"rules":[
    {"name":"corridor","kind":"geofence","marginM":30},
    {"name":"silent","kind":"silent","silentAfter":"2s","airborneAboveM":5},
    {"name":"battery","kind":"battery","belowPct":20}]}"#;

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_battery_and_border_alert_once_each() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let hook = Hook::start().await;
    let rules = bench.rules(RULES);
    let alerter = Alerter::start(&bench, "a", &hook, &rules, &[]);

    // The feed gives each drone's latest position: every position is judged before the
    // next is written, as positions 5 s apart are with a feed polled every 100 ms.
    let mut written = 0.0;
    let mut fly = async |d: &str, fix: Fix| {
        written += 1.0;
        bench.fly(d, written as u64, fix).await;
        eventually(LIMIT, "the position judged", || async {
            alerter.metric("alerter_changes_total").await >= written
        })
        .await;
    };
    // On the ground, so that their silence says nothing.
    let parked = |fix: Fix| Fix { alt_m: 0.0, ..fix };
    fly("border", parked(west())).await;
    fly(
        "battery",
        Fix {
            battery: Some(40),
            ..parked(west())
        },
    )
    .await;
    // Along the west border, within 30 m on both sides, after going in once.
    fly("border", parked(inside())).await;
    for (i, metres) in [-15.0, 12.0, -25.0, 20.0, -10.0, 28.0, -20.0]
        .iter()
        .enumerate()
    {
        fly("border", parked(at(FENCE_WEST + metres * LON_PER_M))).await;
        let level = [30, 19, 18, 17, 21, 16, 15][i];
        fly(
            "battery",
            Fix {
                battery: Some(level),
                ..parked(west())
            },
        )
        .await;
    }
    // Airborne, then nothing; and a landed drone that goes quiet.
    fly("lost", inside()).await;
    fly("landed", parked(west())).await;
    eventually(LIMIT, "the silent drone", || async {
        hook.of("lost").contains_key("silent")
    })
    .await;
    eventually(LIMIT, "the low battery", || async {
        hook.of("battery").contains_key("lowBattery")
    })
    .await;
    // Four more sweeps at least, for a second silent alert to show if one came.
    alerter.rounds("sweep", 4).await;
    let border = hook.of("border");
    assert_eq!(border.keys().collect::<Vec<_>>(), ["enter"], "{border:?}");
    assert_eq!(border["enter"].len(), 1);
    let battery = hook.of("battery");
    assert_eq!(
        (battery.len(), battery["lowBattery"].len()),
        (1, 1),
        "{battery:?}"
    );
    let low = hook
        .taken()
        .into_iter()
        .find(|e| e["data"]["alert"] == "lowBattery")
        .unwrap();
    assert_eq!(low["data"]["batteryPct"], 19.0);
    let lost = hook.of("lost");
    // Its first position places it inside without an alert.
    assert_eq!(lost.keys().collect::<Vec<_>>(), ["silent"], "{lost:?}");
    assert_eq!(lost["silent"].len(), 1);
    assert!(hook.of("landed").is_empty(), "{:?}", hook.of("landed"));
    assert!(hook.bad().is_empty(), "{:?}", hook.bad());
    // fleet-api lists them, newest first, from the alerter's records.
    let api = fleet_api::router(
        bench.positions.clone(),
        fleet_api::ApiOptions::default(),
        fleet_api::Access::anonymous(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(fleet_api::serve(listener, api, stop.clone()));
    let listed: serde_json::Value = reqwest::get(format!("{base}/api/alerts?limit=10"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let alerts = listed["alerts"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"));
    let kinds: Vec<&str> = alerts
        .iter()
        .map(|a| a["event"]["data"]["alert"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.len(), 3, "{listed}");
    assert_eq!(kinds[0], "silent", "the newest first: {listed}");
    assert!(
        alerts.iter().all(|a| a["outcome"] == "delivered"),
        "{listed}"
    );
    stop.cancel();
    let health = alerter.metrics.replace("/metrics", "/healthz");
    assert_eq!(reqwest::get(&health).await.unwrap().status(), 200);
    assert_eq!(
        alerter
            .metric("alerter_alerts_total{rule=\"silent\",kind=\"silent\",outcome=\"delivered\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_gone_mid_flight_alerts_once_with_its_disconnect_and_a_landed_one_not() {
    let bench = Bench::start().await;
    let hook = Hook::start().await;
    let rules = bench.rules(
        r#"{"rules":[{"name":"quiet","kind":"silent","silentAfter":"4s","airborneAboveM":5}]}"#,
    );
    let connected_at = chrono::Utc::now() - chrono::Duration::minutes(10);
    // Airborne, then its agent disconnects; landed, then its agent disconnects; airborne,
    // its agent still connected but sending nothing.
    bench.fly("dropped", 1, inside()).await;
    bench.connection("dropped", true, connected_at, 1).await;
    bench
        .fly(
            "landed",
            1,
            Fix {
                alt_m: 0.0,
                ..inside()
            },
        )
        .await;
    bench.connection("landed", true, connected_at, 1).await;
    bench.fly("mute", 1, inside()).await;
    bench.connection("mute", true, connected_at, 1).await;
    let gone = chrono::Utc::now();
    bench.connection("dropped", false, gone, 2).await;
    bench.connection("landed", false, gone, 2).await;
    // Started once every state is stored (it reads the feed from the beginning): however
    // slow the writes above, no sweep sees a drone silent before its disconnect.
    let mut alerter = Alerter::start(&bench, "a", &hook, &rules, &[]);
    eventually(LIMIT, "the silent drones", || async {
        hook.of("dropped").contains_key("silent") && hook.of("mute").contains_key("silent")
    })
    .await;
    let of = |device: &str| {
        hook.taken()
            .into_iter()
            .find(|e| e["data"]["deviceId"] == device)
            .unwrap()
    };
    let gone_text = gone.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    assert_eq!(
        of("dropped")["data"]["agentDisconnectedAt"],
        gone_text.as_str()
    );
    assert!(of("mute")["data"].get("agentDisconnectedAt").is_none());
    // Killed and restarted: the silence was told, so nothing new (a replay has the same id).
    alerter.kill();
    let alerter = Alerter::start(&bench, "a", &hook, &rules, &[]);
    eventually(LIMIT, "the ranges taken again", || async {
        alerter.metric("alerter_leases_held").await >= 4.0
    })
    .await;
    alerter.rounds("sweep", 4).await;
    for device in ["dropped", "mute"] {
        let told = hook.of(device);
        assert_eq!(told.keys().collect::<Vec<_>>(), ["silent"], "{told:?}");
        assert_eq!(told["silent"].len(), 1, "one id: {told:?}");
    }
    assert!(hook.of("landed").is_empty(), "{:?}", hook.of("landed"));
    assert!(hook.bad().is_empty(), "{:?}", hook.bad());
}
