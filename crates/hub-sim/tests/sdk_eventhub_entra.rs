//! The built-in endpoint playing an Event Hubs namespace that takes Microsoft Entra ID,
//! held to Microsoft's azure-eventhub with azure-identity (Python): a principal with "Azure
//! Event Hubs Data Receiver" reads with a token from the local issuer (`entra-sim`); one
//! without the role is refused ('Listen' claim required); with local authentication
//! disabled, the shared access key is refused as the service refuses it (LocalAuthDisabled).

mod common;

use std::collections::HashMap;

use common::{TestHub, run_script};
use entra_sim::{App, EntraSim};
use hub_sim::Incoming;
use hub_sim::{EVENTHUBS_AUDIENCE, EntraTrust, EventHubsRole};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eventhub_sdk_reads_with_a_token_and_a_key_is_refused() {
    let entra = EntraSim::builder()
        .app(App::new("eventhubs").app_id_uri(EVENTHUBS_AUDIENCE))
        .app(App::new("reader").secret("secret"))
        .app(App::new("stranger").secret("secret"))
        .https()
        .start()
        .await
        .unwrap();
    let trust = EntraTrust {
        issuer: entra.issuer(),
        tenant_id: entra.tenant_id().to_owned(),
        ca_pem: entra.ca_pem().map(str::to_owned),
        roles: HashMap::from([(
            entra.object_id("reader").unwrap().to_owned(),
            EventHubsRole::Receiver,
        )]),
        local_auth: false,
    };
    let hub = TestHub::start_with(0, move |config| {
        config.amqp_tls_port = Some(0);
        config.entra = Some(trust);
    })
    .await;
    for i in 0..5 {
        hub.hub
            .partitions()
            .append_to(2, Incoming::new("drone-entra", format!("m{i}")));
    }
    let issuer_ca = hub.dir.path().join("issuer-ca.pem");
    std::fs::write(&issuer_ca, entra.ca_pem().unwrap()).unwrap();
    let env = |client: Option<&str>| {
        let mut env = vec![
            (
                "HUB_SIM_EVENTHUB",
                hub.file("eventhub-tls-connection-string"),
            ),
            ("HUB_SIM_CA", hub.ca_path()),
        ];
        if let Some(client) = client {
            env.extend([
                ("ENTRA_CLIENT_ID", client.to_owned()),
                ("ENTRA_SECRET", "secret".to_owned()),
                ("ENTRA_TENANT", entra.tenant_id().to_owned()),
                ("ENTRA_BASE", entra.base_url().to_owned()),
                ("REQUESTS_CA_BUNDLE", issuer_ca.display().to_string()),
            ]);
        }
        env
    };

    let (outcome, ok) = run_script(
        "identity",
        "eventhub.py",
        &["receive".into(), "5".into()],
        &env(Some("reader")),
    )
    .await;
    assert!(ok, "{outcome}");
    let bodies: Vec<&str> = outcome["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4"], "{outcome}");

    let (outcome, ok) = run_script(
        "identity",
        "eventhub.py",
        &["refused".into()],
        &env(Some("stranger")),
    )
    .await;
    assert!(ok, "{outcome}");
    assert!(
        outcome["message"]
            .as_str()
            .unwrap()
            .contains("'Listen' claim(s) are required"),
        "{outcome}"
    );

    let (outcome, ok) =
        run_script("identity", "eventhub.py", &["refused".into()], &env(None)).await;
    assert!(ok, "{outcome}");
    assert!(
        outcome["message"]
            .as_str()
            .unwrap()
            .contains("LocalAuthDisabled"),
        "{outcome}"
    );
}
