//! An alert: what a rule found about one drone at one of its positions, the stable id derived
//! from them, and its CloudEvents 1.0 form (structured JSON).
//!
//! The id is a hash of the drone, the rule, the alert's kind and fence, and the position
//! (device time, longitude, latitude): judging the same position again (a replay after a crash
//! or a lease takeover) gives the same id, which receivers deduplicate by (`source` + `id`).
//! A silent alert of a drone whose agent disconnected also carries the disconnect's time
//! (`agentDisconnectedAt`); its id is still the last position's, so a silence judged before
//! and after the disconnect was stored has one id.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What an alert says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlertKind {
    /// The drone entered a fence.
    Enter,
    /// The drone left a fence.
    Leave,
    /// The drone stopped reporting while airborne.
    Silent,
    /// The drone's battery fell below the rule's threshold.
    LowBattery,
}

impl AlertKind {
    /// The name in the event's data and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            AlertKind::Enter => "enter",
            AlertKind::Leave => "leave",
            AlertKind::Silent => "silent",
            AlertKind::LowBattery => "lowBattery",
        }
    }

    /// The CloudEvents `type`.
    pub fn event_type(self) -> &'static str {
        match self {
            AlertKind::Enter => "drone.alert.geofence.entered",
            AlertKind::Leave => "drone.alert.geofence.exited",
            AlertKind::Silent => "drone.alert.silent",
            AlertKind::LowBattery => "drone.alert.battery.low",
        }
    }
}

/// A drone's position as its latest document holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Position {
    /// The device id.
    pub device_id: String,
    /// Device time, RFC 3339.
    pub device_time: String,
    /// Device time, Unix milliseconds.
    pub device_time_ms: i64,
    /// Longitude, degrees.
    pub lon: f64,
    /// Latitude, degrees.
    pub lat: f64,
    /// Altitude, metres.
    pub alt_m: Option<f64>,
    /// Battery, percent.
    pub battery_pct: Option<f64>,
    /// When the drone's agent disconnected, if the document says it is disconnected
    /// (`agentConnected` false, `agentDisconnectedAt`, set by the writer from IoT Hub's
    /// connection state events); none while connected or with no connection state.
    pub disconnected: Option<Disconnected>,
}

/// The disconnect of a drone's agent, as its latest document holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Disconnected {
    /// `agentDisconnectedAt`, RFC 3339 as stored.
    pub at: String,
    /// The same, Unix milliseconds.
    pub at_ms: i64,
}

impl Disconnected {
    /// The disconnect a latest document records, if its agent is disconnected.
    fn from_document(doc: &Value) -> Option<Disconnected> {
        if doc["agentConnected"] != false {
            return None;
        }
        let at = doc["agentDisconnectedAt"].as_str()?;
        let at_ms = chrono::DateTime::parse_from_rfc3339(at)
            .ok()?
            .timestamp_millis();
        Some(Disconnected {
            at: at.to_string(),
            at_ms,
        })
    }
}

impl Position {
    /// The position of a latest document (`kind` `latest`, with a `location`); none for any
    /// other document (history, or an agent's state before its first position).
    pub fn from_document(doc: &Value) -> Option<Position> {
        if doc["kind"] != "latest" {
            return None;
        }
        let coordinates = doc["location"]["coordinates"].as_array()?;
        Some(Position {
            device_id: doc["deviceId"].as_str()?.to_string(),
            device_time: doc["deviceTime"].as_str()?.to_string(),
            device_time_ms: doc["deviceTimeMs"].as_i64()?,
            lon: coordinates.first()?.as_f64()?,
            lat: coordinates.get(1)?.as_f64()?,
            alt_m: doc["altM"].as_f64(),
            battery_pct: doc["batteryPct"].as_f64(),
            disconnected: Disconnected::from_document(doc),
        })
    }
}

/// One alert.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// The rule's name.
    pub rule: String,
    /// What it says.
    pub kind: AlertKind,
    /// The fence entered or left.
    pub fence: Option<String>,
    /// The position that triggered it (a silent drone: its last one).
    pub position: Position,
}

impl Alert {
    /// The stable id: 32 hex digits of SHA-256 over the drone, rule, kind, fence and position.
    pub fn id(&self) -> String {
        let p = &self.position;
        let text = format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n{}",
            p.device_id,
            self.rule,
            self.kind.name(),
            self.fence.as_deref().unwrap_or(""),
            p.device_time_ms,
            p.lon,
            p.lat
        );
        Sha256::digest(text.as_bytes())[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The CloudEvent (structured mode), with `source` as its source.
    pub fn cloud_event(&self, source: &str) -> Value {
        let p = &self.position;
        let mut data = json!({
            "deviceId": p.device_id,
            "rule": self.rule,
            "alert": self.kind.name(),
            "location": {"type": "Point", "coordinates": [p.lon, p.lat]},
            "deviceTime": p.device_time,
            "deviceTimeMs": p.device_time_ms,
        });
        if let Some(fence) = &self.fence {
            data["fence"] = fence.clone().into();
        }
        if let Some(alt) = p.alt_m {
            data["altM"] = alt.into();
        }
        if let Some(battery) = p.battery_pct {
            data["batteryPct"] = battery.into();
        }
        if let (AlertKind::Silent, Some(gone)) = (self.kind, &p.disconnected) {
            data["agentDisconnectedAt"] = gone.at.clone().into();
        }
        json!({
            "specversion": "1.0",
            "id": self.id(),
            "source": source,
            "type": self.kind.event_type(),
            "subject": format!("drones/{}", p.device_id),
            "time": p.device_time,
            "datacontenttype": "application/json",
            "data": data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        json!({"id":"d1","deviceId":"d1","kind":"latest","seq":4,"deviceTime":"2026-11-22T09:15:02.500Z",
               "deviceTimeMs":1795338902500i64,"location":{"type":"Point","coordinates":[-122.25,47.5]},
               "altM":80.0,"batteryPct":41})
    }

    #[test]
    fn a_latest_document_is_a_position_and_others_are_not() {
        let p = Position::from_document(&doc()).unwrap();
        assert_eq!(
            (p.lon, p.lat, p.alt_m, p.battery_pct),
            (-122.25, 47.5, Some(80.0), Some(41.0))
        );
        let mut history = doc();
        history["kind"] = "history".into();
        assert!(Position::from_document(&history).is_none());
        let agent_only = json!({"id":"d1","deviceId":"d1","kind":"latest","agentConnected":true});
        assert!(Position::from_document(&agent_only).is_none());
    }

    #[test]
    fn a_disconnected_agent_is_read_with_its_time() {
        assert_eq!(Position::from_document(&doc()).unwrap().disconnected, None);
        let mut gone = doc();
        gone["agentConnected"] = false.into();
        gone["agentDisconnectedAt"] = "2026-11-22T09:15:04.000Z".into();
        let p = Position::from_document(&gone).unwrap();
        assert_eq!(
            p.disconnected.as_ref().map(|d| d.at_ms),
            Some(1795338904000)
        );
        let silent = Alert {
            rule: "quiet".into(),
            kind: AlertKind::Silent,
            fence: None,
            position: p.clone(),
        };
        let event = silent.cloud_event("/fleet/alerter");
        assert_eq!(
            event["data"]["agentDisconnectedAt"],
            "2026-11-22T09:15:04.000Z"
        );
        let mut before = silent.clone();
        before.position.disconnected = None;
        assert_eq!(before.id(), silent.id(), "one id per silence");
        gone["agentConnected"] = true.into();
        assert_eq!(Position::from_document(&gone).unwrap().disconnected, None);
    }

    #[test]
    fn the_id_is_stable_and_names_drone_rule_kind_fence_and_position() {
        let alert = Alert {
            rule: "corridor".into(),
            kind: AlertKind::Leave,
            fence: Some("f1".into()),
            position: Position::from_document(&doc()).unwrap(),
        };
        assert_eq!(alert.id(), alert.clone().id());
        assert_eq!(alert.id().len(), 32);
        let mut other = alert.clone();
        other.kind = AlertKind::Enter;
        assert_ne!(alert.id(), other.id());
        let mut later = alert.clone();
        later.position.device_time_ms += 1;
        assert_ne!(alert.id(), later.id());
        let event = alert.cloud_event("/fleet/alerter");
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["type"], "drone.alert.geofence.exited");
        assert_eq!(event["subject"], "drones/d1");
        assert_eq!(event["data"]["fence"], "f1");
        assert_eq!(event["time"], "2026-11-22T09:15:02.500Z");
    }
}
