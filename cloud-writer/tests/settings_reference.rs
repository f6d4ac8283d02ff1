//! `SETTINGS.md` lists exactly the settings the writer accepts: every argument of
//! [`Settings`] with its variable and flag, the secrets (`COSMOS_KEY`, `WRITER_SOURCE`,
//! `CHECKPOINT_BLOB_CONNECTION_STRING` and their `_FILE` forms) and the binary's own (`WRITER_CONFIG`).

use std::path::Path;

use cloud_writer::Settings;
use settings::EnvNames;

#[test]
fn the_reference_lists_every_setting_and_nothing_else() {
    // The secrets `Settings::secrets_from_env` reads.
    let accepted = settings::reference_holds::<Settings>(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        Path::new(env!("CARGO_BIN_EXE_cloud-writer")),
        |command| {
            EnvNames::settings(command)
                .secret("COSMOS_KEY")
                .secret("WRITER_SOURCE")
                .secret("CHECKPOINT_BLOB_CONNECTION_STRING")
        },
    );
    assert!(accepted.contains_key("WRITER_SOURCE_FILE") && accepted.contains_key("WRITER_CONFIG"));
}
