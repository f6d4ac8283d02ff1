//! The alerter's settings resolved: defaults, and what a wrong setting says.

use std::time::Duration;

use cosmos::FeedPosition;
use settings::Secret;
use url::Url;

use super::Settings;

fn given() -> Settings {
    Settings {
        cosmos_endpoint: Some(Url::parse("http://localhost:8081/").unwrap()),
        cosmos_key: Some(Secret::new("a2V5")),
        alert_rules_file: Some("rules.toml".into()),
        alert_webhook_urls: Some("http://127.0.0.1:1/hook".into()),
        ..Settings::default()
    }
}

#[test]
fn defaults_and_what_a_wrong_setting_says() {
    let config = given().resolve().unwrap();
    assert_eq!(config.lease_container, "alert-leases");
    assert_eq!(config.lease_expiry, Duration::from_secs(60));
    assert_eq!(config.start, FeedPosition::Now);
    let err = |s: Settings| s.resolve().unwrap_err().to_string();
    assert!(
        err(Settings {
            alert_rules_file: None,
            ..given()
        })
        .contains("ALERT_RULES_FILE")
    );
    assert!(
        err(Settings {
            alert_webhook_urls: Some("ftp://x".into()),
            ..given()
        })
        .contains("http(s)")
    );
    assert!(
        err(Settings {
            alert_webhook_urls: None,
            ..given()
        })
        .contains("ALERT_EVENTGRID_ENDPOINT")
    );
    let short = Settings {
        alert_lease_interval: Some("10s".parse().unwrap()),
        alert_lease_expiry: Some("15s".parse().unwrap()),
        ..given()
    };
    assert!(err(short).contains("twice"));
    let keyless = Settings {
        alert_eventgrid_endpoint: Some(
            Url::parse("https://t.westus2-1.eventgrid.azure.net/api/events").unwrap(),
        ),
        ..given()
    };
    assert!(err(keyless).contains("ALERT_EVENTGRID_KEY"));
}
