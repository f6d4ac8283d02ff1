//! The alerts as others read them: the Event Grid request equals what Microsoft's
//! `azure-eventgrid` SDK sends for the same events (both captured on a local server), and
//! a webhook request parses with the CloudEvents SDK (`cloudevents` on PyPI). Python from
//! `target/venv-alerts` (`tests/python/requirements-alerts.txt`).

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const RULES: &str = r#"{"rules":[{"name":"corridor","kind":"geofence","marginM":20},
                                  {"name":"battery","kind":"battery","belowPct":20}]}"#;

const LIMIT: Duration = Duration::from_secs(60);

/// Two drones fly in, one of them low: three alerts in one range's page or more.
async fn alerts(bench: &Bench, alerter: &Alerter) {
    bench.fly("d1", 1, west()).await;
    bench.fly("d2", 1, west()).await;
    eventually(LIMIT, "the first positions judged", || async {
        alerter.metric("alerter_changes_total").await >= 2.0
    })
    .await;
    bench.fly("d1", 2, inside()).await;
    bench
        .fly(
            "d2",
            2,
            Fix {
                battery: Some(10),
                ..inside()
            },
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_grid_request_is_the_sdks_for_the_same_events() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let capture = Capture::start().await;
    let hook = Hook::start().await;
    let rules = bench.rules(RULES);
    let topic = format!("{}/api/events", capture.base);
    let alerter = Alerter::start(
        &bench,
        "a",
        &hook,
        &rules,
        &[
            ("ALERT_WEBHOOK_URLS", ""),
            ("ALERT_EVENTGRID_ENDPOINT", &topic),
            ("ALERT_EVENTGRID_KEY", "topic-key"),
        ],
    );
    alerts(&bench, &alerter).await;
    eventually(LIMIT, "three alerts at the topic", || async {
        capture
            .requests("/api/events")
            .iter()
            .map(|r| serde_json::from_slice::<Vec<Value>>(&r.body).unwrap().len())
            .sum::<usize>()
            == 3
    })
    .await;
    let ours = capture.requests("/api/events");
    for request in &ours {
        // The SDK, sent the same events, to another path of the same server.
        let events: Value = serde_json::from_slice(&request.body).unwrap();
        let sdk_topic = format!("{}/sdk/api/events", capture.base);
        python(
            "eventgrid_send.py",
            &[&sdk_topic, "topic-key"],
            &serde_json::to_vec(&events).unwrap(),
        );
        let sdk = capture.requests("/sdk/").pop().unwrap();
        assert_eq!(request.method, sdk.method);
        assert_eq!(
            request.uri,
            sdk.uri.strip_prefix("/sdk").unwrap(),
            "path and api-version"
        );
        assert_eq!(request.headers["aeg-sas-key"], "topic-key");
        assert_eq!(
            request.headers["content-type"],
            "application/cloudevents-batch+json; charset=utf-8"
        );
        for header in ["content-type", "aeg-sas-key"] {
            assert_eq!(
                request.headers.get(header),
                sdk.headers.get(header),
                "{header}"
            );
        }
        let sdk_events: Value = serde_json::from_slice(&sdk.body).unwrap();
        assert_eq!(
            events, sdk_events,
            "the batch, event by event, member by member"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_request_parses_with_the_cloudevents_sdk() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let capture = Capture::start().await;
    let hook = Hook::start().await;
    let rules = bench.rules(RULES);
    let url = format!("{}/hook", capture.base);
    let alerter = Alerter::start(&bench, "a", &hook, &rules, &[("ALERT_WEBHOOK_URLS", &url)]);
    alerts(&bench, &alerter).await;
    eventually(LIMIT, "three webhook requests", || async {
        capture.requests("/hook").len() == 3
    })
    .await;
    for request in capture.requests("/hook") {
        let ours: Value = serde_json::from_slice(&request.body).unwrap();
        let input = json!({"headers": request.headers, "body": String::from_utf8(request.body.to_vec()).unwrap()});
        let parsed: Value = serde_json::from_str(&python(
            "cloudevent_parse.py",
            &[],
            &serde_json::to_vec(&input).unwrap(),
        ))
        .unwrap();
        for attribute in [
            "id",
            "source",
            "type",
            "subject",
            "specversion",
            "datacontenttype",
        ] {
            assert_eq!(
                parsed["attributes"][attribute], ours[attribute],
                "{attribute}"
            );
        }
        assert_eq!(
            parsed["attributes"]["time"], ours["data"]["deviceTimeMs"],
            "time"
        );
        assert_eq!(parsed["data"], ours["data"]);
    }
}
