//! `SETTINGS.md` lists exactly the settings the read API accepts: every argument of
//! [`Settings`] with its variable and flag, the secrets without a flag (`COSMOS_KEY`,
//! `MAP_TILE_KEY` and their `_FILE` forms) and the binary's own (`FLEET_API_CONFIG`).

#[path = "../../cloud-writer/tests/settings_reference/check.rs"]
mod check;

use std::path::Path;

use clap::Args as _;
use fleet_api::Settings;
use settings::EnvNames;

#[test]
fn the_reference_lists_every_setting_and_nothing_else() {
    let command = Settings::augment_args(clap::Command::new("settings"));
    // The secrets `Settings::secrets_from_env` reads.
    let names = EnvNames::settings(&command)
        .secret("COSMOS_KEY")
        .secret("MAP_TILE_KEY");
    let accepted = check::accepted(
        &command,
        &check::file_keys::<Settings>(),
        &names,
        Path::new(env!("CARGO_BIN_EXE_fleet-api")),
    );
    assert!(
        accepted.contains_key("MAP_TILE_KEY_FILE") && accepted.contains_key("FLEET_API_CONFIG")
    );
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("SETTINGS.md");
    if let Err(problems) = check::check(&accepted, &reference) {
        panic!("{problems}");
    }
}
