//! The project's Kubernetes manifests (`deploy/`) read as YAML for the programs' deploy
//! tests, and the check every workload that reaches Cosmos DB shares: keyless, through AKS
//! workload identity.

use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

/// The documents of `deploy/{path}`.
pub fn load(path: &str) -> Vec<Yaml> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// A string value.
pub fn text(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

/// The value of variable `name` in `container`'s `env`.
pub fn env_value<'a>(container: &'a Yaml, name: &str) -> Option<&'a str> {
    container["env"]
        .as_vec()?
        .iter()
        .find(|e| text(&e["name"]) == name)
        .map(|e| text(&e["value"]))
}

/// Checks that the pods of `workload` (a Deployment or StatefulSet) reach Cosmos DB with
/// Entra ID tokens and no key: `COSMOS_AUTH=entra` and no key setting, the workload
/// identity label, and a service account `accounts` defines with a managed identity's
/// client id; and that `secret` (the example Secret) holds no account key.
pub fn assert_keyless_cosmos(workload: &Yaml, accounts: &[Yaml], secret: &Yaml) {
    let template = &workload["spec"]["template"];
    let name = text(&workload["metadata"]["name"]);
    let container = &template["spec"]["containers"][0];
    assert_eq!(env_value(container, "COSMOS_AUTH"), Some("entra"), "{name}");
    for key in ["COSMOS_KEY", "COSMOS_KEY_FILE"] {
        assert_eq!(
            env_value(container, key),
            None,
            "{name}: {key} beside COSMOS_AUTH=entra"
        );
    }
    assert!(
        secret["stringData"]["COSMOS_KEY"].is_badvalue(),
        "{name}: a key in the Secret"
    );
    // The webhook injects the identity into pods so labelled, of a service account that
    // names the managed identity's client id.
    assert_eq!(
        text(&template["metadata"]["labels"]["azure.workload.identity/use"]),
        "true",
        "{name}"
    );
    let wanted = text(&template["spec"]["serviceAccountName"]);
    let account = accounts
        .iter()
        .find(|a| text(&a["kind"]) == "ServiceAccount" && text(&a["metadata"]["name"]) == wanted)
        .unwrap_or_else(|| panic!("{name}: no ServiceAccount {wanted}"));
    let client_id = text(&account["metadata"]["annotations"]["azure.workload.identity/client-id"]);
    assert_eq!(
        client_id.len(),
        36,
        "{name}: a client id (GUID): {client_id}"
    );
}

/// Checks what every workload's pod shares: mounted secret files readable by its user
/// (`fsGroup` equal to `runAsGroup`) and its image pinned by digest.
pub fn assert_pod_hardened(workload: &Yaml) {
    let name = text(&workload["metadata"]["name"]);
    let pod = &workload["spec"]["template"]["spec"];
    let context = &pod["securityContext"];
    assert_eq!(
        context["fsGroup"].as_i64(),
        context["runAsGroup"].as_i64(),
        "{name}: fsGroup and runAsGroup"
    );
    for container in pod["containers"].as_vec().unwrap() {
        let image = text(&container["image"]);
        let digest = image.rsplit_once("@sha256:").map(|(_, d)| d);
        assert!(
            digest.is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit())),
            "{name}: image {image} is not pinned by digest"
        );
    }
}

/// Checks that the NetworkPolicies among `docs` confine `workload`'s pods: policies select
/// them for both ingress and egress; each container port is admitted by name, only from
/// named pods or an address block (never a whole namespace or the world), the probes'
/// port from an address block (kubelet on the node); egress names its ports, DNS among
/// them, and a rule to the world leaves out the private ranges.
pub fn assert_confined(workload: &Yaml, docs: &[Yaml]) {
    let name = text(&workload["metadata"]["name"]);
    let template = &workload["spec"]["template"];
    let labels = &template["metadata"]["labels"];
    let policies: Vec<&Yaml> = docs
        .iter()
        .filter(|d| {
            text(&d["kind"]) == "NetworkPolicy" && selects(&d["spec"]["podSelector"], labels)
        })
        .collect();
    let types: Vec<&str> = policies
        .iter()
        .flat_map(|p| p["spec"]["policyTypes"].as_vec().unwrap())
        .map(text)
        .collect();
    for kind in ["Ingress", "Egress"] {
        assert!(types.contains(&kind), "{name}: no {kind} policy");
    }
    let container = &template["spec"]["containers"][0];
    let ports: Vec<&str> = container["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| text(&p["name"]))
        .collect();
    let mut admitted = Vec::new();
    let mut from_block = Vec::new();
    for rule in policies
        .iter()
        .filter_map(|p| p["spec"]["ingress"].as_vec())
        .flatten()
    {
        let peers = rule["from"]
            .as_vec()
            .expect("an ingress rule names its peers");
        let rule_ports: Vec<&str> = rule["ports"]
            .as_vec()
            .expect("an ingress rule names its ports")
            .iter()
            .map(|p| text(&p["port"]))
            .collect();
        for peer in peers {
            if let Some(cidr) = peer["ipBlock"]["cidr"].as_str() {
                assert_ne!(cidr, "0.0.0.0/0", "{name}: ingress from the world");
                from_block.extend(&rule_ports);
            } else {
                assert!(
                    !peer["podSelector"].is_badvalue(),
                    "{name}: ingress from a whole namespace: {peer:?}"
                );
            }
        }
        admitted.extend(rule_ports);
    }
    admitted.sort_unstable();
    admitted.dedup();
    let mut wanted = ports.clone();
    wanted.sort_unstable();
    assert_eq!(
        admitted, wanted,
        "{name}: the ports admitted are the container's"
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        let port = text(&container[probe]["httpGet"]["port"]);
        assert!(
            from_block.contains(&port),
            "{name}: {probe} port {port} not admitted from the node"
        );
    }
    let mut dns = false;
    for rule in policies
        .iter()
        .filter_map(|p| p["spec"]["egress"].as_vec())
        .flatten()
    {
        let rule_ports = rule["ports"]
            .as_vec()
            .expect("an egress rule names its ports");
        dns |= rule_ports.iter().any(|p| p["port"].as_i64() == Some(53));
        for peer in rule["to"].as_vec().expect("an egress rule names its peers") {
            if peer["ipBlock"]["cidr"].as_str() == Some("0.0.0.0/0") {
                let except: Vec<&str> = peer["ipBlock"]["except"]
                    .as_vec()
                    .map(|e| e.iter().map(text).collect())
                    .unwrap_or_default();
                for private in [
                    "10.0.0.0/8",
                    "172.16.0.0/12",
                    "192.168.0.0/16",
                    "169.254.0.0/16",
                ] {
                    assert!(except.contains(&private), "{name}: egress to {private}");
                }
            }
        }
    }
    assert!(dns, "{name}: no DNS egress");
}

/// Whether a pod selector selects pods labelled `labels` (`matchLabels`, and
/// `matchExpressions` with `In`).
fn selects(selector: &Yaml, labels: &Yaml) -> bool {
    let by_labels = selector["matchLabels"].as_hash().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| labels[text(k)].as_str() == v.as_str())
    });
    let by_expressions = selector["matchExpressions"].as_vec().is_none_or(|exprs| {
        exprs.iter().all(|e| {
            assert_eq!(text(&e["operator"]), "In", "only In is read here");
            let value = labels[text(&e["key"])].as_str();
            e["values"]
                .as_vec()
                .unwrap()
                .iter()
                .any(|v| v.as_str() == value)
        })
    });
    by_labels && by_expressions
}
