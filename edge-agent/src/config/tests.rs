//! The settings resolved: defaults, the one duration form, IoT Hub, errors that say what to fix,
//! the source that must be named, gpsd's address, the environment's unknown variables, the
//! layers' order and the example file.

use super::dps::registration_id_of_machine;
use super::*;
use crate::provision::check_registration_id;
use crate::source::SourceConfig;
use settings::Layered as _;

fn base() -> Settings {
    Settings {
        position_source: Some("sim".into()),
        mqtt_url: Some("mqtt://127.0.0.1:1884".into()),
        device_id: Some("drone-1".into()),
        buffer_dir: Some("/tmp/buf".into()),
        ..Settings::default()
    }
}

#[test]
fn samples_are_published_alone_unless_publish_every_is_longer() {
    assert_eq!(base().resolve().unwrap().publish_every, None);
    let batched = Settings {
        publish_every: Some("30s".parse().unwrap()),
        ..base()
    };
    assert_eq!(
        batched.resolve().unwrap().publish_every,
        Some(Duration::from_secs(30))
    );
}

#[test]
fn plain_mqtt_with_defaults() {
    let config = base().resolve().unwrap();
    assert_eq!(config.device_id, "drone-1");
    assert_eq!(config.report_interval, Duration::from_secs(5));
    assert_eq!(config.max_fix_age, Duration::from_secs(10));
    assert_eq!(
        config.transport.endpoint,
        Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 1884
        }
    );
    assert!(matches!(config.source, SourceConfig::Sim(_)));
}

/// Every duration takes the one form of every program, from a flag, the environment
/// or the file.
#[test]
fn durations_take_the_one_form() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }
    let cli = <Cli as clap::Parser>::try_parse_from([
        "edge-agent",
        "--report-interval",
        "5s",
        "--max-fix-age",
        "500ms",
        "--reconnect-cap",
        "2m",
        "--mqtt-keep-alive",
        "30",
    ])
    .unwrap();
    let config = cli.settings.or(base()).resolve().unwrap();
    assert_eq!(config.report_interval, Duration::from_secs(5));
    assert_eq!(config.max_fix_age, Duration::from_millis(500));
    assert_eq!(config.transport.backoff.cap, Duration::from_secs(120));
    assert_eq!(config.transport.keep_alive, Duration::from_secs(30));
    let file: Settings = toml::from_str("report_interval = 2\nreconnect_base = \"250ms\"").unwrap();
    let config = file.or(base()).resolve().unwrap();
    assert_eq!(config.report_interval, Duration::from_secs(2));
    assert_eq!(config.transport.backoff.base, Duration::from_millis(250));
    let half = Settings {
        mqtt_keep_alive: Some("30.5".parse().unwrap()),
        ..base()
    };
    assert!(
        half.resolve()
            .unwrap_err()
            .to_string()
            .contains("MQTT_KEEP_ALIVE")
    );
}

#[test]
fn iothub_connection_string_selects_tls_and_sas() {
    let settings = Settings {
        mqtt_url: None,
        device_id: None,
        connection_string: Some(Secret::new(
            "HostName=hub.azure-devices.net;DeviceId=drone-9;SharedAccessKey=AAEC",
        )),
        ..base()
    };
    let config = settings.clone().resolve().unwrap();
    assert_eq!(config.device_id, "drone-9");
    assert_eq!(
        config.transport.endpoint,
        Endpoint::Tls {
            host: "hub.azure-devices.net".into(),
            port: 8883
        }
    );
    let Auth::Sas(sas) = &config.transport.auth else {
        panic!("expected SAS")
    };
    assert_eq!(sas.token_ttl, Duration::from_secs(3600));
    assert!(!format!("{config:?}").contains("AAEC"));
    assert!(!format!("{settings:?}").contains("AAEC"));

    let ws = Settings {
        iothub_transport: Some("websockets".into()),
        ..settings
    }
    .resolve()
    .unwrap();
    assert_eq!(
        ws.transport.endpoint,
        Endpoint::WebSocket {
            url: "wss://hub.azure-devices.net:443/$iothub/websocket".into()
        }
    );
}

#[test]
fn wrong_settings_name_what_to_fix() {
    let cases: Vec<(Settings, &str)> = vec![
        (
            Settings {
                position_source: Some("radar".into()),
                ..base()
            },
            "POSITION_SOURCE",
        ),
        (
            Settings {
                report_interval: Some("0".parse().unwrap()),
                ..base()
            },
            "REPORT_INTERVAL",
        ),
        (
            Settings {
                publish_every: Some("2s".parse().unwrap()),
                ..base()
            },
            "PUBLISH_EVERY",
        ),
        (
            Settings {
                buffer_max_bytes: Some(10),
                ..base()
            },
            "BUFFER_MAX_BYTES",
        ),
        (
            Settings {
                buffer_dir: None,
                ..base()
            },
            "BUFFER_DIR",
        ),
        (
            Settings {
                device_id: None,
                ..base()
            },
            "DEVICE_ID",
        ),
        (
            Settings {
                mqtt_url: Some("http://x".into()),
                ..base()
            },
            "MQTT_URL",
        ),
        (
            Settings {
                position_source: Some("mavlink".into()),
                mavlink_address: Some("carrier-pigeon:1".into()),
                ..base()
            },
            "MAVLINK_ADDRESS",
        ),
        (
            Settings {
                position_source: Some("gpsd".into()),
                mavlink_address: Some("udpin:0.0.0.0:14550".into()),
                ..base()
            },
            "MAVLINK_ADDRESS",
        ),
        (
            Settings {
                position_source: Some("mavlink".into()),
                mavlink_address: Some("udpin:0.0.0.0:14550".into()),
                gpsd_address: Some("127.0.0.1:2947".into()),
                ..base()
            },
            "GPSD_ADDRESS",
        ),
        (
            Settings {
                position_source: Some("gpsd".into()),
                sim_seed: Some(7),
                ..base()
            },
            "SIM_SEED",
        ),
        (
            Settings {
                reconnect_base: Some("10s".parse().unwrap()),
                reconnect_cap: Some("1".parse().unwrap()),
                ..base()
            },
            "RECONNECT_CAP",
        ),
        (
            Settings {
                mqtt_url: None,
                device_id: None,
                connection_string: Some(Secret::new("HostName=h;DeviceId=d")),
                ..base()
            },
            "IOTHUB_DEVICE_CONNECTION_STRING",
        ),
    ];
    for (settings, setting) in cases {
        let message = settings.resolve().unwrap_err().to_string();
        assert!(message.contains(setting), "{message} should name {setting}");
    }
    let ignored = Settings {
        position_source: Some("gpsd".into()),
        mavlink_address: Some("udpin:0.0.0.0:14550".into()),
        ..base()
    };
    let message = ignored.resolve().unwrap_err().to_string();
    assert!(
        message.contains("POSITION_SOURCE=mavlink") && message.contains("reads gpsd"),
        "{message}"
    );
}

#[test]
fn command_line_wins_over_the_file() {
    let file: Settings = toml::from_str(
        "position_source = \"gpsd\"\nreport_interval = 2.5\nbuffer_dir = \"/file\"\n",
    )
    .unwrap();
    let given = Settings {
        position_source: None,
        ..base()
    };
    let merged = given.or(file);
    let config = merged.resolve().unwrap();
    assert_eq!(config.report_interval, Duration::from_millis(2500));
    assert_eq!(config.buffer.dir, PathBuf::from("/tmp/buf"));
    assert!(matches!(config.source, SourceConfig::Gpsd { .. }));
}

#[test]
fn the_example_config_file_is_valid() {
    let text = include_str!("../../../deploy/edge-agent/edge-agent.toml");
    let file: Settings = toml::from_str(text).unwrap();
    let settings = Settings {
        connection_string: Some(Secret::new(
            "HostName=hub.azure-devices.net;DeviceId=drone-0042;SharedAccessKey=AAEC",
        )),
        ..Settings::default()
    };
    let config = settings.or(file).resolve().unwrap();
    assert_eq!(config.device_id, "drone-0042");
    assert!(matches!(config.source, SourceConfig::Mavlink { .. }));
    assert_eq!(config.report_interval, Duration::from_secs(5));
}

#[test]
fn unknown_file_keys_are_rejected() {
    assert!(toml::from_str::<Settings>("repot_interval = 5").is_err());
}

#[test]
fn a_source_must_be_named() {
    let err = Settings {
        position_source: None,
        ..base()
    }
    .resolve()
    .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Missing {
                setting: "POSITION_SOURCE",
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    for value in ["`mavlink`", "`gpsd`", "`sim` for a simulated drone"] {
        assert!(message.contains(value), "{message}");
    }
}

fn gpsd(address: Option<&str>) -> Result<SourceConfig, ConfigError> {
    Settings {
        position_source: Some("gpsd".into()),
        gpsd_address: address.map(str::to_owned),
        ..base()
    }
    .resolve()
    .map(|config| config.source)
}

#[test]
fn gpsd_address_is_typed_at_start() {
    let SourceConfig::Gpsd { address } = gpsd(Some("127.0.0.1")).unwrap() else {
        panic!("expected gpsd")
    };
    assert_eq!((address.host(), address.port()), ("127.0.0.1", 2947));
    let SourceConfig::Gpsd { address } = gpsd(None).unwrap() else {
        panic!("expected gpsd")
    };
    assert_eq!(address.to_string(), "127.0.0.1:2947");
    let SourceConfig::Gpsd { address } = gpsd(Some("[::1]:3000")).unwrap() else {
        panic!("expected gpsd")
    };
    assert_eq!((address.host(), address.port()), ("::1", 3000));
    let message = gpsd(Some("gpsd://localhost:2947")).unwrap_err().to_string();
    assert!(
        message.starts_with("GPSD_ADDRESS:") && message.ends_with("write `localhost:2947`"),
        "{message}"
    );
}

/// The binary's command line around the settings, as main.rs declares it.
fn command() -> clap::Command {
    clap::Command::new("edge-agent")
        .arg(
            clap::Arg::new("config")
                .long("config")
                .env("EDGE_AGENT_CONFIG"),
        )
        .arg(clap::Arg::new("log_json").long("log-json").env("LOG_JSON"))
}

fn vars(names: &[&str]) -> Vec<String> {
    names.iter().map(|&name| name.to_owned()).collect()
}

#[test]
fn the_prefixes_come_from_the_settings() {
    let prefixes: Vec<String> = env_names(&command()).prefixes().into_iter().collect();
    assert_eq!(
        prefixes,
        [
            "BACKLOG_",
            "BUFFER_",
            "CLOCK_MAX_",
            "DEVICE_",
            "DPS_",
            "EDGE_AGENT_",
            "GPSD_",
            "IOTHUB_",
            "MAVLINK_",
            "MAX_FIX_",
            "MQTT_",
            "POSITION_",
            "PUBLISH_",
            "RECONNECT_",
            "REMOTE_",
            "REPORTED_MIN_",
            "REPORT_",
            "SAS_",
            "SIM_",
            "STATUS_",
            "X509_"
        ]
    );
}

#[test]
fn unknown_variables_stop_the_agent_with_a_suggestion() {
    let names = env_names(&command());
    let known = vars(&[
        "PATH",
        "HOME",
        "RUST_LOG",
        "LOG_JSON",
        "EDGE_AGENT_CONFIG",
        "IOTHUB_DEVICE_CONNECTION_STRING_FILE",
        "MAVLINK_ADDRESS",
        "SIM_SEED",
    ]);
    base().resolve_in(&names, &known).unwrap();
    let message = base()
        .resolve_in(&names, &vars(&["PATH", "MAVLINK_ADRESS"]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "MAVLINK_ADRESS is not a setting: did you mean MAVLINK_ADDRESS?"
    );
    let message = base()
        .resolve_in(&names, &vars(&["EDGE_AGENT_CONFIG_FILE", "BUFFER_SIZE"]))
        .unwrap_err()
        .to_string();
    assert!(
        message
            .contains("EDGE_AGENT_CONFIG_FILE is not a setting: did you mean EDGE_AGENT_CONFIG?"),
        "{message}"
    );
    assert!(
        message.contains("BUFFER_SIZE is not a setting"),
        "{message}"
    );
}

#[test]
fn a_missing_source_names_the_variable_meant_for_it() {
    let names = env_names(&command());
    let no_source = || Settings {
        position_source: None,
        ..base()
    };
    let message = no_source()
        .resolve_in(&names, &vars(&["PATH", "SOURCE"]))
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("POSITION_SOURCE is required"),
        "{message}"
    );
    assert!(
        message.ends_with("SOURCE is set: did you mean POSITION_SOURCE?"),
        "{message}"
    );
    let message = no_source()
        .resolve_in(&names, &vars(&["PATH"]))
        .unwrap_err()
        .to_string();
    assert!(!message.contains("did you mean"), "{message}");
}

fn dps_settings() -> Settings {
    Settings {
        mqtt_url: None,
        device_id: None,
        dps_id_scope: Some("0ne00000001".into()),
        dps_registration_id: Some("drone-7".into()),
        dps_group_key: Some(Secret::new("AAEC")),
        dps_group_key_on_device: Some(true),
        ..base()
    }
}

#[test]
fn dps_settings_resolve_and_wrong_ones_name_what_to_fix() {
    let dps = dps_settings().dps().unwrap().unwrap();
    assert_eq!(
        (dps.id_scope.as_str(), dps.registration_id.as_str()),
        ("0ne00000001", "drone-7")
    );
    assert_eq!(
        (dps.host.as_str(), dps.port),
        ("global.azure-devices-provisioning.net", 8883)
    );
    let local = Settings {
        dps_endpoint: Some("127.0.0.1:28883".into()),
        ..dps_settings()
    };
    let local = local.dps().unwrap().unwrap();
    assert_eq!((local.host.as_str(), local.port), ("127.0.0.1", 28883));
    assert!(base().dps().unwrap().is_none());

    let cases: Vec<(Settings, &str)> = vec![
        (
            Settings {
                dps_id_scope: None,
                ..dps_settings()
            },
            "DPS_ID_SCOPE",
        ),
        (
            Settings {
                connection_string: Some(Secret::new("HostName=h;DeviceId=d;SharedAccessKey=AAEC")),
                ..dps_settings()
            },
            "DPS_ID_SCOPE",
        ),
        (
            Settings {
                dps_device_key: Some(Secret::new("AAEC")),
                ..dps_settings()
            },
            "DPS_DEVICE_KEY",
        ),
        (
            Settings {
                dps_group_key: None,
                dps_group_key_on_device: None,
                ..dps_settings()
            },
            "DPS_DEVICE_KEY",
        ),
        (
            Settings {
                dps_group_key: None,
                ..dps_settings()
            },
            "DPS_GROUP_KEY_ON_DEVICE",
        ),
        (
            Settings {
                dps_registration_id: Some("Drone 7".into()),
                ..dps_settings()
            },
            "DPS_REGISTRATION_ID",
        ),
        (
            Settings {
                dps_endpoint: Some("https://dps.example".into()),
                ..dps_settings()
            },
            "DPS_ENDPOINT",
        ),
        (
            Settings {
                dps_group_key: None,
                dps_group_key_on_device: None,
                dps_cert_file: Some("/etc/hostname".into()),
                ..dps_settings()
            },
            "DPS_CERT_FILE",
        ),
        (
            Settings {
                dps_cert_file: Some("/etc/hostname".into()),
                dps_key_file: Some("/etc/hostname".into()),
                ..dps_settings()
            },
            "DPS_CERT_FILE",
        ),
    ];
    for (settings, setting) in cases {
        let message = settings.dps().unwrap_err().to_string();
        assert!(message.contains(setting), "{message} should name {setting}");
    }
}

#[test]
fn the_group_key_is_refused_on_a_drone_unless_a_lab_opts_in() {
    let on_a_drone = Settings {
        dps_group_key_on_device: None,
        ..dps_settings()
    };
    let message = on_a_drone.dps().unwrap_err().to_string();
    for named in [
        "DPS_GROUP_KEY:",
        "DPS_DEVICE_KEY",
        "X.509",
        "DPS_GROUP_KEY_ON_DEVICE=true",
    ] {
        assert!(message.contains(named), "{message} should name {named}");
    }
    let refused = Settings {
        dps_group_key_on_device: Some(false),
        ..dps_settings()
    };
    assert!(refused.dps().is_err());
    assert!(dps_settings().dps().unwrap().is_some());
}

#[test]
fn the_registration_id_of_a_board_is_stable_and_not_its_machine_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("machine-id");
    std::fs::write(&path, "4c4c4544004a3510804e\n").unwrap();
    let id = registration_id_of_machine(&path).unwrap();
    assert_eq!(id, registration_id_of_machine(&path).unwrap());
    assert!(check_registration_id(&id).is_ok(), "{id}");
    assert!(!id.contains("4c4c4544"), "{id}");
    std::fs::write(&path, "another board\n").unwrap();
    assert_ne!(registration_id_of_machine(&path).unwrap(), id);
    let missing = registration_id_of_machine(&dir.path().join("none")).unwrap_err();
    assert!(missing.contains("DPS_REGISTRATION_ID"), "{missing}");
}
