//! `SETTINGS.md` lists exactly the settings the alerter accepts: every argument of
//! [`Settings`] with its variable and flag, the secrets (`COSMOS_KEY`,
//! `ALERT_WEBHOOK_SECRET`, `ALERT_EVENTGRID_KEY` and their `_FILE` forms) and the binary's
//! own (`ALERTER_CONFIG`).

use std::path::Path;

use alerter::Settings;
use settings::EnvNames;

#[test]
fn the_reference_lists_every_setting_and_nothing_else() {
    // The secrets `Settings::secrets_from_env` reads.
    let accepted = settings::reference_holds::<Settings>(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        Path::new(env!("CARGO_BIN_EXE_alerter")),
        |command| {
            EnvNames::settings(command)
                .secret("COSMOS_KEY")
                .secret("ALERT_WEBHOOK_SECRET")
                .secret("ALERT_EVENTGRID_KEY")
        },
    );
    assert!(
        accepted.contains_key("ALERT_WEBHOOK_SECRET_FILE")
            && accepted.contains_key("ALERTER_CONFIG")
    );
}
