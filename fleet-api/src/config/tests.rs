//! The settings' resolution: defaults, precedence, and each refusal naming its variable.

use super::*;
use settings::Layered as _;

fn base() -> Settings {
    Settings {
        cosmos_endpoint: Some(Url::parse("http://127.0.0.1:8081").unwrap()),
        cosmos_key: Some(Secret::new("a2V5")),
        api_allow_anonymous: Some(true),
        ..Settings::default()
    }
}

#[test]
fn unknown_file_keys_are_errors() {
    assert!(toml::from_str::<Settings>("cosmos_databse = \"x\"").is_err());
}

#[test]
fn defaults_apply() {
    let config = base().resolve().unwrap();
    assert_eq!(config.addr, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(config.cosmos.database, "telemetry");
    assert_eq!(config.cosmos.container, "positions");
    assert_eq!(config.options, ApiOptions::default());
}

#[test]
fn flags_and_env_win_over_the_file_and_serial_is_one() {
    let file: Settings = toml::from_str(
        "api_addr = \"0.0.0.0:9000\"\nquery_max_parallelism = \"serial\"\ncosmos_container = \"c\"\n",
    )
    .unwrap();
    let config = Settings {
        cosmos_container: Some("given".into()),
        ..base()
    }
    .or(file)
    .resolve()
    .unwrap();
    assert_eq!(config.addr, "0.0.0.0:9000".parse().unwrap());
    assert_eq!(config.options.max_parallelism, 1);
    assert_eq!(config.cosmos.container, "given");
    let numeric: Settings = toml::from_str("query_max_parallelism = 4").unwrap();
    assert_eq!(numeric.query_max_parallelism, Some(Parallelism(4)));
}

#[test]
fn bad_settings_name_the_variable() {
    let err = Settings::default().resolve().unwrap_err().to_string();
    assert!(err.contains("COSMOS_ENDPOINT"), "{err}");
    let err = Settings {
        near_max_radius_m: Some(-1.0),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.contains("NEAR_MAX_RADIUS_M"), "{err}");
    assert!("0".parse::<Parallelism>().is_err());
    assert!("many".parse::<Parallelism>().is_err());
    assert!(toml::from_str::<Settings>("api_adr = \"x\"").is_err());
}

#[test]
fn unchecked_certificates_are_for_this_host_unless_allowed() {
    let remote = |allow| Settings {
        cosmos_endpoint: Some(Url::parse("https://emulator.internal:8081").unwrap()),
        cosmos_accept_invalid_certs: Some(true),
        cosmos_allow_insecure: allow,
        ..base()
    };
    let err = remote(None).resolve().unwrap_err().to_string();
    assert!(err.contains("COSMOS_ALLOW_INSECURE"), "{err}");
    let config = remote(Some(true)).resolve().unwrap();
    assert!(config.cosmos.accept_invalid_certs);
    assert!(config.cosmos.insecure.is_some());
}

#[test]
fn a_configuration_that_lets_nobody_in_is_refused() {
    let closed = |anonymous| Settings {
        api_allow_anonymous: anonymous,
        ..base()
    };
    for anonymous in [None, Some(false)] {
        let err = closed(anonymous).resolve().unwrap_err().to_string();
        assert!(
            err.contains("API_KEYS_FILE") && err.contains("API_ALLOW_ANONYMOUS=true"),
            "{err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys");
    std::fs::write(&file, format!("ci Fleet.Read {}\n", "ab".repeat(32))).unwrap();
    let config = Settings {
        api_keys_file: Some(file.clone()),
        ..closed(None)
    }
    .resolve()
    .unwrap();
    assert!(!config.access.anonymous && !config.access.keys.is_empty());
    let refused = |text: &str| {
        std::fs::write(&file, text).unwrap();
        Settings {
            api_keys_file: Some(file.clone()),
            ..closed(None)
        }
        .resolve()
        .unwrap_err()
        .to_string()
    };
    let err = refused("ci Fleet.Read nothex\n");
    assert!(err.contains("API_KEYS_FILE: line 1"), "{err}");
    // At start a file with no key is a mistake (in service it revokes every key).
    let err = refused("# none yet\n");
    assert!(err.contains("API_KEYS_FILE: no key in the file"), "{err}");
}

#[test]
fn the_map_signs_in_at_the_api_issuer_for_its_audience() {
    let oidc = |map: Option<&str>, scope: Option<&str>| Settings {
        api_oidc_issuer: Some("https://login.microsoftonline.com/t/v2.0".into()),
        api_oidc_audience: Some("api://fleet-api".into()),
        api_map_client_id: map.map(str::to_string),
        api_map_scope: scope.map(str::to_string),
        ..base()
    };
    assert_eq!(
        oidc(None, None).resolve().unwrap().options.map_sign_in,
        None
    );
    let sign_in = oidc(Some("map-id"), None)
        .resolve()
        .unwrap()
        .options
        .map_sign_in
        .unwrap();
    assert_eq!(sign_in.issuer_origin, "https://login.microsoftonline.com");
    assert_eq!(sign_in.scope, "api://fleet-api/.default");
    let given = oidc(Some("map-id"), Some("api://fleet-api/Fleet.Read"));
    assert_eq!(
        given.resolve().unwrap().options.map_sign_in.unwrap().scope,
        "api://fleet-api/Fleet.Read"
    );
    let err = oidc(None, Some("x")).resolve().unwrap_err().to_string();
    assert!(err.contains("API_MAP_CLIENT_ID"), "{err}");
    let err = Settings {
        api_map_client_id: Some("map-id".into()),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.contains("API_OIDC_ISSUER"), "{err}");
}

#[test]
fn tls_needs_both_files() {
    assert_eq!(base().resolve().unwrap().tls, None);
    let err = Settings {
        api_tls_cert_file: Some("cert.pem".into()),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.contains("API_TLS_KEY_FILE"), "{err}");
    let err = Settings {
        api_tls_key_file: Some("key.pem".into()),
        ..base()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(err.contains("API_TLS_CERT_FILE"), "{err}");
    let both = Settings {
        api_tls_cert_file: Some("cert.pem".into()),
        api_tls_key_file: Some("key.pem".into()),
        ..base()
    };
    assert_eq!(
        both.resolve().unwrap().tls,
        Some(TlsFiles {
            cert: "cert.pem".into(),
            key: "key.pem".into()
        })
    );
}

#[test]
fn cors_origins_are_origins() {
    let origins = |list: &str| {
        Settings {
            api_cors_origins: Some(list.into()),
            ..base()
        }
        .resolve()
        .map(|c| c.options.cors_origins)
    };
    assert_eq!(
        origins("https://ops.example.com, http://localhost:3000/").unwrap(),
        ["https://ops.example.com", "http://localhost:3000"]
    );
    assert!(origins("").unwrap().is_empty());
    for bad in [
        "*",
        "https://ops.example.com/map",
        "ftp://x.example",
        "ops.example",
    ] {
        let err = origins(bad).unwrap_err().to_string();
        assert!(err.contains("API_CORS_ORIGINS"), "{bad}: {err}");
    }
}

#[test]
fn tokens_need_an_issuer_over_https_and_an_audience() {
    let oidc = |issuer: &str, audience: Option<&str>| Settings {
        api_oidc_issuer: Some(issuer.into()),
        api_oidc_audience: audience.map(str::to_string),
        ..base()
    };
    let entra = "https://login.microsoftonline.com/t/v2.0";
    let config = oidc(entra, Some("api://fleet")).resolve().unwrap();
    let settings = config.access.oidc.unwrap();
    assert_eq!(settings.issuer, entra);
    let err = oidc(entra, None).resolve().unwrap_err().to_string();
    assert!(err.contains("API_OIDC_AUDIENCE"), "{err}");
    let err = oidc("http://idp.example/t", Some("a"))
        .resolve()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("API_OIDC_ISSUER") && err.contains("https"),
        "{err}"
    );
    assert!(oidc("http://127.0.0.1:9000/t", Some("a")).resolve().is_ok());
}

#[test]
fn the_key_never_shows_in_debug() {
    let shown = format!("{:?}", base().resolve().unwrap());
    assert!(!shown.contains("a2V5"), "{shown}");
}

#[test]
fn what_a_caller_may_hold_and_take_is_set_from_the_file_and_checked() {
    let config = base().resolve().unwrap();
    assert_eq!(config.serving, Serving::default());
    let file: Settings = toml::from_str(
        "api_header_timeout = \"2s\"\napi_body_timeout = 3\napi_request_timeout = \"1m\"\n\
         api_stream_stall = \"500ms\"\napi_max_connections = 10\n\
         api_trusted_proxies = \"10.0.0.0/8, 192.0.2.7\"\n\
         api_max_concurrent_queries_per_identity = 2\napi_stream_max_clients_per_identity = 3\n",
    )
    .unwrap();
    let config = base().or(file).resolve().unwrap();
    assert_eq!(
        config.serving,
        Serving {
            header_timeout: Duration::from_secs(2),
            stall: Duration::from_millis(500),
            max_connections: 10,
        }
    );
    assert_eq!(config.options.body_timeout, Duration::from_secs(3));
    assert_eq!(config.options.request_timeout, Duration::from_secs(60));
    assert_eq!(config.options.trusted_proxies.len(), 2);
    assert_eq!(config.options.max_concurrent_queries_per_identity, 2);
    assert_eq!(config.options.stream_max_clients_per_identity, 3);
    for (bad, name) in [
        ("api_header_timeout = \"0s\"", "API_HEADER_TIMEOUT"),
        ("api_max_connections = 0", "API_MAX_CONNECTIONS"),
        (
            "api_trusted_proxies = \"proxy.local\"",
            "API_TRUSTED_PROXIES",
        ),
        (
            "api_stream_max_clients_per_identity = 0",
            "API_STREAM_MAX_CLIENTS_PER_IDENTITY",
        ),
    ] {
        let file: Settings = toml::from_str(bad).unwrap();
        let err = base().or(file).resolve().unwrap_err().to_string();
        assert!(err.contains(name), "{bad}: {err}");
    }
}
