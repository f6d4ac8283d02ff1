//! The judging of positions, a pure state machine with no I/O: a drone's [`DroneState`] and
//! its new position (or, for silence, its last position and the time now) give the alerts,
//! and the new state. The state is what must survive a restart or a lease takeover for the
//! next judgement to be right; [`crate::state`] keeps it.
//!
//! - Geofences: a fence's side is recorded at a drone's first position (no alert); a
//!   crossing counts only once the drone is `marginM` past the border, so flying along a
//!   border within the margin alerts once, not per position (hysteresis of twice the margin).
//! - Battery: an alert when the level falls below `belowPct`, once, until it rises to
//!   `rearmAbovePct`.
//! - Silent: an alert when the last position said airborne and the drone has been silent
//!   for longer than `silentAfter`, once per last position. Silent counts from the last
//!   position; when the agent is disconnected (the writer's connection state), from the
//!   later of the last position and the disconnect, since the agent was online until the
//!   hub saw it go. So an agent that disconnected mid-flight alerts once it has stayed
//!   disconnected for `silentAfter`, with the disconnect's time; a drone that landed and
//!   then disconnected does not (its last position is on the ground).

use std::collections::{BTreeMap, BTreeSet};

use fleet_api::FenceSet;
use fleet_api::LonLat;
use serde::{Deserialize, Serialize};

use crate::alert::{Alert, AlertKind, Position};
use crate::rules::{Check, Rules};

/// What judging a drone needs to remember.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DroneState {
    /// Per geofence rule, the side of each fence the drone was last judged on (true: inside).
    #[serde(default)]
    pub sides: BTreeMap<String, BTreeMap<String, bool>>,
    /// The battery rules whose threshold the drone is below.
    #[serde(default)]
    pub battery_low: BTreeSet<String>,
    /// Per silent rule, the device time (Unix ms) of the last position it alerted on.
    #[serde(default)]
    pub silent: BTreeMap<String, i64>,
}

/// The alerts a new position gives, updating `state`.
pub fn judge(rules: &Rules, fences: &FenceSet, state: &mut DroneState, p: &Position) -> Vec<Alert> {
    let mut alerts = Vec::new();
    let alert = |rule: &str, kind, fence: Option<&str>| Alert {
        rule: rule.to_string(),
        kind,
        fence: fence.map(str::to_string),
        position: p.clone(),
    };
    for rule in &rules.0 {
        match &rule.check {
            Check::Geofence {
                fences: only,
                margin_m,
            } => {
                let Ok(at) = LonLat::new(p.lon, p.lat, "position") else {
                    continue;
                };
                let sides = state.sides.entry(rule.name.clone()).or_default();
                let mut present = BTreeSet::new();
                for place in fences.place(at) {
                    if only
                        .as_ref()
                        .is_some_and(|only| !only.contains(place.fence))
                    {
                        continue;
                    }
                    present.insert(place.fence);
                    match sides.get(place.fence) {
                        None => {
                            sides.insert(place.fence.to_string(), place.inside);
                        }
                        Some(&was) if was != place.inside && place.border_m >= *margin_m => {
                            sides.insert(place.fence.to_string(), place.inside);
                            let kind = if place.inside {
                                AlertKind::Enter
                            } else {
                                AlertKind::Leave
                            };
                            alerts.push(alert(&rule.name, kind, Some(place.fence)));
                        }
                        Some(_) => {}
                    }
                }
                // A fence deleted (or left out of the rule) is forgotten.
                sides.retain(|fence, _| present.contains(fence.as_str()));
            }
            Check::Battery {
                below_pct,
                rearm_above_pct,
            } => {
                let Some(level) = p.battery_pct else { continue };
                let low = state.battery_low.contains(&rule.name);
                if !low && level < *below_pct {
                    state.battery_low.insert(rule.name.clone());
                    alerts.push(alert(&rule.name, AlertKind::LowBattery, None));
                } else if low && level >= *rearm_above_pct {
                    state.battery_low.remove(&rule.name);
                }
            }
            Check::Silent { .. } => {}
        }
    }
    alerts
}

/// The alerts of a drone whose last position is `p`, at `now_ms` (Unix ms), updating `state`.
pub fn judge_silence(
    rules: &Rules,
    state: &mut DroneState,
    p: &Position,
    now_ms: i64,
) -> Vec<Alert> {
    let mut alerts = Vec::new();
    for rule in &rules.0 {
        let Check::Silent {
            after,
            airborne_above_m,
        } = &rule.check
        else {
            continue;
        };
        let airborne = p.alt_m.is_some_and(|alt| alt >= *airborne_above_m);
        let since = p
            .disconnected
            .as_ref()
            .map_or(p.device_time_ms, |gone| gone.at_ms.max(p.device_time_ms));
        let silent_for = now_ms - since;
        let told = state.silent.get(&rule.name) == Some(&p.device_time_ms);
        if airborne && silent_for > after.as_millis() as i64 && !told {
            state.silent.insert(rule.name.clone(), p.device_time_ms);
            alerts.push(Alert {
                rule: rule.name.clone(),
                kind: AlertKind::Silent,
                fence: None,
                position: p.clone(),
            });
        }
    }
    alerts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A 0.01° square fence (about 1.1 km) and the three rules.
    fn setup() -> (Rules, FenceSet) {
        let rules = Rules::parse(
            r#"{"rules":[{"name":"fence","kind":"geofence","marginM":20},
                          {"name":"battery","kind":"battery","belowPct":20},
                          {"name":"silent","kind":"silent","silentAfter":"30s","airborneAboveM":5}]}"#,
            true,
        )
        .unwrap();
        let fences = fleet_api::FenceSet::from_features(&[(
            "sq".to_string(),
            json!({"type":"Polygon","coordinates":[[[0.0,0.0],[0.01,0.0],[0.01,0.01],[0.0,0.01],[0.0,0.0]]]}),
        )]);
        (rules, fences)
    }

    fn at(lon: f64, ms: i64) -> Position {
        Position {
            device_id: "d".into(),
            device_time: format!("t{ms}"),
            device_time_ms: ms,
            lon,
            lat: 0.005,
            alt_m: Some(50.0),
            battery_pct: None,
            disconnected: None,
        }
    }

    fn kinds(alerts: &[Alert]) -> Vec<AlertKind> {
        alerts.iter().map(|a| a.kind).collect()
    }

    #[test]
    fn a_crossing_alerts_once_each_way_and_the_border_within_the_margin_not_at_all() {
        let (rules, fences) = setup();
        let mut state = DroneState::default();
        // First sight, outside: no alert.
        assert!(judge(&rules, &fences, &mut state, &at(-0.001, 0)).is_empty());
        // Along the western border, within 20 m (0.0001° is about 11 m) on both sides.
        for (i, lon) in [-0.0001, 0.0001, -0.00015, 0.00012, -0.0001]
            .iter()
            .enumerate()
        {
            assert!(judge(&rules, &fences, &mut state, &at(*lon, i as i64 + 1)).is_empty());
        }
        let enter = judge(&rules, &fences, &mut state, &at(0.001, 10));
        assert_eq!(kinds(&enter), [AlertKind::Enter]);
        assert_eq!(enter[0].fence.as_deref(), Some("sq"));
        assert!(judge(&rules, &fences, &mut state, &at(0.005, 11)).is_empty());
        // Back over the border but within the margin: still inside as far as alerts go.
        assert!(judge(&rules, &fences, &mut state, &at(-0.0001, 12)).is_empty());
        let leave = judge(&rules, &fences, &mut state, &at(-0.002, 13));
        assert_eq!(kinds(&leave), [AlertKind::Leave]);
        // The state survives a round trip through its document form.
        let kept: DroneState =
            serde_json::from_value(serde_json::to_value(&state).unwrap()).unwrap();
        assert_eq!(kept, state);
    }

    #[test]
    fn a_low_battery_alerts_once_per_crossing() {
        let (rules, fences) = setup();
        let mut state = DroneState::default();
        let mut alerts = Vec::new();
        for (i, level) in [40.0, 25.0, 19.0, 18.0, 21.0, 12.0, 26.0, 15.0]
            .iter()
            .enumerate()
        {
            let mut p = at(-0.01, i as i64);
            p.battery_pct = Some(*level);
            alerts.extend(judge(&rules, &fences, &mut state, &p));
        }
        // 19 alerts, 21 does not rearm (below 25), 26 rearms, 15 alerts again.
        let levels: Vec<f64> = alerts
            .iter()
            .map(|a| a.position.battery_pct.unwrap())
            .collect();
        assert_eq!(levels, [19.0, 15.0]);
    }

    #[test]
    fn a_silent_airborne_drone_alerts_once_per_last_position() {
        let (rules, _) = setup();
        let mut state = DroneState::default();
        let last = at(0.0, 1_000_000);
        assert!(judge_silence(&rules, &mut state, &last, 1_000_000 + 29_000).is_empty());
        assert_eq!(
            kinds(&judge_silence(
                &rules,
                &mut state,
                &last,
                1_000_000 + 31_000
            )),
            [AlertKind::Silent]
        );
        assert!(judge_silence(&rules, &mut state, &last, 1_000_000 + 90_000).is_empty());
        let mut landed = at(0.0, 2_000_000);
        landed.alt_m = Some(0.5);
        assert!(judge_silence(&rules, &mut state, &landed, 3_000_000).is_empty());
    }

    #[test]
    fn a_disconnected_agent_is_silent_from_its_disconnect_once() {
        let (rules, _) = setup();
        let mut state = DroneState::default();
        let gone = |at_ms| {
            Some(crate::alert::Disconnected {
                at: format!("t{at_ms}"),
                at_ms,
            })
        };
        let mut last = at(0.0, 1_000_000);
        last.disconnected = gone(1_010_000);
        // 31 s after the last position but 21 s after the disconnect: not yet.
        assert!(judge_silence(&rules, &mut state, &last, 1_031_000).is_empty());
        let alerts = judge_silence(&rules, &mut state, &last, 1_041_000);
        assert_eq!(kinds(&alerts), [AlertKind::Silent]);
        assert_eq!(alerts[0].position.disconnected, gone(1_010_000));
        // Once per silence: a second disconnect with no position in between is the same one.
        last.disconnected = gone(1_100_000);
        assert!(judge_silence(&rules, &mut state, &last, 1_200_000).is_empty());
        // Landed, then disconnected: nothing.
        let mut landed = at(0.0, 2_000_000);
        landed.alt_m = Some(0.5);
        landed.disconnected = gone(2_001_000);
        assert!(judge_silence(&rules, &mut state, &landed, 3_000_000).is_empty());
    }
}
