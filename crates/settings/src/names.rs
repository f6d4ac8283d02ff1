//! The names of a program's settings, so that a misspelt one stops the program instead of
//! being ignored:
//!
//! - [`closest`]: the known name nearest to a wrong one (`MAVLINK_ADRESS` →
//!   `MAVLINK_ADDRESS`, `SOURCE` → `POSITION_SOURCE`), for environment variables and
//!   config file keys alike.
//! - [`EnvNames`]: the environment variables a program reads, taken from its clap
//!   command; [`EnvNames::check`] refuses a variable that carries one of the program's
//!   prefixes but is none of its settings, and [`EnvNames::lookalike`] finds the variable
//!   that was probably meant for a setting that is missing.

use std::collections::BTreeSet;
use std::fmt;

/// The one of `known` that `name` most likely meant: the nearest by edits (insert, delete,
/// replace or swap two neighbours), at most a quarter of the name's length away (at least
/// one edit); else the only one that ends or begins with `name` as whole words
/// (`SOURCE` → `POSITION_SOURCE`, `EDGE_POSITION_SOURCE` → `POSITION_SOURCE`). Case is
/// ignored (`gpsd_address` → `GPSD_ADDRESS`); `name` itself is no suggestion. Ties go to
/// the first in `known`.
pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let given = name;
    let name = name.to_ascii_uppercase();
    let limit = (name.len() / 4).max(1);
    let mut nearest: Option<(usize, &str)> = None;
    let mut by_words = Vec::new();
    for candidate in known {
        if candidate == given {
            continue;
        }
        let upper = candidate.to_ascii_uppercase();
        let distance = edits(&name, &upper);
        if distance <= limit && nearest.is_none_or(|(best, _)| distance < best) {
            nearest = Some((distance, candidate));
        }
        if upper.ends_with(&format!("_{name}")) || name.ends_with(&format!("_{upper}")) {
            by_words.push(candidate);
        }
    }
    match (nearest, by_words.as_slice()) {
        (Some((_, candidate)), _) => Some(candidate),
        (None, [only]) => Some(only),
        (None, _) => None,
    }
}

/// The optimal string alignment distance of `a` and `b` (Levenshtein with swaps of two
/// neighbouring characters), over bytes: setting names are ASCII.
fn edits(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Three rows of the table: two back, one back, this one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (previous[j] + 1)
                .min(row[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut previous, row);
    }
    previous[b.len()]
}

/// The environment variables of a program: the names it reads, and the prefixes that
/// mark a variable as meant for it.
///
/// A setting's prefix is its name without the last word (`MAX_FIX_` of `MAX_FIX_AGE`),
/// cut to the first word when that word begins several settings (`SIM_` of `SIM_SEED` and
/// `SIM_HOME_LAT`). Names added with [`EnvNames::program`] are known but give no prefix
/// (`LOG_JSON` does not make every `LOG_*` the program's), except the program's own name
/// (`EDGE_AGENT_` for `edge-agent`).
#[derive(Debug, Clone, Default)]
pub struct EnvNames {
    /// Names that give prefixes.
    settings: BTreeSet<String>,
    /// Names that are known but give none.
    others: BTreeSet<String>,
    /// Prefixes given outright.
    own_prefixes: BTreeSet<String>,
}

impl EnvNames {
    /// The settings of `command`: every argument's environment variable (of its
    /// subcommands too).
    pub fn settings(command: &clap::Command) -> EnvNames {
        let mut names = EnvNames::default();
        names.settings.extend(env_names(command));
        names
    }

    /// A secret read by [`crate::secret_from_env`]: `NAME` and `NAME_FILE`.
    pub fn secret(mut self, name: &str) -> EnvNames {
        self.settings.insert(name.to_owned());
        self.settings.insert(format!("{name}_FILE"));
        self
    }

    /// The whole command line of the program: its other variables (`EDGE_AGENT_CONFIG`,
    /// `LOG_JSON`) are known, and its name is a prefix (`EDGE_AGENT_`).
    pub fn program(mut self, command: &clap::Command) -> EnvNames {
        self.others.extend(env_names(command));
        self.own_prefixes.insert(format!(
            "{}_",
            command.get_name().to_ascii_uppercase().replace('-', "_")
        ));
        self
    }

    /// Whether the program reads `name`.
    pub fn is_known(&self, name: &str) -> bool {
        self.settings.contains(name) || self.others.contains(name)
    }

    fn known(&self) -> impl Iterator<Item = &str> {
        self.settings.union(&self.others).map(String::as_str)
    }

    /// The prefixes that mark a variable as the program's, sorted.
    pub fn prefixes(&self) -> BTreeSet<String> {
        let first_word = |name: &str| name.split_once('_').map(|(first, _)| first.to_owned());
        let mut prefixes = self.own_prefixes.clone();
        for name in &self.settings {
            let Some((without_last, _)) = name.rsplit_once('_') else {
                continue;
            };
            let first = first_word(name);
            let shared = self
                .settings
                .iter()
                .filter(|other| first_word(other) == first)
                .count()
                > 1;
            prefixes.insert(match first {
                Some(first) if shared => format!("{first}_"),
                _ => format!("{without_last}_"),
            });
        }
        prefixes
    }

    /// Refuses the variables among `vars` (the environment's names) that carry one of the
    /// program's prefixes but are none of its settings.
    pub fn check<'a>(
        &self,
        vars: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), UnknownVariables> {
        let prefixes = self.prefixes();
        let unknown: Vec<UnknownVariable> = vars
            .into_iter()
            .filter(|var| !self.is_known(var))
            .filter_map(|var| {
                let prefix = prefixes.iter().find(|p| var.starts_with(p.as_str()))?;
                Some(UnknownVariable {
                    name: var.to_owned(),
                    suggestion: closest(var, self.known()).map(str::to_owned),
                    prefix: prefix.clone(),
                })
            })
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(UnknownVariables(unknown))
        }
    }

    /// The variable among `vars` that is not the program's and looks like the setting
    /// `missing` (`SOURCE` for `POSITION_SOURCE`): probably meant for it.
    pub fn lookalike<'a>(
        &self,
        missing: &str,
        vars: impl IntoIterator<Item = &'a str>,
    ) -> Option<&'a str> {
        vars.into_iter()
            .filter(|var| !self.is_known(var))
            .find(|var| closest(var, [missing]).is_some())
    }
}

/// Every environment variable the arguments of `command` and its subcommands read.
fn env_names(command: &clap::Command) -> Vec<String> {
    let mut names: Vec<String> = command
        .get_arguments()
        .filter_map(|arg| arg.get_env())
        .filter_map(|env| env.to_str().map(str::to_owned))
        .collect();
    for sub in command.get_subcommands() {
        names.extend(env_names(sub));
    }
    names
}

/// A variable with one of the program's prefixes that is none of its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    /// The variable.
    pub name: String,
    /// The setting it probably meant.
    pub suggestion: Option<String>,
    /// The program's prefix it carries.
    pub prefix: String,
}

impl fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.suggestion {
            Some(suggestion) => write!(
                f,
                "{} is not a setting: did you mean {suggestion}?",
                self.name
            ),
            None => write!(
                f,
                "{} is not a setting (no setting is close to it; the settings are listed by --help, and {}* names are taken to be this program's)",
                self.name, self.prefix
            ),
        }
    }
}

/// The variables [`EnvNames::check`] refused, each with what was probably meant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct UnknownVariables(pub Vec<UnknownVariable>);

impl fmt::Display for UnknownVariables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, unknown) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{unknown}")?;
        }
        Ok(())
    }
}

/// The names of the variables in the environment (those that are Unicode).
pub fn env_var_names() -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    #[command(name = "edge-agent")]
    struct Cli {
        #[arg(long, env = "EDGE_AGENT_CONFIG")]
        config: Option<String>,
        #[arg(long, env = "LOG_JSON")]
        log_json: bool,
        #[command(flatten)]
        settings: Settings,
    }

    #[derive(clap::Args)]
    struct Settings {
        #[arg(long, env = "POSITION_SOURCE")]
        position_source: Option<String>,
        #[arg(long, env = "MAVLINK_ADDRESS")]
        mavlink_address: Option<String>,
        #[arg(long, env = "SIM_SEED")]
        sim_seed: Option<u64>,
        #[arg(long, env = "SIM_HOME_LAT")]
        sim_home_lat: Option<f64>,
        #[arg(long, env = "MAX_FIX_AGE")]
        max_fix_age: Option<String>,
        #[arg(long, env = "IOTHUB_PORT")]
        iothub_port: Option<u16>,
    }

    fn names() -> EnvNames {
        use clap::{Args as _, CommandFactory as _};
        EnvNames::settings(&Settings::augment_args(clap::Command::new("settings")))
            .secret("IOTHUB_DEVICE_CONNECTION_STRING")
            .program(&Cli::command())
    }

    #[test]
    fn the_closest_name_is_a_few_edits_or_the_whole_words_away() {
        let known = ["MAVLINK_ADDRESS", "GPSD_ADDRESS", "POSITION_SOURCE"];
        assert_eq!(closest("MAVLINK_ADRESS", known), Some("MAVLINK_ADDRESS"));
        assert_eq!(closest("GPSD_ADDERSS", known), Some("GPSD_ADDRESS"));
        assert_eq!(closest("gpsd_address", known), Some("GPSD_ADDRESS"));
        assert_eq!(closest("SOURCE", known), Some("POSITION_SOURCE"));
        assert_eq!(
            closest("DRONE_POSITION_SOURCE", known),
            Some("POSITION_SOURCE")
        );
        // Two settings end in ADDRESS: neither is suggested.
        assert_eq!(closest("ADDRESS", known), None);
        assert_eq!(closest("MQTT_URL", known), None);
        assert_eq!(
            closest("repot_interval", ["report_interval"]),
            Some("report_interval")
        );
        // The same name is not a suggestion for itself.
        assert_eq!(closest("GPSD_ADDRESS", known), None);
    }

    #[test]
    fn edits_count_swaps_once() {
        assert_eq!(edits("ABCD", "ABCD"), 0);
        assert_eq!(edits("ABCD", "ABDC"), 1);
        assert_eq!(edits("ABCD", "ABD"), 1);
        assert_eq!(edits("", "AB"), 2);
        assert_eq!(edits("KITTEN", "SITTING"), 3);
    }

    #[test]
    fn prefixes_come_from_the_settings_and_the_program_name() {
        let prefixes: Vec<String> = names().prefixes().into_iter().collect();
        assert_eq!(
            prefixes,
            [
                "EDGE_AGENT_",
                "IOTHUB_",
                "MAVLINK_",
                "MAX_FIX_",
                "POSITION_",
                "SIM_"
            ]
        );
    }

    #[test]
    fn unknown_variables_with_a_prefix_are_refused_with_a_suggestion() {
        let names = names();
        let vars = [
            "PATH",
            "POSITION_SOURCE",
            "MAVLINK_ADRESS",
            "LOG_JSON",
            "LOG_LEVEL",
            "MAX_FIX_AEG",
            "MAX_THREADS",
            "IOTHUB_DEVICE_CONNECTION_STRING_FILE",
            "EDGE_AGENT_CONFIG",
            "SIM_WIND",
        ];
        let err = names.check(vars).unwrap_err();
        let refused: Vec<&str> = err.0.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(refused, ["MAVLINK_ADRESS", "MAX_FIX_AEG", "SIM_WIND"]);
        let message = err.to_string();
        assert!(
            message.starts_with("MAVLINK_ADRESS is not a setting: did you mean MAVLINK_ADDRESS?"),
            "{message}"
        );
        assert!(message.contains("MAX_FIX_AEG is not a setting: did you mean MAX_FIX_AGE?"));
        assert!(message.contains("SIM_WIND is not a setting (no setting is close"));
        assert!(
            names
                .check(["PATH", "SIM_SEED", "EDGE_AGENT_CONFIG"])
                .is_ok()
        );
    }

    #[test]
    fn a_missing_setting_names_the_variable_that_looks_like_it() {
        let names = names();
        let vars = ["PATH", "SOURCE", "HOME"];
        assert_eq!(names.lookalike("POSITION_SOURCE", vars), Some("SOURCE"));
        assert_eq!(names.lookalike("POSITION_SOURCE", ["PATH"]), None);
        // A variable of the program's own is not a lookalike of another.
        assert_eq!(names.lookalike("POSITION_SOURCE", ["SIM_SEED"]), None);
    }
}
