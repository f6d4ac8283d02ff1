//! The README's settings table lists exactly the settings `fleet-api` reads: every argument
//! of [`Settings`] by its variable, the account and tile keys (environment or file only), and nothing
//! the program does not read.

use std::collections::BTreeSet;
use std::path::Path;

use clap::Args as _;
use fleet_api::Settings;

#[test]
fn the_readme_lists_every_setting_and_nothing_else() {
    let command = Settings::augment_args(clap::Command::new("settings"));
    let mut read: BTreeSet<String> = command
        .get_arguments()
        .filter_map(|arg| arg.get_env()?.to_str().map(str::to_owned))
        .collect();
    // The secrets without a flag, read from the environment or their `_FILE`.
    read.insert("COSMOS_KEY".into());
    read.insert("MAP_TILE_KEY".into());
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split_once("\n## Settings\n")
        .and_then(|(_, rest)| rest.split("\n## ").next())
        .expect("the README has a Settings section");
    let listed: BTreeSet<String> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `")?.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .collect();
    let missing: Vec<_> = read.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&read).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "the README's settings table lacks {missing:?} and lists {unknown:?}, which fleet-api does not read"
    );
}
