//! `SETTINGS.md` lists exactly the settings the agent accepts: every argument of
//! [`Settings`] with its variable and flag, the connection string and its `_FILE` form,
//! and the binary's own (`EDGE_AGENT_CONFIG`, `LOG_JSON`).

use std::path::Path;

use edge_agent::{Settings, env_names};

#[test]
fn the_reference_lists_every_setting_and_nothing_else() {
    let accepted = settings::reference_holds::<Settings>(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        Path::new(env!("CARGO_BIN_EXE_edge-agent")),
        |_| env_names(&clap::Command::new("edge-agent")),
    );
    assert!(
        accepted.contains_key("IOTHUB_DEVICE_CONNECTION_STRING_FILE")
            && accepted.contains_key("EDGE_AGENT_CONFIG")
    );
}
