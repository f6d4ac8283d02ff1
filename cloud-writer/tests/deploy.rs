//! The writer's Kubernetes manifests (`deploy/cloud-writer/`): the Event Hubs Deployment and
//! the MQTT StatefulSet name only settings the writer reads (as its `--help` lists
//! them, or a secret's `_FILE` form), and reach Cosmos DB with workload identity, no key.
//! KEDA's ScaledObject is checked against the Deployment in `keda.rs`.

use std::process::Command;

use test_harness::manifests::{
    assert_confined, assert_keyless_cosmos, assert_pod_hardened, env_value, load, text,
};

#[test]
fn the_writers_reach_cosmos_db_with_workload_identity_and_only_known_settings() {
    let help = Command::new(env!("CARGO_BIN_EXE_cloud-writer"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let accounts = load("cloud-writer/serviceaccount.yaml");
    let secret = &load("cloud-writer/secret.example.yaml")[0];
    let workloads: Vec<_> = [
        "cloud-writer/deployment.yaml",
        "cloud-writer/statefulset-mqtt.yaml",
    ]
    .into_iter()
    .flat_map(load)
    .filter(|doc| matches!(text(&doc["kind"]), "Deployment" | "StatefulSet"))
    .collect();
    assert_eq!(workloads.len(), 2);
    let policies = load("cloud-writer/networkpolicy.yaml");
    for workload in &workloads {
        assert_keyless_cosmos(workload, &accounts, secret);
        assert_pod_hardened(workload);
        assert_confined(workload, &policies);
        // The probes ask the probes' listener, where PROBE_ADDR puts it; the scrape the
        // metrics port.
        let container = &workload["spec"]["template"]["spec"]["containers"][0];
        let port = |name: &str| {
            let port = container["ports"]
                .as_vec()
                .unwrap()
                .iter()
                .find(|p| text(&p["name"]) == name)
                .unwrap_or_else(|| panic!("no port {name}"));
            port["containerPort"].as_i64().unwrap().to_string()
        };
        for (setting, name) in [("PROBE_ADDR", "probes"), ("METRICS_ADDR", "metrics")] {
            let addr = env_value(container, setting).unwrap_or_else(|| panic!("{setting}"));
            assert_eq!(addr.rsplit_once(':').unwrap().1, port(name), "{setting}");
        }
        for probe in ["readinessProbe", "livenessProbe"] {
            assert_eq!(
                text(&container[probe]["httpGet"]["port"]),
                "probes",
                "{probe}"
            );
        }
        for var in workload["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_vec()
            .unwrap()
        {
            let name = text(&var["name"]);
            let secret_file = name
                .strip_suffix("_FILE")
                .is_some_and(|key| !secret["stringData"][key].is_badvalue());
            // A setting that may hold a secret (WRITER_SOURCE) is read from the
            // environment without `--help` listing it there: its flag names it.
            let secret_setting = help.contains(&format!("<{name}>"));
            assert!(
                help.contains(&format!("[env: {name}=")) || secret_file || secret_setting,
                "{name} is not a setting of the writer"
            );
        }
    }
}
