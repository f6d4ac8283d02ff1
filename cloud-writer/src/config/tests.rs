//! The settings resolved: defaults, the layers' order, the one duration form, secrets refused
//! as flags and hidden, insecure endpoints, budgets, errors that name the variable.

use std::time::Duration;

use settings::Layered as _;
use url::Url;

use super::resolved::Balancing;
use super::*;

fn base() -> Settings {
    Settings {
        cosmos_endpoint: Some(Url::parse("http://127.0.0.1:8081").unwrap()),
        cosmos_key: Some(Secret::new("a2V5")),
        writer_source: Some(Secret::new("mqtt://127.0.0.1:1883")),
        ..Settings::default()
    }
}

#[test]
fn defaults_apply() {
    let config = base().resolve().unwrap();
    assert_eq!(config.cosmos.database, "telemetry");
    assert_eq!(config.cosmos.container, "positions");
    assert_eq!(config.cosmos.partition_key_path.to_string(), "/deviceId");
    assert_eq!(config.staleness.stale_after, Duration::from_secs(300));
    assert_eq!(config.newest_wins, NewestWins::Patch);
    assert!(config.history.is_none());
    assert_eq!(config.metrics_addr, Some("0.0.0.0:9464".parse().unwrap()));
    assert_eq!(config.probe_addr, Some("0.0.0.0:9465".parse().unwrap()));
    assert_eq!(config.dead_letter, None);
}

#[test]
fn probes_and_metrics_need_two_listeners() {
    let err = Settings {
        metrics_addr: Some("0.0.0.0:9464".into()),
        probe_addr: Some("0.0.0.0:9464".into()),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("PROBE_ADDR") && err.contains("0.0.0.0:9465"),
        "{err}"
    );
    let off = Settings {
        probe_addr: Some("off".into()),
        ..base()
    };
    assert_eq!(off.resolve().unwrap().probe_addr, None);
}

#[test]
fn the_dead_letter_cap_has_a_default_and_needs_its_file() {
    let file: Settings = toml::from_str("dead_letter_file = \"/var/dead.jsonl\"\n").unwrap();
    let dead_letter = file.or(base()).resolve().unwrap().dead_letter.unwrap();
    assert_eq!(dead_letter.max_bytes, 64 << 20);
    for (file, max_bytes) in [
        (None, Some(1000)),
        (Some("/var/dead.jsonl".into()), Some(0)),
    ] {
        let err = Settings {
            dead_letter_file: file,
            dead_letter_max_bytes: max_bytes,
            ..base()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(err.contains("DEAD_LETTER_MAX_BYTES"), "{err}");
    }
}

#[test]
fn flags_and_env_win_over_the_file() {
    let file: Settings = toml::from_str(
        "cosmos_database = \"fromfile\"\ncosmos_container = \"c\"\nstale_after = \"90s\"\n",
    )
    .unwrap();
    let given = Settings {
        cosmos_database: Some("fromflag".into()),
        ..base()
    };
    let config = given.or(file).resolve().unwrap();
    assert_eq!(config.cosmos.database, "fromflag");
    assert_eq!(config.cosmos.container, "c");
    assert_eq!(config.staleness.stale_after, Duration::from_secs(90));
}

#[test]
fn force_missing_partition_key_is_off_unless_asked() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }
    let parse = |args: &[&str]| {
        let cli = <Cli as clap::Parser>::try_parse_from(args).unwrap();
        cli.settings.or(base()).resolve().unwrap()
    };
    assert!(!parse(&["w"]).cosmos.force_missing_partition_key);
    let flag = parse(&["w", "--force-missing-partition-key"]);
    assert!(flag.cosmos.force_missing_partition_key);
    let off = parse(&["w", "--force-missing-partition-key", "false"]);
    assert!(!off.cosmos.force_missing_partition_key);
    let file: Settings = toml::from_str("writer_force_missing_partition_key = true").unwrap();
    assert!(
        file.or(base())
            .resolve()
            .unwrap()
            .cosmos
            .force_missing_partition_key
    );
}

#[test]
fn durations_take_the_one_form() {
    let file: Settings =
        toml::from_str("stale_after = 90\nbatch_linger = \"5ms\"\nsummary_interval = \"1m\"")
            .unwrap();
    let config = file.or(base()).resolve().unwrap();
    assert_eq!(config.staleness.stale_after, Duration::from_secs(90));
    assert_eq!(config.batch_linger, Duration::from_millis(5));
    assert_eq!(config.summary_interval, Duration::from_secs(60));
}

#[test]
fn a_secret_source_is_refused_as_a_flag() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }
    let parse = |source: &str| {
        <Cli as clap::Parser>::try_parse_from(["w", "--source", source])
            .unwrap()
            .settings
            .refuse_secret_flags()
    };
    assert!(parse("mqtt://broker:1883").is_ok());
    for secret in [
        "mqtt://user:hunter2@broker:1883",
        "Endpoint=sb://hub.servicebus.windows.net/;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0S2V5;EntityPath=hub",
    ] {
        let err = parse(secret).err().unwrap().to_string();
        assert!(err.contains("WRITER_SOURCE_FILE"), "{err}");
        assert!(
            !err.contains("hunter2") && !err.contains("c2VjcmV0S2V5"),
            "{err}"
        );
    }
}

#[test]
fn insecure_endpoints_only_on_this_host_unless_allowed() {
    let with = |endpoint: &str, invalid_certs: bool, allow: bool| {
        Settings {
            cosmos_endpoint: Some(Url::parse(endpoint).unwrap()),
            cosmos_accept_invalid_certs: Some(invalid_certs),
            cosmos_allow_insecure: Some(allow),
            ..base()
        }
        .resolve()
    };
    for local in [
        "http://127.0.0.1:8081",
        "https://localhost:8081",
        "http://[::1]:8081",
    ] {
        assert!(
            with(local, true, false).unwrap().cosmos.insecure.is_none(),
            "{local}"
        );
    }
    assert!(with("https://acct.documents.azure.com", false, false).is_ok());
    for remote in ["http://cosmos.internal:8081", "https://10.0.0.5:8081"] {
        let plain = remote.starts_with("http:");
        let err = with(remote, !plain, false).unwrap_err().to_string();
        assert!(err.contains("COSMOS_ALLOW_INSECURE"), "{err}");
        let allowed = with(remote, !plain, true).unwrap();
        assert!(allowed.cosmos.insecure.is_some(), "{remote}");
    }
}

#[test]
fn unknown_file_keys_are_errors() {
    assert!(toml::from_str::<Settings>("cosmos_databse = \"x\"").is_err());
}

#[test]
fn source_budget_and_stall_time_have_defaults_and_a_floor() {
    let config = base().resolve().unwrap();
    assert_eq!(config.source_max_bytes, 64 * 1024 * 1024);
    assert_eq!(config.healthz_stall_after, Duration::from_secs(600));
    let file: Settings =
        toml::from_str("source_max_bytes = 1048576\nhealthz_stall_after = \"90s\"\n").unwrap();
    let config = file.or(base()).resolve().unwrap();
    assert_eq!(config.source_max_bytes, 1 << 20);
    assert_eq!(config.healthz_stall_after, Duration::from_secs(90));
    let err = Settings {
        source_max_bytes: Some(1000),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.contains("SOURCE_MAX_BYTES"), "{err}");
}

#[test]
fn mqtt_receive_maximum_has_a_default_and_refuses_zero() {
    assert_eq!(
        base().resolve().unwrap().mqtt_receive_maximum,
        DEFAULT_MQTT_RECEIVE_MAXIMUM
    );
    let file: Settings = toml::from_str("mqtt_receive_maximum = 100\n").unwrap();
    assert_eq!(file.or(base()).resolve().unwrap().mqtt_receive_maximum, 100);
    let err = Settings {
        mqtt_receive_maximum: Some(0),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.contains("MQTT_RECEIVE_MAXIMUM"), "{err}");
}

#[test]
fn missing_and_bad_settings_name_the_variable() {
    let err = Settings::default().resolve().unwrap_err().to_string();
    assert!(err.contains("COSMOS_ENDPOINT"), "{err}");
    let err = Settings {
        cosmos_partition_key_path: Some("deviceId".into()),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.contains("COSMOS_PARTITION_KEY_PATH"), "{err}");
    let err = Settings {
        writer_source: Some(Secret::new("http://x")),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.contains("WRITER_SOURCE"), "{err}");
}

#[test]
fn secrets_never_show_in_debug() {
    let config = Settings {
        writer_source: Some(Secret::new(
            "Endpoint=sb://hub.servicebus.windows.net/;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0S2V5;EntityPath=hub",
        )),
        ..base()
    };
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("c2VjcmV0S2V5") && !shown.contains("a2V5"),
        "{shown}"
    );
    let resolved = config.resolve().unwrap();
    let shown = format!("{resolved:?}");
    assert!(
        !shown.contains("c2VjcmV0S2V5") && !shown.contains("a2V5"),
        "{shown}"
    );
    let Some(SourceSpec::EventHubs(hub)) = resolved.source else {
        panic!("not event hubs")
    };
    assert_eq!(hub.namespace, "hub.servicebus.windows.net");
    assert_eq!(hub.entity_path, "hub");
    let mqtt = SourceSpec::parse("mqtt://u:hunter2@broker:1883").unwrap();
    assert!(!format!("{mqtt:?}").contains("hunter2"));
}

#[test]
fn start_position_is_earliest_latest_or_a_time() {
    let start = |text: &str| {
        Settings {
            eventhubs_start_position: Some(text.into()),
            ..base()
        }
        .resolve()
        .map(|c| c.eventhubs.start_position)
    };
    assert_eq!(
        base().resolve().unwrap().eventhubs.start_position,
        StartAt::Latest
    );
    assert_eq!(start("earliest").unwrap(), StartAt::Earliest);
    assert_eq!(
        start("2026-11-22T09:00:00Z").unwrap(),
        StartAt::EnqueuedAfter("2026-11-22T09:00:00Z".parse().unwrap())
    );
    let err = start("yesterday").unwrap_err().to_string();
    assert!(err.contains("EVENTHUBS_START_POSITION"), "{err}");
}

#[test]
fn load_balancing_settings_default_and_refuse_an_expiry_within_the_interval() {
    let resolved = base().resolve().unwrap().eventhubs;
    assert_eq!(resolved.balancing, Balancing::default());
    assert_eq!(resolved.balancing.interval, Duration::from_secs(10));
    assert_eq!(resolved.balancing.ownership_expiry, Duration::from_secs(30));
    assert_eq!(resolved.checkpoint_interval, Duration::from_secs(5));
    let d = |text: &str| Some(text.parse::<DurationSetting>().unwrap());
    let given = Settings {
        eventhubs_load_balancing_interval: d("2s"),
        eventhubs_ownership_expiry: d("6"),
        eventhubs_load_balancing_strategy: Some(LoadBalancing::Balanced),
        eventhubs_checkpoint_interval: d("250ms"),
        ..base()
    }
    .resolve()
    .unwrap()
    .eventhubs;
    assert_eq!(
        given.balancing,
        Balancing {
            interval: Duration::from_secs(2),
            ownership_expiry: Duration::from_secs(6),
            strategy: LoadBalancing::Balanced,
        }
    );
    assert_eq!(given.checkpoint_interval, Duration::from_millis(250));
    for (interval, expiry) in [("30s", "30s"), ("30s", "20s"), ("", "5s")] {
        let err = Settings {
            eventhubs_load_balancing_interval: (!interval.is_empty())
                .then(|| d(interval))
                .flatten(),
            eventhubs_ownership_expiry: d(expiry),
            ..base()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("EVENTHUBS_OWNERSHIP_EXPIRY")
                && err.contains("EVENTHUBS_LOAD_BALANCING_INTERVAL")
                && err.contains("at least twice"),
            "{err}"
        );
    }
    let err = Settings {
        eventhubs_checkpoint_interval: d("0s"),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("EVENTHUBS_CHECKPOINT_INTERVAL"), "{err}");
}
