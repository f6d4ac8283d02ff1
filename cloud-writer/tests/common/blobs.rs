//! Blobs of Azurite read and written by Microsoft's storage client (the one the Python
//! checkpoint store ships, in `target/venv-checkpointstore`): what KEDA's scaler or the
//! Azure Functions extension would find or leave, without the writer's own blob client.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use test_harness::Azurite;

/// The Python of `target/venv-checkpointstore` (Microsoft's `azure-eventhub` with its
/// blob checkpoint store), which `scripts/test-all` makes.
pub fn python() -> PathBuf {
    let venv = std::env::var_os("CHECKPOINTSTORE_VENV").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-checkpointstore"),
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test-all installs it (cloud-writer/tests/python/requirements-checkpointstore.txt)",
        python.display()
    );
    python
}

/// `tests/python/blobs.py` with `args`; its standard output.
fn run(args: &[&str]) -> Vec<u8> {
    let output = Command::new(python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/blobs.py"
        ))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "blobs.py {}: {}",
        args[0],
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Every blob of `container` with its metadata.
pub fn list(azurite: &Azurite, container: &str) -> HashMap<String, HashMap<String, String>> {
    let listed = run(&["list", &azurite.connection_string(), container]);
    serde_json::from_slice(&listed).unwrap()
}

/// Writes an empty blob `name` with `metadata` into `container` (created when missing).
pub fn put(azurite: &Azurite, container: &str, name: &str, metadata: &HashMap<&str, String>) {
    let metadata = serde_json::to_string(metadata).unwrap();
    run(&[
        "put",
        &azurite.connection_string(),
        container,
        name,
        &metadata,
    ]);
}
