//! The rules, from the file `ALERT_RULES_FILE` (TOML, or JSON when the name ends in `.json`),
//! checked as a whole and read again when the file changes: a file that no longer parses is
//! logged and counted, and the rules read before stay in force.
//!
//! ```toml
//! [[rules]]
//! name = "corridor"
//! kind = "geofence"
//! fences = ["corridor-a"]   # every fence when left out
//! marginM = 25              # a crossing counts once the drone is this far past the border
//!
//! [[rules]]
//! name = "silent"
//! kind = "silent"
//! silentAfter = "30s"
//! airborneAboveM = 2        # altM of the last position
//!
//! [[rules]]
//! name = "battery"
//! kind = "battery"
//! belowPct = 20
//! rearmAbovePct = 25        # below again only after rising to this; default belowPct + 5
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use settings::DurationSetting;
use tokio::sync::watch;

/// The rules in force.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rules(pub Vec<Rule>);

/// One rule: its name and what it judges.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its name, unique in the file.
    pub name: String,
    /// What it judges.
    pub check: Check,
}

/// What a rule judges.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// Entering and leaving fences.
    Geofence {
        /// The fences by id; none: every fence.
        fences: Option<BTreeSet<String>>,
        /// How far past the border a crossing must go to count, metres.
        margin_m: f64,
    },
    /// A drone that stopped reporting while airborne.
    Silent {
        /// How long without a position.
        after: Duration,
        /// The lowest `altM` that counts as airborne.
        airborne_above_m: f64,
    },
    /// A battery below a threshold, once per crossing.
    Battery {
        /// The threshold, percent.
        below_pct: f64,
        /// The level it must rise to before it alerts again, percent.
        rearm_above_pct: f64,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rules: Vec<RuleSpec>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum RuleSpec {
    Geofence(GeofenceSpec),
    Silent(SilentSpec),
    Battery(BatterySpec),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GeofenceSpec {
    name: String,
    fences: Option<BTreeSet<String>>,
    #[serde(default)]
    margin_m: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SilentSpec {
    name: String,
    silent_after: DurationSetting,
    #[serde(default = "default_airborne")]
    airborne_above_m: f64,
}

fn default_airborne() -> f64 {
    1.0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BatterySpec {
    name: String,
    below_pct: f64,
    rearm_above_pct: Option<f64>,
}

/// Why a rules file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The file cannot be read.
    #[error("cannot read the rules file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file does not parse or a rule is wrong.
    #[error("the rules file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl Rules {
    /// Parses `text`, JSON if `json` else TOML, and checks every rule.
    pub fn parse(text: &str, json: bool) -> Result<Rules, String> {
        let file: File = if json {
            serde_json::from_str(text).map_err(|e| e.to_string())?
        } else {
            toml::from_str(text).map_err(|e| e.to_string())?
        };
        let mut names = BTreeSet::new();
        let mut rules = Vec::new();
        for spec in file.rules {
            let rule = spec.check()?;
            if !names.insert(rule.name.clone()) {
                return Err(format!(
                    "the rule name {:?} is used twice: names must be unique (alert ids and state are kept per rule)",
                    rule.name
                ));
            }
            rules.push(rule);
        }
        Ok(Rules(rules))
    }

    /// Reads and checks the file at `path`.
    pub fn read(path: &Path) -> Result<Rules, RulesError> {
        let text = std::fs::read_to_string(path).map_err(|source| RulesError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let json = path.extension().is_some_and(|e| e == "json");
        Rules::parse(&text, json).map_err(|message| RulesError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    /// The shortest `silentAfter` of the silent rules; none without one.
    pub fn shortest_silence(&self) -> Option<Duration> {
        self.0
            .iter()
            .filter_map(|r| match r.check {
                Check::Silent { after, .. } => Some(after),
                _ => None,
            })
            .min()
    }
}

impl RuleSpec {
    fn check(self) -> Result<Rule, String> {
        let named = |name: &str| {
            if name.trim().is_empty() {
                Err("a rule has an empty name: give every rule a name".to_string())
            } else {
                Ok(name.to_string())
            }
        };
        Ok(match self {
            RuleSpec::Geofence(s) => {
                if !(s.margin_m.is_finite() && (0.0..=500.0).contains(&s.margin_m)) {
                    return Err(format!(
                        "rule {:?}: marginM must be metres from 0 to 500 (Azure Maps' searchBuffer range)",
                        s.name
                    ));
                }
                Rule {
                    name: named(&s.name)?,
                    check: Check::Geofence {
                        fences: s.fences,
                        margin_m: s.margin_m,
                    },
                }
            }
            RuleSpec::Silent(s) => {
                if s.silent_after.0 < Duration::from_secs(1) {
                    return Err(format!(
                        "rule {:?}: silentAfter must be at least 1s",
                        s.name
                    ));
                }
                Rule {
                    name: named(&s.name)?,
                    check: Check::Silent {
                        after: s.silent_after.0,
                        airborne_above_m: s.airborne_above_m,
                    },
                }
            }
            RuleSpec::Battery(s) => {
                let rearm = s.rearm_above_pct.unwrap_or(s.below_pct + 5.0);
                if !((0.0..=100.0).contains(&s.below_pct) && rearm > s.below_pct) {
                    return Err(format!(
                        "rule {:?}: belowPct must be a percentage and rearmAbovePct above it",
                        s.name
                    ));
                }
                Rule {
                    name: named(&s.name)?,
                    check: Check::Battery {
                        below_pct: s.below_pct,
                        rearm_above_pct: rearm,
                    },
                }
            }
        })
    }
}

/// Reads the file every `every` and publishes its rules when its contents changed and
/// parse; `failed` is called for a file that does not.
pub async fn watch_file(
    path: PathBuf,
    every: Duration,
    rules: watch::Sender<Arc<Rules>>,
    failed: impl Fn(),
) {
    let mut last: Option<(SystemTime, u64)> = stamp(&path);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = stamp(&path);
        if now == last {
            continue;
        }
        last = now;
        match Rules::read(&path) {
            Ok(read) if **rules.borrow() == read => {}
            Ok(read) => {
                tracing::info!(path = %path.display(), rules = read.0.len(), "rules read again");
                rules.send_replace(Arc::new(read));
            }
            Err(e) => {
                tracing::error!(error = %e, "the rules file changed but cannot be used; the rules read before stay in force");
                failed();
            }
        }
    }
}

/// The file's modification time and length: what tells it changed.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_give_the_same_rules() {
        let toml = r#"
[[rules]]
name = "corridor"
kind = "geofence"
fences = ["a"]
marginM = 25

[[rules]]
name = "silent"
kind = "silent"
silentAfter = "30s"

[[rules]]
name = "battery"
kind = "battery"
belowPct = 20
"#;
        let json = r#"{"rules": [
            {"name": "corridor", "kind": "geofence", "fences": ["a"], "marginM": 25},
            {"name": "silent", "kind": "silent", "silentAfter": "30s"},
            {"name": "battery", "kind": "battery", "belowPct": 20}]}"#;
        let a = Rules::parse(toml, false).unwrap();
        assert_eq!(a, Rules::parse(json, true).unwrap());
        assert_eq!(a.shortest_silence(), Some(Duration::from_secs(30)));
        assert_eq!(
            a.0[2].check,
            Check::Battery {
                below_pct: 20.0,
                rearm_above_pct: 25.0
            }
        );
    }

    #[test]
    fn a_wrong_rule_says_what_to_write() {
        for (text, says) in [
            (
                r#"{"rules":[{"name":"a","kind":"geofence","marginM":900}]}"#,
                "marginM",
            ),
            (
                r#"{"rules":[{"name":"a","kind":"geofence","margin":9}]}"#,
                "margin",
            ),
            (
                r#"{"rules":[{"name":"a","kind":"battery","belowPct":20,"rearmAbovePct":10}]}"#,
                "rearmAbovePct",
            ),
            (
                r#"{"rules":[{"name":"a","kind":"silent","silentAfter":"0s"}]}"#,
                "silentAfter",
            ),
            (r#"{"rules":[{"name":"a","kind":"sms"}]}"#, "sms"),
            (
                r#"{"rules":[{"name":"a","kind":"geofence"},{"name":"a","kind":"geofence"}]}"#,
                "twice",
            ),
        ] {
            let err = Rules::parse(text, true).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
