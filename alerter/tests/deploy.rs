//! The alerter's Kubernetes manifests (`deploy/alerter/`): the Deployment names only
//! settings the alerter reads (as its `--help` lists them, or a secret's `_FILE` form, whose
//! file the example Secret holds), reaches Cosmos DB with workload identity and no key, is
//! confined by its NetworkPolicy, and its rules (the ConfigMap) parse as the alerter reads
//! them; `/metrics` and the probes' `/healthz` are on the port `ALERT_METRICS_ADDR` names.

use std::process::Command;

use test_harness::manifests::{
    assert_confined, assert_keyless_cosmos, assert_pod_hardened, env_value, load, text,
};

#[test]
fn the_alerters_manifests_name_known_settings_and_reach_cosmos_db_keyless() {
    let help = Command::new(env!("CARGO_BIN_EXE_alerter"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let docs = load("alerter/deployment.yaml");
    let workload = docs
        .iter()
        .find(|d| text(&d["kind"]) == "Deployment")
        .unwrap();
    let accounts = load("alerter/serviceaccount.yaml");
    let secret = &load("alerter/secret.example.yaml")[0];
    assert_keyless_cosmos(workload, &accounts, secret);
    assert_pod_hardened(workload);
    assert_confined(workload, &load("alerter/networkpolicy.yaml"));

    let container = &workload["spec"]["template"]["spec"]["containers"][0];
    let mounts = container["volumeMounts"].as_vec().unwrap();
    let mount_of = |volume: &str| {
        let mount = mounts.iter().find(|m| text(&m["name"]) == volume).unwrap();
        text(&mount["mountPath"]).to_string()
    };
    for var in container["env"].as_vec().unwrap() {
        let (name, value) = (text(&var["name"]), text(&var["value"]));
        let secret_file = name
            .strip_suffix("_FILE")
            .filter(|base| ["ALERT_WEBHOOK_SECRET", "ALERT_EVENTGRID_KEY"].contains(base));
        assert!(
            help.contains(&format!("[env: {name}=")) || secret_file.is_some(),
            "{name} is not a setting of the alerter"
        );
        if let Some(base) = secret_file {
            assert_eq!(value, format!("{}/{base}", mount_of("secrets")));
            assert!(
                !secret["stringData"][base].is_badvalue(),
                "{base} in the Secret"
            );
        }
    }
    let port = container["ports"][0]["containerPort"].as_i64().unwrap();
    let addr = env_value(container, "ALERT_METRICS_ADDR").unwrap();
    assert_eq!(addr.rsplit_once(':').unwrap().1, port.to_string());

    // The rules the ConfigMap mounts where ALERT_RULES_FILE points.
    let rules_file = env_value(container, "ALERT_RULES_FILE").unwrap();
    let (dir, file) = rules_file.rsplit_once('/').unwrap();
    assert_eq!(dir, mount_of("rules"));
    let map = docs
        .iter()
        .find(|d| text(&d["kind"]) == "ConfigMap")
        .unwrap();
    let rules = alerter::Rules::parse(text(&map["data"][file]), false).unwrap();
    assert_eq!(rules.0.len(), 3);
}
