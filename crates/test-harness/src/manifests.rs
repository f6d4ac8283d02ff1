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
