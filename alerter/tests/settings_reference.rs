//! `SETTINGS.md` lists exactly the settings the alerter accepts: every argument of
//! [`Settings`] with its variable and flag, the secrets (`COSMOS_KEY`,
//! `ALERT_WEBHOOK_SECRET`, `ALERT_EVENTGRID_KEY` and their `_FILE` forms) and the binary's
//! own (`ALERTER_CONFIG`).

#[path = "../../cloud-writer/tests/settings_reference/check.rs"]
mod check;

use std::path::Path;

use alerter::Settings;
use clap::Args as _;
use settings::EnvNames;

#[test]
fn the_reference_lists_every_setting_and_nothing_else() {
    let command = Settings::augment_args(clap::Command::new("settings"));
    let names = EnvNames::settings(&command)
        .secret("COSMOS_KEY")
        .secret("ALERT_WEBHOOK_SECRET")
        .secret("ALERT_EVENTGRID_KEY");
    let accepted = check::accepted(
        &command,
        &check::file_keys::<Settings>(),
        &names,
        Path::new(env!("CARGO_BIN_EXE_alerter")),
    );
    assert!(
        accepted.contains_key("ALERT_WEBHOOK_SECRET_FILE")
            && accepted.contains_key("ALERTER_CONFIG")
    );
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("SETTINGS.md");
    if let Err(problems) = check::check(&accepted, &reference) {
        panic!("{problems}");
    }
}
