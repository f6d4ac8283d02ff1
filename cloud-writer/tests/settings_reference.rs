//! `SETTINGS.md` lists exactly the settings the writer accepts: every argument of
//! [`Settings`] with its variable and flag, the secrets (`COSMOS_KEY`, `WRITER_SOURCE`,
//! `CHECKPOINT_BLOB_CONNECTION_STRING` and their `_FILE` forms) and the binary's own (`WRITER_CONFIG`).

#[path = "settings_reference/check.rs"]
mod check;

use std::path::Path;

use clap::Args as _;
use cloud_writer::Settings;
use settings::EnvNames;

#[test]
fn the_reference_lists_every_setting_and_nothing_else() {
    let command = Settings::augment_args(clap::Command::new("settings"));
    // The secrets `Settings::secrets_from_env` reads.
    let names = EnvNames::settings(&command)
        .secret("COSMOS_KEY")
        .secret("WRITER_SOURCE")
        .secret("CHECKPOINT_BLOB_CONNECTION_STRING");
    let accepted = check::accepted(
        &command,
        &check::file_keys::<Settings>(),
        &names,
        Path::new(env!("CARGO_BIN_EXE_cloud-writer")),
    );
    assert!(accepted.contains_key("WRITER_SOURCE_FILE") && accepted.contains_key("WRITER_CONFIG"));
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("SETTINGS.md");
    if let Err(problems) = check::check(&accepted, &reference) {
        panic!("{problems}");
    }
}
