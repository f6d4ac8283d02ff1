//! The plan as an operator reads it.

use std::fmt::Write as _;

use super::cosmos::PartitionsBy;
use super::dps::duration_text;
use super::{Fleet, Limits, Plan, Prices};

/// The plan as text: what to provision, then the month's cost with the prices' and the
/// limits' sources.
pub fn text(fleet: &Fleet, plan: &Plan, prices: &Prices, limits: &Limits) -> String {
    let mut s = String::new();
    let money = |v: f64| format!("{v:>12.2} {}", prices.currency);
    let interval = fleet.report_interval.as_secs_f64();
    let _ = writeln!(
        s,
        "{} drones, a position every {interval} s{}{}{}, Cosmos DB in {} region(s)",
        fleet.drones,
        if fleet.publish_every > fleet.report_interval {
            format!(
                ", published in batches every {} s",
                fleet.publish_every.as_secs_f64()
            )
        } else {
            String::new()
        },
        if fleet.min_write_interval.is_zero() {
            String::new()
        } else {
            format!(
                ", each written at most every {} s",
                fleet.min_write_interval.as_secs_f64()
            )
        },
        match &fleet.history {
            Some(h) => format!(
                ", history kept {} in segments of {}",
                duration_text(h.kept.as_secs_f64()),
                duration_text(h.segment_span.as_secs_f64())
            ),
            None => String::new(),
        },
        fleet.regions.max(1),
    );
    let i = &plan.iothub;
    let _ = writeln!(
        s,
        "\nIoT Hub        {} hub(s) of {} x {}  ({:.0} messages/day, {:.0} sends/s)",
        i.hubs, i.units, i.tier, i.messages_per_day, i.sends_per_sec,
    );
    match (&plan.control_plane, fleet.control_plane) {
        (Some(c), Some(assumed)) => {
            let m = &c.per_drone;
            let _ = writeln!(
                s,
                "               standard tier: the agent reads and reports its device twin, which basic lacks\n\
                 twin/methods   {:.0} messages/drone-day: {:.0} twin reads ({} connections), {:.0} reported\n\
                 \x20              patches, {:.0} for {} desired change(s), {:.0} for {} method call(s);\n\
                 \x20              {:.1} % of the messages, {:.1} % of the hubs' daily quota;\n\
                 \x20              {:.2} {} a month more than telemetry alone (--control-plane off)",
                m.total,
                m.twin_reads,
                assumed.reconnections,
                m.reported_patches,
                m.desired_changes,
                assumed.desired_changes,
                m.methods,
                assumed.methods,
                100.0 * c.share_of_messages,
                100.0 * c.share_of_quota,
                c.added_monthly_cost,
                prices.currency,
            );
        }
        _ if i.tier.starts_with('B') => {
            let _ = writeln!(
                s,
                "               basic tier: telemetry only, no twin or methods (--control-plane off)"
            );
        }
        _ => {}
    }
    let e = &plan.eventhubs;
    let _ = writeln!(
        s,
        "Event Hubs     {} partitions per hub, set when the hub is created:\n\
         \x20              {}",
        e.partitions,
        e.reason.text(e, limits)
    );
    let _ = writeln!(
        s,
        "cloud-writer   {} replicas per hub ({:.2} cores in all at the steady load)",
        plan.writers.replicas, plan.writers.cores
    );
    let d = &plan.dps;
    let _ = writeln!(
        s,
        "DPS            {} instance(s), {:.0} registrations/min: after a mass reset the fleet is\n\
         \x20              back in {} when every drone registers again, in {} when drones\n\
         \x20              keep their assignment (assignment.json; the hubs take {:.0} new connections/s)",
        d.instances,
        d.registrations_per_minute,
        duration_text(d.onboarding_secs),
        duration_text(d.reconnect_secs),
        d.connections_per_sec,
    );
    let c = &plan.cosmos;
    let _ = writeln!(
        s,
        "Cosmos DB      {:.0} RU/s provisioned (writes {:.0} RU/s, reads {:.0} RU/s), {:.2} GB",
        c.ru_per_sec, c.write_ru_per_sec, fleet.read_ru_per_sec, c.storage_gb
    );
    let p = &limits.cosmos_partitions;
    let _ = writeln!(
        s,
        "               {} physical partitions, set by its {} ({:.0} RU/s and {:.0} GB each)",
        c.physical_partitions,
        match c.partitions_by {
            PartitionsBy::Throughput => "throughput",
            PartitionsBy::Storage => "storage",
        },
        p.ru_per_partition,
        p.gb_per_partition
    );
    if c.needs_support_request {
        let _ = writeln!(
            s,
            "               WARNING: past {:.0} RU/s per container: ask Azure support to raise it",
            limits.cosmos.max_ru_per_container
        );
    }
    if let Some(h) = &c.history {
        let _ = writeln!(
            s,
            "history        {:.0} positions per segment, {} write(s) each, {:.0} bytes, {:.2} RU;\n\
             \x20              per drone-day {:.0} RU and {:.0} KB ({:.3} RU and {:.0} bytes a position)",
            h.positions_per_segment,
            h.writes_per_segment,
            h.segment_bytes,
            h.ru_per_segment,
            h.ru_per_drone_day,
            h.bytes_per_drone_day / 1024.0,
            h.ru_per_position,
            h.bytes_per_position,
        );
    }
    let d = &plan.per_drone;
    let _ = writeln!(
        s,
        "per drone      {:.0} telemetry messages/day, {:.0} writes/hour, {:.0} RU/hour",
        d.messages_per_day, d.writes_per_hour, d.ru_per_hour
    );
    let m = &plan.monthly_cost;
    let _ = writeln!(s, "\nper month");
    let _ = writeln!(s, "  IoT Hub                {}", money(m.iothub));
    let _ = writeln!(s, "  Cosmos DB throughput   {}", money(m.cosmos_throughput));
    let _ = writeln!(s, "  Cosmos DB storage      {}", money(m.cosmos_storage));
    let _ = writeln!(s, "  total                  {}", money(m.total));
    let _ = writeln!(
        s,
        "  (the writers' compute is not priced: {} replicas per hub)",
        plan.writers.replicas
    );
    let _ = writeln!(
        s,
        "\nprices: IoT Hub {} (read {}), metering {} (read {}); Cosmos DB {} (read {})",
        prices.iothub.provenance.source,
        prices.iothub.provenance.read,
        prices.iothub.metering.provenance.source,
        prices.iothub.metering.provenance.read,
        prices.cosmos.provenance.source,
        prices.cosmos.provenance.read
    );
    let sources: Vec<String> = limits
        .sources()
        .iter()
        .map(|(name, p)| format!("{name} {} (read {})", p.source, p.read))
        .collect();
    let _ = writeln!(s, "limits: {}", sources.join("; "));
    s
}
