use mavlink::dialects::common::{
    HEARTBEAT_DATA, MavModeFlag, MavState, MavType, SYS_STATUS_DATA, SYSTEM_TIME_DATA,
};

use super::*;

fn board() -> DateTime<Utc> {
    "1970-01-01T00:10:00Z".parse().unwrap()
}

fn frame(system_id: u8, component_id: u8, message: MavMessage) -> Frame {
    Frame {
        version: MavlinkVersion::V2,
        system_id,
        component_id,
        message,
        signed: None,
    }
}

fn heartbeat(autopilot: MavAutopilot) -> MavMessage {
    MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        custom_mode: 0,
        mavtype: MavType::MAV_TYPE_QUADROTOR,
        autopilot,
        base_mode: MavModeFlag::empty(),
        system_status: MavState::MAV_STATE_ACTIVE,
        mavlink_version: 3,
    })
}

fn position(time_boot_ms: u32, lat: i32) -> MavMessage {
    MavMessage::GLOBAL_POSITION_INT(GLOBAL_POSITION_INT_DATA {
        time_boot_ms,
        lat,
        lon: -1_223_493_000,
        alt: 121_500,
        relative_alt: 100_000,
        vx: 300,
        vy: 400,
        vz: 0,
        hdg: 27_000,
    })
}

fn battery(pct: i8) -> MavMessage {
    MavMessage::SYS_STATUS(SYS_STATUS_DATA {
        battery_remaining: pct,
        ..SYS_STATUS_DATA::DEFAULT
    })
}

fn fix(outcome: Outcome) -> Fix {
    match outcome {
        Outcome::Fix(fix) => fix,
        other => panic!("expected a fix, got {other:?}"),
    }
}

#[test]
fn the_first_autopilot_heard_is_chosen_and_other_systems_are_ignored() {
    let mut vehicle = Vehicle::new(None, None);
    // A ground station's heartbeat does not choose it.
    let gcs = frame(255, 190, heartbeat(MavAutopilot::MAV_AUTOPILOT_INVALID));
    assert_eq!(vehicle.on_frame(&gcs, board()), Outcome::Nothing);
    let chosen = vehicle.on_frame(
        &frame(1, 1, heartbeat(MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA)),
        board(),
    );
    assert_eq!(
        chosen,
        Outcome::Chosen(Chosen {
            system_id: 1,
            component_id: 1,
            version: MavlinkVersion::V2
        })
    );
    // Vehicle 2's heartbeat, battery and position change nothing of vehicle 1.
    let other = frame(2, 1, heartbeat(MavAutopilot::MAV_AUTOPILOT_PX4));
    assert_eq!(vehicle.on_frame(&other, board()), Outcome::OtherSystem);
    assert_eq!(
        vehicle.on_frame(&frame(2, 1, battery(12)), board()),
        Outcome::OtherSystem
    );
    assert_eq!(
        vehicle.on_frame(&frame(2, 1, position(1, 1)), board()),
        Outcome::OtherSystem
    );
    assert_eq!(
        vehicle.on_frame(&frame(1, 1, battery(81)), board()),
        Outcome::Nothing
    );
    let own = fix(vehicle.on_frame(&frame(1, 1, position(1000, 476_205_000)), board()));
    assert_eq!(own.lat, 47.6205);
    assert_eq!(own.battery_pct, Some(81));
    // Another component of the same system (a gimbal) does not speak for the vehicle.
    assert_eq!(
        vehicle.on_frame(&frame(1, 154, position(1000, 5)), board()),
        Outcome::Nothing
    );
}

#[test]
fn a_configured_system_waits_for_its_own_heartbeat() {
    let mut vehicle = Vehicle::new(Some(2), None);
    let first = frame(1, 1, heartbeat(MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA));
    assert_eq!(vehicle.on_frame(&first, board()), Outcome::OtherSystem);
    assert_eq!(
        vehicle.on_frame(&frame(2, 1, position(1, 476_205_000)), board()),
        Outcome::Nothing
    );
    let second = frame(2, 1, heartbeat(MavAutopilot::MAV_AUTOPILOT_PX4));
    assert!(matches!(
        vehicle.on_frame(&second, board()),
        Outcome::Chosen(Chosen { system_id: 2, .. })
    ));
}

#[test]
fn system_time_gives_each_position_its_gps_time() {
    let mut vehicle = Vehicle::new(None, None);
    let autopilot = frame(1, 1, heartbeat(MavAutopilot::MAV_AUTOPILOT_PX4));
    vehicle.on_frame(&autopilot, board());
    // Before GPS time: the board clock stamps the fix.
    let early = fix(vehicle.on_frame(&frame(1, 1, position(4000, 476_205_000)), board()));
    assert_eq!(early.time, FixTime::Board(board()));
    // SYSTEM_TIME without GPS time (0) maps nothing.
    let unset = MavMessage::SYSTEM_TIME(SYSTEM_TIME_DATA {
        time_unix_usec: 0,
        time_boot_ms: 4500,
    });
    assert_eq!(
        vehicle.on_frame(&frame(1, 1, unset), board()),
        Outcome::Nothing
    );
    let time = MavMessage::SYSTEM_TIME(SYSTEM_TIME_DATA {
        time_unix_usec: 1_764_151_200_000_000, // 2025-11-26T10:00:00Z
        time_boot_ms: 60_000,
    });
    assert_eq!(
        vehicle.on_frame(&frame(1, 1, time), board()),
        Outcome::GpsTime("2025-11-26T10:00:00Z".parse().unwrap())
    );
    let later = fix(vehicle.on_frame(&frame(1, 1, position(61_250, 476_205_000)), board()));
    assert_eq!(
        later.time,
        FixTime::Gps("2025-11-26T10:00:01.250Z".parse().unwrap())
    );
    // After an autopilot reboot the boot time restarts: the old mapping is not applied.
    let rebooted = fix(vehicle.on_frame(&frame(1, 1, position(2_000, 476_205_000)), board()));
    assert_eq!(rebooted.time, FixTime::Board(board()));
}

#[test]
fn gps_raw_int_is_used_only_without_global_position_int() {
    let mut vehicle = Vehicle::new(None, None);
    vehicle.on_frame(
        &frame(1, 1, heartbeat(MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA)),
        board(),
    );
    let raw = |fix_type, time_usec| {
        frame(
            1,
            1,
            MavMessage::GPS_RAW_INT(GPS_RAW_INT_DATA {
                time_usec,
                lat: 476_205_000,
                lon: -1_223_493_000,
                alt: 120_000,
                vel: 1234,
                cog: u16::MAX,
                fix_type,
                ..GPS_RAW_INT_DATA::DEFAULT
            }),
        )
    };
    assert_eq!(
        vehicle.on_frame(&raw(GpsFixType::GPS_FIX_TYPE_NO_FIX, 0), board()),
        Outcome::NoFix
    );
    // ArduPilot: time_usec is UNIX time.
    let unix = fix(vehicle.on_frame(
        &raw(GpsFixType::GPS_FIX_TYPE_3D_FIX, 1_764_151_200_500_000),
        board(),
    ));
    assert_eq!(
        unix.time,
        FixTime::Gps("2025-11-26T10:00:00.500Z".parse().unwrap())
    );
    assert_eq!(unix.speed_mps, Some(12.34));
    assert_eq!(unix.heading_deg, None);
    assert_eq!(unix.alt_m, Some(120.0));
    // PX4: time since boot, no SYSTEM_TIME yet: the board clock.
    let boot = fix(vehicle.on_frame(&raw(GpsFixType::GPS_FIX_TYPE_2D_FIX, 7_000_000), board()));
    assert_eq!(boot.time, FixTime::Board(board()));
    vehicle.on_frame(&frame(1, 1, position(7000, 476_205_000)), board());
    assert_eq!(
        vehicle.on_frame(&raw(GpsFixType::GPS_FIX_TYPE_3D_FIX, 7_000_000), board()),
        Outcome::Nothing
    );
}

#[test]
fn converts_units_and_reads_no_fix() {
    let position = GLOBAL_POSITION_INT_DATA {
        time_boot_ms: 1000,
        lat: 476_205_000,
        lon: -1_223_493_000,
        alt: 121_500,
        relative_alt: 100_000,
        vx: 300,
        vy: 400,
        vz: 0,
        hdg: 27_000,
    };
    let time = FixTime::Board(board());
    let fix = global_position_fix(&position, Some(81), time).unwrap();
    assert_eq!(fix.lat, 47.6205);
    assert_eq!(fix.lon, -122.3493);
    assert_eq!(fix.alt_m, Some(121.5));
    assert_eq!(fix.heading_deg, Some(270.0));
    assert_eq!(fix.speed_mps, Some(5.0));
    assert_eq!(fix.battery_pct, Some(81));
    let unknown = GLOBAL_POSITION_INT_DATA {
        hdg: u16::MAX,
        ..position.clone()
    };
    assert_eq!(
        global_position_fix(&unknown, None, time)
            .unwrap()
            .heading_deg,
        None
    );
    let none = GLOBAL_POSITION_INT_DATA {
        lat: 0,
        lon: 0,
        ..position
    };
    assert_eq!(global_position_fix(&none, None, time), None);
}

fn gps_raw(fix_type: GpsFixType, satellites_visible: u8, h_acc: u32) -> MavMessage {
    MavMessage::GPS_RAW_INT(GPS_RAW_INT_DATA {
        time_usec: 1_764_151_200_500_000,
        fix_type,
        lat: 476_205_000,
        lon: -1_223_493_000,
        alt: 120_000,
        // HDOP 0.9: not an accuracy, never published as one.
        eph: 90,
        epv: 150,
        vel: 1234,
        cog: 9000,
        satellites_visible,
        h_acc,
        ..GPS_RAW_INT_DATA::DEFAULT
    })
}

#[test]
fn gps_raw_int_health_rides_on_global_position_int_while_recent() {
    let mut vehicle = Vehicle::new(None, None);
    let autopilot = frame(1, 1, heartbeat(MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA));
    vehicle.on_frame(&autopilot, board());
    // No GPS_RAW_INT yet: no health.
    let bare = fix(vehicle.on_frame(&frame(1, 1, position(1000, 476_205_000)), board()));
    assert_eq!(bare.gnss, Gnss::default());
    let raw = gps_raw(GpsFixType::GPS_FIX_TYPE_RTK_FIXED, 14, 1500);
    assert_eq!(
        vehicle.on_frame(&frame(1, 1, raw), board()),
        Outcome::Nothing
    );
    let expected = Gnss {
        fix: Some(FixType::RtkFixed),
        sats: None,
        sats_visible: Some(14),
        h_acc_m: Some(1.5),
    };
    let at = |offset: TimeDelta| board() + offset;
    let mut position_at =
        |offset| fix(vehicle.on_frame(&frame(1, 1, position(2000, 476_205_000)), at(offset))).gnss;
    assert_eq!(position_at(TimeDelta::zero()), expected);
    assert_eq!(position_at(HEALTH_MAX_AGE), expected);
    // Older than the bound, or a board clock that stepped back: left out.
    assert_eq!(
        position_at(HEALTH_MAX_AGE + TimeDelta::milliseconds(1)),
        Gnss::default()
    );
    assert_eq!(position_at(TimeDelta::seconds(-1)), Gnss::default());
}

#[test]
fn gps_raw_int_health_follows_common_xml() {
    use GpsFixType::*;
    // GPS_FIX_TYPE entries of common.xml and what they are on the wire.
    let table = [
        (GPS_FIX_TYPE_NO_FIX, Some(FixType::None)),
        (GPS_FIX_TYPE_2D_FIX, Some(FixType::Fix2d)),
        (GPS_FIX_TYPE_3D_FIX, Some(FixType::Fix3d)),
        (GPS_FIX_TYPE_DGPS, Some(FixType::Dgps)),
        (GPS_FIX_TYPE_RTK_FLOAT, Some(FixType::RtkFloat)),
        (GPS_FIX_TYPE_RTK_FIXED, Some(FixType::RtkFixed)),
        // "Static fixed, typically used for base stations": no type of ours.
        (GPS_FIX_TYPE_STATIC, None),
        // "PPP, 3D position".
        (GPS_FIX_TYPE_PPP, Some(FixType::Fix3d)),
    ];
    for (fix_type, expected) in table {
        let MavMessage::GPS_RAW_INT(gps) = gps_raw(fix_type, 9, 2500) else {
            unreachable!()
        };
        let health = gnss_health(&gps);
        assert_eq!(health.fix, expected, "{fix_type:?}");
        assert_eq!(health.sats_visible, Some(9));
        assert_eq!(
            health.sats, None,
            "the message counts visible satellites only"
        );
        assert_eq!(health.h_acc_m, Some(2.5));
    }
    // "No GPS connected": nothing of the message is health.
    let MavMessage::GPS_RAW_INT(gps) = gps_raw(GPS_FIX_TYPE_NO_GPS, 9, 2500) else {
        unreachable!()
    };
    assert_eq!(gnss_health(&gps), Gnss::default());
    // satellites_visible UINT8_MAX is unknown; h_acc 0 is unset (MAVLink 1, or a sender
    // without the extension); eph (HDOP) is never an accuracy.
    let MavMessage::GPS_RAW_INT(gps) = gps_raw(GPS_FIX_TYPE_3D_FIX, u8::MAX, 0) else {
        unreachable!()
    };
    assert_eq!(
        gnss_health(&gps),
        Gnss {
            fix: Some(FixType::Fix3d),
            ..Gnss::default()
        }
    );
}

#[test]
fn a_gps_raw_int_position_carries_its_own_health() {
    let mut vehicle = Vehicle::new(None, None);
    let autopilot = frame(1, 1, heartbeat(MavAutopilot::MAV_AUTOPILOT_PX4));
    vehicle.on_frame(&autopilot, board());
    let raw = frame(1, 1, gps_raw(GpsFixType::GPS_FIX_TYPE_DGPS, 11, 800));
    let own = fix(vehicle.on_frame(&raw, board()));
    assert_eq!(own.gnss.fix, Some(FixType::Dgps));
    assert_eq!(own.gnss.sats_visible, Some(11));
    assert_eq!(own.gnss.h_acc_m, Some(0.8));
}
