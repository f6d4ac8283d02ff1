//! The Kubernetes manifests in `deploy/fleet-api/` agree with the program and with each
//! other: every variable the Deployment sets is one `fleet-api` reads (as its `--help` lists
//! them), the container listens where `API_ADDR` says, each secret file it names is a key of
//! the example Secret, the probes ask the routes open without a credential, the Service
//! and the Ingress reach the container's port by name, and Cosmos DB is reached with
//! workload identity, no key. The map's base map is Azure Maps Render's raster tiles, which
//! the API fetches with its workload identity's tokens (no key). The pod is confined by its NetworkPolicy, reads its secret
//! files through its group and runs an image pinned by digest; the Ingress carries no
//! configuration snippet.

use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

fn manifest(name: &str) -> Yaml {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/fleet-api")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut docs =
        YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    docs.remove(0)
}

fn text(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

#[test]
fn manifests_name_only_settings_the_api_reads_and_reach_its_port() {
    let help = Command::new(env!("CARGO_BIN_EXE_fleet-api"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();

    let deployment = manifest("deployment.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let env: Vec<(&str, &str)> = container["env"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|e| (text(&e["name"]), text(&e["value"])))
        .collect();
    let secret = manifest("secret.example.yaml");
    let mount = text(&container["volumeMounts"][0]["mountPath"]);
    for (name, value) in &env {
        // Secrets have no flag: their file forms are read from the environment.
        let known = help.contains(&format!("[env: {name}="))
            || ["COSMOS_KEY_FILE", "MAP_TILE_KEY_FILE"].contains(name);
        assert!(known, "{name} is not a setting of fleet-api");
        if let Some(file) = value.strip_prefix(&format!("{mount}/")) {
            assert!(
                !secret["stringData"][file].is_badvalue(),
                "{name} names {file}, which the example Secret does not hold"
            );
        }
    }

    let addr = env.iter().find(|(n, _)| *n == "API_ADDR").unwrap().1;
    let port = &container["ports"][0];
    assert_eq!(
        addr.rsplit_once(':').unwrap().1,
        port["containerPort"].as_i64().unwrap().to_string(),
        "API_ADDR and containerPort differ"
    );
    let port_name = text(&port["name"]);
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(text(&get["path"]), "/healthz", "{probe}: the open route");
        assert_eq!(text(&get["port"]), port_name, "{probe}");
    }

    let service = manifest("service.yaml");
    let service_port = &service["spec"]["ports"][0];
    assert_eq!(text(&service_port["targetPort"]), port_name);
    let ingress = manifest("ingress.yaml");
    for rule in ingress["spec"]["rules"].as_vec().unwrap() {
        for path in rule["http"]["paths"].as_vec().unwrap() {
            let backend = &path["backend"]["service"];
            assert_eq!(text(&backend["name"]), text(&service["metadata"]["name"]));
            assert_eq!(text(&backend["port"]["name"]), text(&service_port["name"]));
        }
    }
    assert!(!ingress["spec"]["tls"][0]["secretName"].is_badvalue());
    let annotations = ingress["metadata"]["annotations"].as_hash().unwrap();
    assert!(
        annotations.keys().all(|k| !text(k).ends_with("-snippet")),
        "a snippet annotation"
    );

    test_harness::manifests::assert_pod_hardened(&deployment);
    test_harness::manifests::assert_confined(
        &deployment,
        &test_harness::manifests::load("fleet-api/networkpolicy.yaml"),
    );
}

#[test]
fn the_api_reaches_cosmos_db_with_workload_identity_and_no_key() {
    test_harness::manifests::assert_keyless_cosmos(
        &manifest("deployment.yaml"),
        &test_harness::manifests::load("fleet-api/serviceaccount.yaml"),
        &manifest("secret.example.yaml"),
    );
}

#[test]
fn the_map_shows_azure_maps_tiles_fetched_with_workload_identity_and_no_key() {
    let deployment = manifest("deployment.yaml");
    let pod = &deployment["spec"]["template"];
    assert_eq!(
        text(&pod["metadata"]["labels"]["azure.workload.identity/use"]),
        "true"
    );
    let container = &pod["spec"]["containers"][0];
    let env = |name| test_harness::manifests::env_value(container, name);
    let url = env("MAP_TILE_URL").expect("a base map");
    assert!(
        url.starts_with("https://atlas.microsoft.com/map/tile?api-version=2024-04-01&tilesetId="),
        "not Azure Maps Render's raster tiles: {url}"
    );
    assert!(env("MAP_TILE_KEY_FILE").is_none() && env("MAP_TILE_KEY").is_none());
    let tiles = fleet_api::map_tiles(
        Some(url.into()),
        env("MAP_TILE_ATTRIBUTION").map(Into::into),
        None,
        env("MAP_TILE_CLIENT_ID").map(Into::into),
    )
    .unwrap()
    .unwrap();
    assert!(
        matches!(tiles.auth, fleet_api::TileAuth::Entra { .. }),
        "{tiles:?}"
    );
    assert!(manifest("secret.example.yaml")["stringData"]["MAP_TILE_KEY"].is_badvalue());
}
