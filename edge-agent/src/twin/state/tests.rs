//! The control plane's state machine on paused time.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::{Instant, advance};

use super::*;
use crate::status::{AgentStatus, SettingsStatus};
use crate::transport::{Desired, Twin};

const S: Duration = Duration::from_secs(1);
const MIN_INTERVAL: Duration = Duration::from_secs(60);

fn local() -> Cadence {
    Cadence::new(5 * S, None).unwrap()
}

fn state(report_interval_ms: u64) -> StateReport {
    let mut status = AgentStatus::default();
    status.version = "1.0.0";
    status.settings = SettingsStatus {
        report_interval_ms,
        publish_every_ms: report_interval_ms,
        ..SettingsStatus::default()
    };
    StateReport::new(&status, 10 * S)
}

fn desired(version: u64, properties: Value) -> Desired {
    Desired {
        version,
        properties: properties.as_object().unwrap().clone(),
    }
}

fn twin(version: u64, properties: Value, reported: Value) -> Twin {
    Twin {
        desired: desired(version, properties),
        reported: reported.as_object().unwrap().clone(),
    }
}

fn machine(stored: Stored, remote: RemoteConfig) -> TwinState {
    TwinState::new(local(), remote, stored, MIN_INTERVAL)
}

/// Polls once; a patch is sent as request `rid`.
fn send(twin: &mut TwinState, rid: Rid, report: &StateReport) -> Option<Value> {
    match twin.poll(Instant::now(), report)? {
        Request::Patch(patch) => {
            twin.patch_sent(rid);
            Some(patch)
        }
        Request::ReadTwin => panic!("a read, not a patch"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_desired_change_is_applied_and_acknowledged_at_once() {
    let mut twin_state = machine(Stored::default(), RemoteConfig::On);
    twin_state.connected(Instant::now());
    // Nothing goes before the twin read answers.
    assert_eq!(twin_state.poll(Instant::now(), &state(5000)), None);
    let change = twin_state.on_twin(&twin(1, json!({}), json!({})));
    assert_eq!(
        change,
        Change {
            cadence: None,
            save: true
        }
    );
    // The first report: the state.
    let first = send(&mut twin_state, 1, &state(5000)).unwrap();
    assert_eq!(first["agent"]["version"], "1.0.0");
    assert!(first.get("reportInterval").is_none());
    twin_state.on_reported(1, 204, Instant::now());

    advance(S).await;
    let change = twin_state.on_desired(&desired(2, json!({"reportInterval": 1})));
    assert_eq!(change.cadence, Some(Cadence::new(S, None).unwrap()));
    assert!(change.save);
    assert_eq!(twin_state.stored().version, Some(2));
    // The acknowledgement goes at once, not held by the report interval, with the state
    // that changed with it.
    let ack = send(&mut twin_state, 2, &state(1000)).unwrap();
    assert_eq!(
        ack["reportInterval"],
        json!({"value": 1, "ac": 200, "av": 2, "ad": "applied"})
    );
    assert_eq!(ack["settings"]["reportInterval"], 1);
    // One patch at a time; once confirmed, nothing more.
    assert_eq!(twin_state.poll(Instant::now(), &state(1000)), None);
    twin_state.on_reported(2, 204, Instant::now());
    assert_eq!(twin_state.poll(Instant::now(), &state(1000)), None);
    assert_eq!(
        twin_state.wake_at(Instant::now()),
        Some(Instant::now() + MIN_INTERVAL)
    );
}

#[tokio::test(start_paused = true)]
async fn a_change_made_offline_is_applied_at_the_next_connection() {
    let kept = {
        let mut before = machine(Stored::default(), RemoteConfig::On);
        before.connected(Instant::now());
        before.on_twin(&twin(3, json!({"reportInterval": 2}), json!({})));
        before.stored().clone()
    };
    // Restarted: the kept setting holds before any connection.
    let mut twin_state = machine(kept.clone(), RemoteConfig::On);
    assert_eq!(twin_state.cadence().report_interval(), 2 * S);
    twin_state.connected(Instant::now());
    let change = twin_state.on_twin(&twin(5, json!({"reportInterval": 1}), json!({})));
    assert_eq!(change.cadence.unwrap().report_interval(), S);
    let patch = send(&mut twin_state, 1, &state(1000)).unwrap();
    assert_eq!(patch["reportInterval"]["av"], 5);

    // The same version again is nothing new; nor is an older patch.
    let mut same = machine(twin_state.stored().clone(), RemoteConfig::On);
    same.connected(Instant::now());
    assert_eq!(
        same.on_twin(&twin(5, json!({"reportInterval": 1}), json!({}))),
        Change::default()
    );
    assert_eq!(
        same.on_desired(&desired(4, json!({"reportInterval": 9}))),
        Change::default()
    );
}

#[tokio::test(start_paused = true)]
async fn an_acknowledgement_the_twin_holds_is_not_sent_again() {
    let mut before = machine(Stored::default(), RemoteConfig::On);
    before.connected(Instant::now());
    before.on_twin(&twin(3, json!({"reportInterval": 2}), json!({})));
    let held = serde_json::to_value(&before.stored().acks[&Property::ReportInterval]).unwrap();

    let mut twin_state = machine(before.stored().clone(), RemoteConfig::On);
    twin_state.connected(Instant::now());
    twin_state.on_twin(&twin(
        3,
        json!({"reportInterval": 2}),
        json!({"reportInterval": held}),
    ));
    let patch = send(&mut twin_state, 1, &state(2000)).unwrap();
    assert!(patch.get("reportInterval").is_none(), "{patch}");
}

#[tokio::test(start_paused = true)]
async fn a_skipped_version_reads_the_whole_twin() {
    let mut twin_state = machine(Stored::default(), RemoteConfig::On);
    twin_state.connected(Instant::now());
    twin_state.on_twin(&twin(2, json!({}), json!({})));
    twin_state.poll(Instant::now(), &state(5000));
    twin_state.patch_sent(1);
    twin_state.on_reported(1, 204, Instant::now());

    assert_eq!(
        twin_state.on_desired(&desired(4, json!({"publishEvery": 10}))),
        Change::default()
    );
    assert_eq!(
        twin_state.poll(Instant::now(), &state(5000)),
        Some(Request::ReadTwin)
    );
    let change = twin_state.on_twin(&twin(
        4,
        json!({"reportInterval": 2, "publishEvery": 10}),
        json!({}),
    ));
    assert_eq!(
        change.cadence,
        Some(Cadence::new(2 * S, Some(10 * S)).unwrap())
    );

    // A patch that arrives while a read is under way is covered by it, or by one after it.
    twin_state.connected(Instant::now());
    assert_eq!(
        twin_state.on_desired(&desired(6, json!({"reportInterval": 3}))),
        Change::default()
    );
    twin_state.on_twin(&twin(
        5,
        json!({"reportInterval": 2, "publishEvery": 10}),
        json!({}),
    ));
    assert_eq!(
        twin_state.poll(Instant::now(), &state(2000)),
        Some(Request::ReadTwin)
    );
}

#[tokio::test(start_paused = true)]
async fn the_state_is_reported_on_change_at_most_once_per_interval() {
    let mut twin_state = machine(Stored::default(), RemoteConfig::On);
    twin_state.connected(Instant::now());
    twin_state.on_twin(&twin(1, json!({}), json!({})));
    assert!(send(&mut twin_state, 1, &state(5000)).is_some());
    twin_state.on_reported(1, 204, Instant::now());

    advance(S).await;
    // Changed, but the last report is a second old: held.
    assert_eq!(twin_state.poll(Instant::now(), &state(6000)), None);
    advance(MIN_INTERVAL - 2 * S).await;
    assert_eq!(twin_state.poll(Instant::now(), &state(6000)), None);
    advance(S).await;
    let patch = send(&mut twin_state, 2, &state(6000)).unwrap();
    assert_eq!(patch["settings"]["reportInterval"], 6);
    twin_state.on_reported(2, 204, Instant::now());
    // Unchanged: nothing however long.
    advance(10 * MIN_INTERVAL).await;
    assert_eq!(twin_state.poll(Instant::now(), &state(6000)), None);
}

#[tokio::test(start_paused = true)]
async fn what_the_hub_did_not_confirm_is_sent_again() {
    let mut twin_state = machine(Stored::default(), RemoteConfig::On);
    twin_state.connected(Instant::now());
    twin_state.on_twin(&twin(2, json!({"reportInterval": 1}), json!({})));
    assert!(send(&mut twin_state, 1, &state(1000)).unwrap()["reportInterval"].is_object());

    // The link ends before the answer: the next link sends it again.
    twin_state.disconnected();
    twin_state.connected(Instant::now());
    twin_state.on_twin(&twin(2, json!({"reportInterval": 1}), json!({})));
    assert!(send(&mut twin_state, 2, &state(1000)).unwrap()["reportInterval"].is_object());

    // No answer: sent again after the timeout.
    advance(ANSWER_TIMEOUT - S).await;
    assert_eq!(twin_state.poll(Instant::now(), &state(1000)), None);
    assert_eq!(twin_state.wake_at(Instant::now()), Some(Instant::now() + S));
    advance(S).await;
    assert!(send(&mut twin_state, 3, &state(1000)).unwrap()["reportInterval"].is_object());

    // An error answer: sent again after a while, not at once.
    twin_state.on_reported(3, 429, Instant::now());
    assert_eq!(twin_state.poll(Instant::now(), &state(1000)), None);
    advance(RETRY_AFTER).await;
    assert!(send(&mut twin_state, 4, &state(1000)).unwrap()["reportInterval"].is_object());
    twin_state.on_reported(4, 204, Instant::now());
    assert_eq!(twin_state.poll(Instant::now(), &state(1000)), None);
}

#[tokio::test(start_paused = true)]
async fn a_twin_that_never_answers_is_read_again() {
    let mut twin_state = machine(Stored::default(), RemoteConfig::On);
    twin_state.connected(Instant::now());
    assert_eq!(
        twin_state.wake_at(Instant::now()),
        Some(Instant::now() + ANSWER_TIMEOUT)
    );
    advance(ANSWER_TIMEOUT).await;
    assert_eq!(
        twin_state.poll(Instant::now(), &state(5000)),
        Some(Request::ReadTwin)
    );
}

#[tokio::test(start_paused = true)]
async fn remote_config_off_keeps_the_local_settings_and_refuses_every_change() {
    let kept = Stored {
        version: Some(3),
        overrides: {
            let mut on = machine(Stored::default(), RemoteConfig::On);
            on.connected(Instant::now());
            on.on_twin(&twin(3, json!({"reportInterval": 1}), json!({})));
            on.stored().overrides
        },
        acks: Default::default(),
    };
    let mut twin_state = machine(kept, RemoteConfig::Off);
    assert_eq!(twin_state.cadence(), local());
    twin_state.connected(Instant::now());
    let change = twin_state.on_twin(&twin(3, json!({"reportInterval": 1}), json!({})));
    assert_eq!(
        change,
        Change {
            cadence: None,
            save: false
        }
    );
    let patch = send(&mut twin_state, 1, &state(5000)).unwrap();
    assert_eq!(patch["reportInterval"]["ac"], 403);
    assert_eq!(patch["reportInterval"]["value"], 5);
    twin_state.on_reported(1, 204, Instant::now());
    let change = twin_state.on_desired(&desired(4, json!({"publishEvery": 30})));
    assert_eq!(
        change,
        Change {
            cadence: None,
            save: false
        }
    );
    let patch = send(&mut twin_state, 2, &state(5000)).unwrap();
    assert_eq!(patch["publishEvery"]["ac"], 403);
    assert!(patch.get("reportInterval").is_none());
}
