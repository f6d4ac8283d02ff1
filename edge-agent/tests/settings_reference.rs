//! `SETTINGS.md` lists exactly the settings the agent accepts: every argument of
//! [`Settings`] with its variable and flag, the connection string and its `_FILE` form,
//! and the binary's own (`EDGE_AGENT_CONFIG`, `LOG_JSON`).

#[path = "../../cloud-writer/tests/settings_reference/check.rs"]
mod check;

use std::path::Path;

use clap::Args as _;
use edge_agent::{Settings, env_names};

#[test]
fn the_reference_lists_every_setting_and_nothing_else() {
    let command = Settings::augment_args(clap::Command::new("settings"));
    let accepted = check::accepted(
        &command,
        &check::file_keys::<Settings>(),
        &env_names(&clap::Command::new("edge-agent")),
        Path::new(env!("CARGO_BIN_EXE_edge-agent")),
    );
    assert!(
        accepted.contains_key("IOTHUB_DEVICE_CONNECTION_STRING_FILE")
            && accepted.contains_key("EDGE_AGENT_CONFIG")
    );
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("SETTINGS.md");
    if let Err(problems) = check::check(&accepted, &reference) {
        panic!("{problems}");
    }
}
