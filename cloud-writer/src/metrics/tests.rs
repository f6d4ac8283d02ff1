//! The metrics' exposition and the liveness rule.

use super::*;

#[test]
fn exposition_names_every_metric() {
    let m = Metrics::new();
    m.received();
    m.written(DocumentKind::Latest);
    m.dropped(DropReason::Stale);
    m.invalid(telemetry::wire::InvalidReason::Json);
    m.cosmos_op(429, 3200);
    m.request_units("0", DocumentKind::Latest, 5.5);
    m.set_throttled("0", 3);
    m.set_ack_lag("mqtt", 2);
    m.set_partition_owned("3", true);
    m.set_partition_owned("1", false);
    m.ownership_change("3", OwnershipChange::Claimed);
    m.ownership_change("1", OwnershipChange::Released);
    m.set_lag_events("2", 17);
    m.read_again("2");
    m.lateness(Duration::from_millis(20), Duration::from_millis(40));
    let text = m.render();
    for needle in [
        "cloud_writer_messages_received_total 1",
        "cloud_writer_documents_written_total{kind=\"latest\"} 1",
        "cloud_writer_messages_dropped_total{reason=\"stale\"} 1",
        "cloud_writer_messages_dropped_total{reason=\"spoofed\"} 0",
        "cloud_writer_messages_invalid_total{reason=\"json\"} 1",
        "cloud_writer_cosmos_operations_total{status=\"429\",substatus=\"3200\"} 1",
        "cloud_writer_cosmos_request_units_total{range=\"0\",kind=\"latest\"} 5.5",
        "cloud_writer_checkpoint_lag{partition=\"mqtt\"} 2",
        "cloud_writer_lateness_device_to_written_seconds_count 1",
        "cloud_writer_eventhubs_partition_owned{partition=\"3\"} 1",
        "cloud_writer_eventhubs_partition_owned{partition=\"1\"} 0",
        "cloud_writer_eventhubs_ownership_changes_total{partition=\"3\",change=\"claimed\"} 1",
        "cloud_writer_eventhubs_ownership_changes_total{partition=\"1\",change=\"released\"} 1",
        "cloud_writer_eventhubs_lag_events{partition=\"2\"} 17",
        "cloud_writer_eventhubs_events_read_again_total{partition=\"2\"} 1",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    assert_eq!(m.throttled_total(), 3);
    let counts = m.counts();
    assert_eq!(counts.received, 1);
    assert_eq!(counts.finished(), 2);
}

#[test]
fn liveness_fails_without_progress_while_work_is_pending_and_recovers() {
    let m = Metrics::new();
    let stall = Duration::from_secs(5);
    let start = Instant::now();
    let at = |secs: u64| start + Duration::from_secs(secs);
    // Nothing pending: live however long nothing happens.
    assert!(m.is_live_at(stall, at(60)));
    // Work pending, no outcome: live until the stall time has passed.
    m.set_in_flight(3);
    m.written(DocumentKind::Latest);
    assert!(m.is_live_at(stall, at(60)));
    assert!(m.is_live_at(stall, at(64)));
    assert!(!m.is_live_at(stall, at(66)));
    // An outcome: live again, and the stall is measured from it.
    m.dropped(DropReason::Stale);
    assert!(m.is_live_at(stall, at(70)));
    assert!(m.is_live_at(stall, at(74)));
    assert!(!m.is_live_at(stall, at(76)));
    // Queued messages are pending work too.
    m.set_in_flight(0);
    assert!(m.is_live_at(stall, at(76)));
    m.set_source_queue_bytes(100, 100);
    assert!(!m.is_live_at(stall, at(76)));
    m.set_source_queue_bytes(0, 100);
    assert!(m.is_live_at(stall, at(76)));
}
