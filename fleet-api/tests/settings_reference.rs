//! `SETTINGS.md` lists exactly the settings the read API accepts: every argument of
//! [`Settings`] with its variable and flag, the secrets without a flag (`COSMOS_KEY`,
//! `MAP_TILE_KEY` and their `_FILE` forms) and the binary's own (`FLEET_API_CONFIG`).

use std::path::Path;

use fleet_api::Settings;
use settings::EnvNames;

#[test]
fn the_reference_lists_every_setting_and_nothing_else() {
    // The secrets `Settings::secrets_from_env` reads.
    let accepted = settings::reference_holds::<Settings>(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        Path::new(env!("CARGO_BIN_EXE_fleet-api")),
        |command| {
            EnvNames::settings(command)
                .secret("COSMOS_KEY")
                .secret("MAP_TILE_KEY")
        },
    );
    assert!(
        accepted.contains_key("MAP_TILE_KEY_FILE") && accepted.contains_key("FLEET_API_CONFIG")
    );
}
