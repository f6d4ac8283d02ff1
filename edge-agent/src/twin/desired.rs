//! What a desired document or patch does to the settings the twin controls: which values
//! are taken, which refused and why, and the acknowledgement of each (the IoT Plug and Play
//! writable-property convention: `{"value", "ac", "av", "ad"}`). Pure: no clock, no I/O.
//!
//! A value is a JSON number of seconds, held to the rule of the local settings
//! ([`Cadence`]); a value that breaks it is refused (400) and the setting in effect kept. A
//! `null` in a patch, or a property absent from a whole document, takes the local setting
//! back. With `REMOTE_CONFIG=off` every change is refused (403).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cadence::Cadence;
use crate::cadence::RemoteConfig;

/// A setting the twin controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Property {
    /// `reportInterval`: `REPORT_INTERVAL`.
    ReportInterval,
    /// `publishEvery`: `PUBLISH_EVERY`.
    PublishEvery,
}

impl Property {
    pub(crate) const ALL: [Property; 2] = [Property::ReportInterval, Property::PublishEvery];

    /// The property's name in the twin.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Property::ReportInterval => "reportInterval",
            Property::PublishEvery => "publishEvery",
        }
    }

    /// The property's value in `cadence`, as the twin shows it.
    fn value(self, cadence: Cadence) -> Value {
        seconds_value(match self {
            Property::ReportInterval => cadence.report_interval(),
            Property::PublishEvery => cadence.publish_interval(),
        })
    }
}

/// A duration as a JSON number of seconds: whole seconds as an integer.
pub(crate) fn seconds_value(duration: Duration) -> Value {
    if duration.subsec_nanos() == 0 {
        Value::from(duration.as_secs())
    } else {
        Value::from(duration.as_secs_f64())
    }
}

/// The twin's overrides of the local settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Overrides {
    report_interval: Option<Duration>,
    publish_every: Option<Duration>,
}

impl Overrides {
    fn get(&self, property: Property) -> Option<Duration> {
        match property {
            Property::ReportInterval => self.report_interval,
            Property::PublishEvery => self.publish_every,
        }
    }

    fn set(&mut self, property: Property, value: Option<Duration>) {
        match property {
            Property::ReportInterval => self.report_interval = value,
            Property::PublishEvery => self.publish_every = value,
        }
    }

    /// The cadence of `local` with these overrides.
    pub(crate) fn cadence(&self, local: Cadence) -> Result<Cadence, crate::cadence::CadenceError> {
        Cadence::new(
            self.report_interval.unwrap_or(local.report_interval()),
            self.publish_every.or(local.publish_every()),
        )
    }
}

/// A writable-property acknowledgement, as reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Ack {
    /// The value in effect.
    pub(crate) value: Value,
    /// An HTTP-like status: 200 applied, 400 refused, 403 locked by `REMOTE_CONFIG=off`.
    pub(crate) ac: u16,
    /// The desired `$version` acknowledged.
    pub(crate) av: u64,
    /// What happened, for the operator.
    pub(crate) ad: String,
}

/// The outcome of desired properties.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Applied {
    /// The overrides now in effect.
    pub(crate) overrides: Overrides,
    /// The cadence now in effect.
    pub(crate) cadence: Cadence,
    /// The acknowledgement of every property the change touched.
    pub(crate) acks: BTreeMap<Property, Ack>,
}

/// The longest piece of a refused value quoted back in an acknowledgement.
const QUOTE_MAX: usize = 40;

/// Applies the desired `properties` of `version` (a whole document if `whole`, else a
/// patch) to `current` over the `local` settings.
pub(crate) fn apply(
    local: Cadence,
    current: Overrides,
    properties: &Map<String, Value>,
    version: u64,
    whole: bool,
    remote: RemoteConfig,
) -> Applied {
    let in_effect = current.cadence(local).unwrap_or(local);
    let ack = |property: Property, cadence: Cadence, ac: u16, ad: String| Ack {
        value: property.value(cadence),
        ac,
        av: version,
        ad,
    };
    if remote == RemoteConfig::Off {
        let acks = Property::ALL
            .into_iter()
            .filter(|p| properties.contains_key(p.name()))
            .map(|p| {
                let ad = "REMOTE_CONFIG=off on this drone: it keeps its local setting".to_owned();
                (p, ack(p, in_effect, 403, ad))
            })
            .collect();
        return Applied {
            overrides: current,
            cadence: in_effect,
            acks,
        };
    }
    let mut next = if whole { Overrides::default() } else { current };
    let mut taken = Vec::new();
    let mut refused = BTreeMap::new();
    for property in Property::ALL {
        match properties.get(property.name()) {
            None if whole && current.get(property).is_some() => taken.push(property),
            None => {}
            Some(Value::Null) => {
                next.set(property, None);
                taken.push(property);
            }
            Some(value) => match seconds(value) {
                Ok(duration) => {
                    next.set(property, Some(duration));
                    taken.push(property);
                }
                Err(reason) => {
                    next.set(property, current.get(property));
                    refused.insert(property, format!("{} refused: {reason}", quote(value)));
                }
            },
        }
    }
    let cadence = match next.cadence(local) {
        Ok(cadence) => cadence,
        Err(err) => {
            // Together the values cannot work: none of them is taken.
            for property in taken.drain(..) {
                next.set(property, current.get(property));
                let value = properties.get(property.name()).unwrap_or(&Value::Null);
                refused.insert(property, format!("{} refused: {err}", quote(value)));
            }
            in_effect
        }
    };
    let mut acks: BTreeMap<Property, Ack> = taken
        .into_iter()
        .map(|p| {
            let ad = match next.get(p) {
                Some(_) => "applied".to_owned(),
                None => "the local setting".to_owned(),
            };
            (p, ack(p, cadence, 200, ad))
        })
        .collect();
    for (property, reason) in refused {
        let ad = format!("{reason}; keeping {}", property.value(cadence));
        acks.insert(property, ack(property, cadence, 400, ad));
    }
    Applied {
        overrides: next,
        cadence,
        acks,
    }
}

/// A desired value as a duration: a JSON number of seconds.
fn seconds(value: &Value) -> Result<Duration, String> {
    let Some(seconds) = value.as_f64() else {
        return Err("not a number of seconds".into());
    };
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| "not a positive number of seconds within range".into())
}

/// `value` as JSON, cut short.
fn quote(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(QUOTE_MAX) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const S: Duration = Duration::from_secs(1);

    fn local() -> Cadence {
        Cadence::new(5 * S, None).unwrap()
    }

    fn props(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn ack_json(applied: &Applied, property: Property) -> Value {
        serde_json::to_value(&applied.acks[&property]).unwrap()
    }

    #[test]
    fn a_usable_value_is_applied_and_acknowledged_with_its_version() {
        let applied = apply(
            local(),
            Overrides::default(),
            &props(json!({"reportInterval": 1})),
            7,
            false,
            RemoteConfig::On,
        );
        assert_eq!(applied.cadence.report_interval(), S);
        // The convention's form (learn.microsoft.com, "IoT Plug and Play conventions").
        assert_eq!(
            ack_json(&applied, Property::ReportInterval),
            json!({"value": 1, "ac": 200, "av": 7, "ad": "applied"})
        );
        assert_eq!(applied.acks.len(), 1);

        let half = apply(
            local(),
            applied.overrides,
            &props(json!({"reportInterval": 0.5, "publishEvery": 2})),
            8,
            false,
            RemoteConfig::On,
        );
        assert_eq!(half.cadence, Cadence::new(S / 2, Some(2 * S)).unwrap());
        assert_eq!(half.acks[&Property::ReportInterval].value, json!(0.5));
    }

    #[test]
    fn a_value_that_cannot_work_is_refused_and_the_setting_kept() {
        for (bad, why) in [
            (json!(0), "longer than zero"),
            (json!("1s"), "not a number"),
            (json!(-3), "positive"),
            (json!(1e300), "positive"),
            (json!(86401), "24h"),
            (json!({"a": 1}), "not a number"),
        ] {
            let applied = apply(
                local(),
                Overrides::default(),
                &props(json!({ "reportInterval": bad })),
                3,
                false,
                RemoteConfig::On,
            );
            assert_eq!(applied.cadence, local(), "{bad}");
            assert_eq!(applied.overrides, Overrides::default());
            let ack = &applied.acks[&Property::ReportInterval];
            assert_eq!((ack.ac, ack.av, &ack.value), (400, 3, &json!(5)), "{bad}");
            assert!(
                ack.ad.contains(why) && ack.ad.contains("keeping 5"),
                "{}",
                ack.ad
            );
        }
    }

    #[test]
    fn values_that_work_only_apart_are_both_refused() {
        let local = Cadence::new(5 * S, Some(30 * S)).unwrap();
        let applied = apply(
            local,
            Overrides::default(),
            &props(json!({"reportInterval": 60})),
            2,
            false,
            RemoteConfig::On,
        );
        assert_eq!(applied.cadence, local);
        assert_eq!(applied.acks[&Property::ReportInterval].ac, 400);
        // Both in one patch work.
        let applied = apply(
            local,
            Overrides::default(),
            &props(json!({"reportInterval": 60, "publishEvery": 60})),
            3,
            false,
            RemoteConfig::On,
        );
        assert_eq!(applied.cadence, Cadence::new(60 * S, Some(60 * S)).unwrap());
        assert!(applied.acks.values().all(|a| a.ac == 200));
    }

    #[test]
    fn null_or_absence_takes_the_local_setting_back() {
        let applied = apply(
            local(),
            Overrides::default(),
            &props(json!({"reportInterval": 1})),
            2,
            false,
            RemoteConfig::On,
        );
        let removed = apply(
            local(),
            applied.overrides,
            &props(json!({"reportInterval": null})),
            3,
            false,
            RemoteConfig::On,
        );
        assert_eq!(removed.cadence, local());
        assert_eq!(
            ack_json(&removed, Property::ReportInterval),
            json!({"value": 5, "ac": 200, "av": 3, "ad": "the local setting"})
        );
        let whole = apply(
            local(),
            applied.overrides,
            &props(json!({"other": true})),
            4,
            true,
            RemoteConfig::On,
        );
        assert_eq!(whole.cadence, local());
        assert_eq!(whole.acks[&Property::ReportInterval].av, 4);
        // Nothing to say about a property that was never overridden.
        assert!(!whole.acks.contains_key(&Property::PublishEvery));
    }

    #[test]
    fn remote_config_off_refuses_every_change() {
        let applied = apply(
            local(),
            Overrides::default(),
            &props(json!({"reportInterval": 1, "publishEvery": null})),
            9,
            true,
            RemoteConfig::Off,
        );
        assert_eq!(applied.cadence, local());
        assert_eq!(applied.acks.len(), 2);
        for ack in applied.acks.values() {
            assert_eq!((ack.ac, ack.av, &ack.value), (403, 9, &json!(5)));
            assert!(ack.ad.contains("REMOTE_CONFIG=off"), "{}", ack.ad);
        }
    }

    #[test]
    fn a_long_refused_value_is_quoted_short() {
        let long = "x".repeat(10_000);
        let applied = apply(
            local(),
            Overrides::default(),
            &props(json!({ "reportInterval": long })),
            2,
            false,
            RemoteConfig::On,
        );
        assert!(applied.acks[&Property::ReportInterval].ad.len() < 200);
    }
}
