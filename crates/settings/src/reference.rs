//! The check that holds each program's settings reference (`SETTINGS.md`) to the settings
//! it reads ([`reference_holds`]), for the programs' `tests/settings_reference.rs`: what the program
//! accepts is taken from its code (its settings' clap arguments and file keys, its secrets,
//! its binary's `--help`) and compared with the table of the reference. Built with the
//! `reference` feature, as a dev-dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::de::DeserializeOwned;

use crate::EnvNames;

/// A setting's environment variable and its flag (`None`: environment or file only).
pub type Accepted = BTreeMap<String, Option<String>>;

/// What the program of the crate at `manifest_dir` accepts, after checking that its
/// `SETTINGS.md` lists exactly that, with the same flags; panics naming what the reference
/// is missing, what it lists that the program does not accept, and the flags that differ.
///
/// `S` is the program's settings type; `binary` its executable (`env!("CARGO_BIN_EXE_…")`);
/// `names` builds the program's own [`EnvNames`] from the command of `S`: every setting and
/// secret must be known to it.
pub fn reference_holds<S: clap::Args + DeserializeOwned>(
    manifest_dir: &Path,
    binary: &Path,
    names: impl FnOnce(&clap::Command) -> EnvNames,
) -> Accepted {
    let command = S::augment_args(clap::Command::new("settings"));
    let names = names(&command);
    let accepted = accepted(&command, &file_keys::<S>(), &names, binary);
    let reference = manifest_dir.join("SETTINGS.md");
    let text = std::fs::read_to_string(&reference)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", reference.display()));
    let problems = problems(&accepted, &text);
    assert!(
        problems.is_empty(),
        "{}: {}",
        reference.display(),
        problems.join("; ")
    );
    accepted
}

/// The keys of a program's config file, as its `Deserialize` declares them: serde's error
/// for an unknown key lists every known one.
fn file_keys<T: DeserializeOwned>() -> Vec<String> {
    use serde::de::value::{Error, MapDeserializer};
    let unknown = "not_a_setting_of_any_program";
    let err = match T::deserialize(MapDeserializer::<_, Error>::new(std::iter::once((
        unknown, 0u8,
    )))) {
        Ok(_) => panic!("the settings took the key {unknown}: they must deny unknown keys"),
        Err(err) => err.to_string(),
    };
    let (_, expected) = err
        .split_once("expected")
        .unwrap_or_else(|| panic!("not an unknown-key error: {err}"));
    backticked(expected).map(str::to_owned).collect()
}

/// Everything a program accepts:
/// - every argument of `settings` (its `Settings::augment_args`) that reads a variable,
///   with its flag;
/// - its secrets: the config file keys (`file_keys`) that no argument reads from the
///   environment, read by [`crate::secret_from_env`] as `NAME` and `NAME_FILE` (the flag
///   of the argument of the same id, if any: `--source` for `WRITER_SOURCE`);
/// - the variables of the program's own command line (`--config`, logging), from
///   `binary --help`.
fn accepted(
    settings: &clap::Command,
    file_keys: &[String],
    names: &EnvNames,
    binary: &Path,
) -> Accepted {
    let mut accepted = Accepted::new();
    for arg in settings.get_arguments() {
        if let Some(env) = arg.get_env().and_then(|env| env.to_str()) {
            accepted.insert(env.to_owned(), arg.get_long().map(str::to_owned));
        }
    }
    for key in file_keys {
        let name = key.to_ascii_uppercase();
        if accepted.contains_key(&name) {
            continue;
        }
        let flag = settings
            .get_arguments()
            .find(|arg| arg.get_id() == key.as_str())
            .and_then(|arg| arg.get_long().map(str::to_owned));
        accepted.entry(format!("{name}_FILE")).or_insert(None);
        accepted.insert(name, flag);
    }
    let unknown: Vec<&String> = accepted.keys().filter(|n| !names.is_known(n)).collect();
    assert!(
        unknown.is_empty(),
        "the program's EnvNames does not know {unknown:?}: it would refuse them"
    );
    for (flag, env) in help_settings(binary) {
        accepted.entry(env).or_insert(Some(flag));
    }
    accepted
}

/// The (flag, variable) pairs of `binary --help`.
fn help_settings(binary: &Path) -> Vec<(String, String)> {
    let out = std::process::Command::new(binary)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    assert!(out.status.success(), "{} --help failed", binary.display());
    let help = String::from_utf8(out.stdout).expect("help is UTF-8");
    // An option's block: its line (`  -x, --name <NAME>`), then its description.
    let mut blocks: Vec<String> = Vec::new();
    for line in help.lines() {
        if line.trim_start().starts_with('-') {
            blocks.push(String::new());
        }
        if let Some(block) = blocks.last_mut() {
            block.push_str(line);
            block.push(' ');
        }
    }
    blocks
        .iter()
        .filter_map(|block| {
            let flag = block
                .split_whitespace()
                .find_map(|word| word.strip_prefix("--"))?
                .trim_end_matches(',');
            let (_, env) = block.split_once("[env: ")?;
            let (env, _) = env.split_once('=')?;
            Some((flag.to_owned(), env.to_owned()))
        })
        .collect()
}

/// One row of the reference's table: the variables of its first column and the flags of
/// its second.
#[derive(Debug)]
struct Row {
    names: Vec<String>,
    flags: BTreeSet<String>,
}

/// The rows of the table whose header begins `| Variable | Flag |`.
fn documented(reference: &str) -> Vec<Row> {
    let mut lines = reference
        .lines()
        .skip_while(|line| !line.starts_with("| Variable | Flag |"))
        .skip(2);
    let mut rows = Vec::new();
    for line in lines.by_ref().take_while(|line| line.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').collect();
        let (names, flags) = (cells[1], cells.get(2).copied().unwrap_or_default());
        rows.push(Row {
            names: backticked(names).map(str::to_owned).collect(),
            flags: backticked(flags)
                .filter_map(|flag| flag.strip_prefix("--"))
                .map(str::to_owned)
                .collect(),
        });
    }
    rows
}

/// The text between pairs of backticks.
fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// Where the reference `text` and what the program accepts differ: what the reference is
/// missing, what it lists that the program does not accept, names listed twice, and flags
/// that differ.
fn problems(accepted: &Accepted, text: &str) -> Vec<String> {
    let rows = documented(text);
    let mut problems = Vec::new();
    let mut listed = BTreeSet::new();
    let mut listed_twice = BTreeSet::new();
    let mut not_accepted = BTreeSet::new();
    for row in &rows {
        for name in &row.names {
            if !listed.insert(name.clone()) {
                listed_twice.insert(name.clone());
            }
            if !accepted.contains_key(name) {
                not_accepted.insert(name.clone());
            }
        }
        let flags: BTreeSet<String> = row
            .names
            .iter()
            .filter_map(|name| accepted.get(name).cloned().flatten())
            .collect();
        if row.names.iter().all(|name| accepted.contains_key(name)) && flags != row.flags {
            let dashed = |flags: &BTreeSet<String>| {
                let flags: Vec<String> = flags.iter().map(|flag| format!("--{flag}")).collect();
                format!("[{}]", flags.join(", "))
            };
            problems.push(format!(
                "the flags of {} are {}, the reference says {}",
                row.names.join(", "),
                dashed(&flags),
                dashed(&row.flags)
            ));
        }
    }
    let missing: Vec<&String> = accepted.keys().filter(|n| !listed.contains(*n)).collect();
    if !missing.is_empty() {
        problems.push(format!("missing from the reference: {missing:?}"));
    }
    if !not_accepted.is_empty() {
        problems.push(format!(
            "listed in the reference, but not accepted by the program: {not_accepted:?}"
        ));
    }
    if !listed_twice.is_empty() {
        problems.push(format!("listed twice: {listed_twice:?}"));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Settings {
        endpoint: Option<String>,
        key: Option<String>,
    }

    #[test]
    fn the_file_keys_are_the_fields() {
        assert_eq!(file_keys::<Settings>(), ["endpoint", "key"]);
    }

    #[test]
    fn every_difference_is_named() {
        let accepted = Accepted::from([
            ("ENDPOINT".to_owned(), Some("endpoint".to_owned())),
            ("KEY".to_owned(), None),
            ("KEY_FILE".to_owned(), None),
        ]);
        let table = |rows: &str| {
            format!(
                "# Settings\n\n| Variable | Flag | Meaning |\n| --- | --- | --- |\n{rows}\nAfter the table.\n"
            )
        };
        let exact =
            table("| `ENDPOINT` | `--endpoint` | where |\n| `KEY`, `KEY_FILE` | | the key |");
        assert_eq!(problems(&accepted, &exact), Vec::<String>::new());
        let wrong = table(
            "| `ENDPOINT` | `--end` | where |\n| `KEY` | | the key |\n| `KEY` | | again |\n| `RETRIES` | | gone |",
        );
        let found = problems(&accepted, &wrong).join("; ");
        for expected in [
            "the flags of ENDPOINT are [--endpoint], the reference says [--end]",
            "missing from the reference: [\"KEY_FILE\"]",
            "not accepted by the program: {\"RETRIES\"}",
            "listed twice: {\"KEY\"}",
        ] {
            assert!(found.contains(expected), "{expected} not in {found}");
        }
    }
}
