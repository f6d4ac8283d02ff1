//! The device twins: tags, desired and reported properties with their versions and
//! metadata, changed by JSON merge patches (a null removes a property) as IoT Hub changes
//! them, and kept one file per device in `{state dir}/twins/` (each written whole, beside
//! the old one, then renamed), so that they survive a restart.

use super::merge::{merge, metadata_of, section_size};
use crate::state_dir::{self, StateError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use parking_lot::Mutex;
use percent_encoding::{NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// IoT Hub's limit on the desired and on the reported properties, each, as it counts them
/// ([`super::merge::section_size`]).
pub const MAX_SECTION_BYTES: usize = 32 * 1024;
/// IoT Hub's limit on the tags.
pub const MAX_TAGS_BYTES: usize = 8 * 1024;

/// A part of a twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// `properties.desired` (the solution's).
    Desired,
    /// `properties.reported` (the device's).
    Reported,
    /// `tags` (the solution's, never sent to the device).
    Tags,
}

impl Section {
    /// Its name in twin documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Section::Desired => "desired",
            Section::Reported => "reported",
            Section::Tags => "tags",
        }
    }
}

/// Why a twin change was refused.
#[derive(Debug, thiserror::Error)]
pub enum TwinError {
    /// The device is not registered.
    #[error("device `{0}` is not registered")]
    DeviceNotFound(String),
    /// The change is not a JSON object.
    #[error("a twin patch must be a JSON object")]
    NotAnObject,
    /// The change would make a section larger than IoT Hub allows.
    #[error("the {} would be {size} bytes, over the limit of {limit}", section.as_str())]
    TooLarge {
        /// The section.
        section: Section,
        /// Its size after the change.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// `If-Match` names another version of the twin.
    #[error("the twin's etag is {current}, not {given}")]
    EtagMismatch {
        /// The etag asked for.
        given: String,
        /// The twin's.
        current: String,
    },
    /// The twin could not be kept.
    #[error(transparent)]
    State(#[from] StateError),
}

/// One device's twin as kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Twin {
    version: u64,
    tags: Map<String, Value>,
    desired: Map<String, Value>,
    desired_version: u64,
    desired_metadata: Map<String, Value>,
    reported: Map<String, Value>,
    reported_version: u64,
    reported_metadata: Map<String, Value>,
    #[serde(default)]
    last_activity: Option<String>,
}

impl Twin {
    fn new(now: &str) -> Twin {
        let metadata = |desired: bool| {
            let mut m = Map::new();
            m.insert("$lastUpdated".into(), now.into());
            if desired {
                m.insert("$lastUpdatedVersion".into(), 1.into());
            }
            m
        };
        Twin {
            version: 1,
            tags: Map::new(),
            desired: Map::new(),
            desired_version: 1,
            desired_metadata: metadata(true),
            reported: Map::new(),
            reported_version: 1,
            reported_metadata: metadata(false),
            last_activity: None,
        }
    }

    fn etag(&self) -> String {
        BASE64.encode(self.version.to_be_bytes())
    }
}

/// What a change did, for the device's notification and the twin change event.
#[derive(Debug, Clone)]
pub struct Change {
    /// The desired properties' version after it (the notification's `$version`).
    #[cfg(feature = "test-support")]
    pub desired_version: u64,
    /// The reported properties' version after it.
    pub reported_version: u64,
    /// The desired patch as the device is told it (with `$version`), if desired changed.
    pub desired_notification: Option<Value>,
    /// The event body: `{"version", "properties": {section: {changes, "$metadata", "$version"}}}`.
    pub event_body: Value,
}

/// Now as IoT Hub writes times: ISO 8601 in UTC with seven fractional digits.
pub fn timestamp_now() -> String {
    let nanos = humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string();
    format!("{}Z", &nanos[..27])
}

fn check_size(section: Section, doc: &Map<String, Value>) -> Result<(), TwinError> {
    let limit = match section {
        Section::Tags => MAX_TAGS_BYTES,
        _ => MAX_SECTION_BYTES,
    };
    let size = section_size(doc);
    if size > limit {
        return Err(TwinError::TooLarge {
            section,
            size,
            limit,
        });
    }
    Ok(())
}

/// All twins, in memory and (with a state directory) on disk.
#[derive(Debug, Default)]
pub struct Twins {
    dir: Option<PathBuf>,
    twins: Mutex<HashMap<String, Twin>>,
    /// Held by the solution's changes from the change until the device is told, so that
    /// notifications leave in version order.
    pub(crate) solution_changes: Mutex<()>,
}

impl Twins {
    /// The twins kept in `dir` (created if missing).
    pub fn open(dir: &Path) -> Result<Twins, StateError> {
        state_dir::ensure_dir(dir)?;
        let mut twins = HashMap::new();
        let entries = std::fs::read_dir(dir).map_err(|source| StateError::Io {
            path: dir.to_owned(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(encoded) = name.strip_suffix(".json") else {
                continue;
            };
            let Ok(device) = percent_decode_str(encoded).decode_utf8() else {
                continue;
            };
            if let Some(twin) = state_dir::read_json::<Twin>(&path)? {
                twins.insert(device.into_owned(), twin);
            }
        }
        Ok(Twins {
            dir: Some(dir.to_owned()),
            twins: Mutex::new(twins),
            solution_changes: Mutex::new(()),
        })
    }

    /// Twins in memory only.
    #[cfg(test)]
    pub fn in_memory() -> Twins {
        Twins::default()
    }

    fn keep(&self, device: &str, twin: &Twin) -> Result<(), StateError> {
        match &self.dir {
            Some(dir) => {
                let name = format!("{}.json", utf8_percent_encode(device, NON_ALPHANUMERIC));
                state_dir::write_json(&dir.join(name), twin)
            }
            None => Ok(()),
        }
    }

    /// Changes `device`'s twin with `change` on a copy, keeps the copy, then makes it the twin.
    fn change<R>(
        &self,
        device: &str,
        change: impl FnOnce(&mut Twin, &str) -> Result<R, TwinError>,
    ) -> Result<R, TwinError> {
        let now = timestamp_now();
        let mut twins = self.twins.lock();
        let mut twin = twins
            .get(device)
            .cloned()
            .unwrap_or_else(|| Twin::new(&now));
        let out = change(&mut twin, &now)?;
        self.keep(device, &twin)?;
        twins.insert(device.to_owned(), twin);
        Ok(out)
    }

    /// What the device reads: `{"desired": {..., "$version"}, "reported": {..., "$version"}}`.
    pub fn device_view(&self, device: &str) -> Value {
        let twins = self.twins.lock();
        let (desired, dv, reported, rv) = match twins.get(device) {
            Some(t) => (
                t.desired.clone(),
                t.desired_version,
                t.reported.clone(),
                t.reported_version,
            ),
            None => (Map::new(), 1, Map::new(), 1),
        };
        let section = |mut doc: Map<String, Value>, version: u64| {
            doc.insert("$version".into(), version.into());
            Value::Object(doc)
        };
        json!({ "desired": section(desired, dv), "reported": section(reported, rv) })
    }

    /// What the service reads (`GET /twins/{id}`), for a registered device.
    pub fn service_view(&self, device: &str, authentication_type: &str, connected: bool) -> Value {
        let now = timestamp_now();
        let twins = self.twins.lock();
        let fresh;
        let twin = match twins.get(device) {
            Some(t) => t,
            None => {
                fresh = Twin::new(&now);
                &fresh
            }
        };
        let section = |doc: &Map<String, Value>, metadata: &Map<String, Value>, version: u64| {
            let mut doc = doc.clone();
            doc.insert("$metadata".into(), Value::Object(metadata.clone()));
            doc.insert("$version".into(), version.into());
            Value::Object(doc)
        };
        json!({
            "deviceId": device,
            "etag": twin.etag(),
            "deviceEtag": twin.etag(),
            "version": twin.version,
            "status": "enabled",
            "statusUpdateTime": "0001-01-01T00:00:00Z",
            "connectionState": if connected { "Connected" } else { "Disconnected" },
            "lastActivityTime": twin.last_activity.clone().unwrap_or_else(|| "0001-01-01T00:00:00Z".into()),
            "cloudToDeviceMessageCount": 0,
            "authenticationType": authentication_type,
            "x509Thumbprint": { "primaryThumbprint": null, "secondaryThumbprint": null },
            "modelId": "",
            "capabilities": { "iotEdge": false },
            "tags": twin.tags,
            "properties": {
                "desired": section(&twin.desired, &twin.desired_metadata, twin.desired_version),
                "reported": section(&twin.reported, &twin.reported_metadata, twin.reported_version),
            },
        })
    }

    /// The device patches its reported properties; returns the change (its
    /// `reported_version` is what the device is answered).
    pub fn patch_reported(&self, device: &str, patch: &Value) -> Result<Change, TwinError> {
        let patch = patch.as_object().ok_or(TwinError::NotAnObject)?;
        self.change(device, |twin, now| {
            let mut stamp = Map::new();
            stamp.insert("$lastUpdated".into(), now.into());
            let mut reported = twin.reported.clone();
            let mut metadata = twin.reported_metadata.clone();
            merge(&mut reported, &mut metadata, patch, &stamp);
            check_size(Section::Reported, &reported)?;
            metadata.insert("$lastUpdated".into(), now.into());
            twin.reported = reported;
            twin.reported_metadata = metadata;
            twin.reported_version += 1;
            twin.version += 1;
            twin.last_activity = Some(now.to_owned());
            Ok(Self::changed(twin, Section::Reported, patch))
        })
    }

    /// The solution patches desired properties and tags (`PATCH /twins/{id}`), or replaces
    /// them (`PUT`, `replace`), if `etag` (`*` for any) names the twin's version.
    pub fn update(
        &self,
        device: &str,
        desired: Option<&Map<String, Value>>,
        tags: Option<&Map<String, Value>>,
        etag: Option<&str>,
        replace: bool,
    ) -> Result<Change, TwinError> {
        self.change(device, |twin, now| {
            if let Some(given) = etag.map(|e| e.trim().trim_matches('"'))
                && given != "*"
                && given != twin.etag()
            {
                return Err(TwinError::EtagMismatch {
                    given: given.to_owned(),
                    current: twin.etag(),
                });
            }
            let mut patch = desired.cloned().unwrap_or_default();
            if let Some(tags) = tags {
                let mut doc = if replace {
                    Map::new()
                } else {
                    twin.tags.clone()
                };
                let mut ignored = Map::new();
                merge(&mut doc, &mut ignored, tags, &Map::new());
                check_size(Section::Tags, &doc)?;
                twin.tags = doc;
            }
            let desired_changed = desired.is_some_and(|d| replace || !d.is_empty());
            if desired_changed {
                let version = twin.desired_version + 1;
                let mut stamp = Map::new();
                stamp.insert("$lastUpdated".into(), now.into());
                stamp.insert("$lastUpdatedVersion".into(), version.into());
                let (mut doc, mut metadata) = if replace {
                    // The device is told the new document, with nulls for what is gone.
                    for key in twin.desired.keys() {
                        patch.entry(key.clone()).or_insert(Value::Null);
                    }
                    (Map::new(), Map::new())
                } else {
                    (twin.desired.clone(), twin.desired_metadata.clone())
                };
                let source = desired.expect("desired_changed implies desired");
                merge(&mut doc, &mut metadata, source, &stamp);
                check_size(Section::Desired, &doc)?;
                metadata.insert("$lastUpdated".into(), now.into());
                metadata.insert("$lastUpdatedVersion".into(), version.into());
                twin.desired = doc;
                twin.desired_metadata = metadata;
                twin.desired_version = version;
            }
            twin.version += 1;
            // An update's event names what changed; a replacement's the whole new document.
            let event_patch = if replace {
                twin.desired.clone()
            } else {
                patch.clone()
            };
            let section = if desired_changed {
                Section::Desired
            } else {
                Section::Tags
            };
            let mut change = Self::changed(twin, section, &event_patch);
            if desired_changed {
                let mut notification: Map<String, Value> = patch
                    .into_iter()
                    .filter(|(k, _)| !k.starts_with('$'))
                    .collect();
                notification.insert("$version".into(), twin.desired_version.into());
                change.desired_notification = Some(Value::Object(notification));
            }
            if let (Some(tags), Value::Object(body)) = (tags, &mut change.event_body) {
                let tags = if replace { &twin.tags } else { tags };
                body.insert("tags".into(), Value::Object(tags.clone()));
            }
            Ok(change)
        })
    }

    fn changed(twin: &Twin, section: Section, patch: &Map<String, Value>) -> Change {
        let (metadata, version) = match section {
            Section::Reported => (&twin.reported_metadata, twin.reported_version),
            _ => (&twin.desired_metadata, twin.desired_version),
        };
        let mut properties = Map::new();
        if section != Section::Tags {
            let mut doc: Map<String, Value> = patch
                .iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            doc.insert(
                "$metadata".into(),
                Value::Object(metadata_of(patch, metadata)),
            );
            doc.insert("$version".into(), version.into());
            properties.insert(section.as_str().into(), Value::Object(doc));
        }
        Change {
            #[cfg(feature = "test-support")]
            desired_version: twin.desired_version,
            reported_version: twin.reported_version,
            desired_notification: None,
            event_body: json!({ "version": twin.version, "properties": properties }),
        }
    }

    /// Records device activity (a connection opened or closed) without a write; a reported
    /// patch records it too (`lastActivityTime`).
    pub fn touch(&self, device: &str) {
        let now = timestamp_now();
        let mut twins = self.twins.lock();
        if let Some(twin) = twins.get_mut(device) {
            twin.last_activity = Some(now);
        }
    }

    /// Forgets `device`'s twin (the device was deleted).
    #[cfg(feature = "test-support")]
    pub fn remove(&self, device: &str) -> Result<(), StateError> {
        self.twins.lock().remove(device);
        if let Some(dir) = &self.dir {
            let path = dir.join(format!(
                "{}.json",
                utf8_percent_encode(device, NON_ALPHANUMERIC)
            ));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(StateError::Io { path, source }),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_patch_merges_removes_and_counts_versions() {
        let twins = Twins::in_memory();
        let first = twins
            .patch_reported("d", &json!({"a": 1, "b": {"c": true, "d": "x"}}))
            .unwrap();
        assert_eq!(first.reported_version, 2);
        let second = twins
            .patch_reported("d", &json!({"a": null, "b": {"d": null, "e": 2}}))
            .unwrap();
        assert_eq!(second.reported_version, 3);
        let view = twins.device_view("d");
        assert_eq!(
            view["reported"],
            json!({"b": {"c": true, "e": 2}, "$version": 3})
        );
        assert_eq!(view["desired"], json!({"$version": 1}));
        let service = twins.service_view("d", "sas", false);
        let metadata = &service["properties"]["reported"]["$metadata"];
        assert!(metadata["b"]["e"]["$lastUpdated"].is_string());
        assert!(metadata.get("a").is_none());
        assert_eq!(service["version"], 3);
        assert_eq!(service["etag"], "AAAAAAAAAAM=");
    }

    #[test]
    fn desired_changes_check_the_etag_and_say_their_version() {
        let twins = Twins::in_memory();
        let patch = json!({"rate": 5}).as_object().cloned().unwrap();
        let change = twins
            .update("d", Some(&patch), None, Some("AAAAAAAAAAE="), false)
            .unwrap();
        assert_eq!(
            change.desired_notification,
            Some(json!({"rate": 5, "$version": 2}))
        );
        let stale = twins.update("d", Some(&patch), None, Some("AAAAAAAAAAE="), false);
        assert!(matches!(stale, Err(TwinError::EtagMismatch { .. })));
        let service = twins.service_view("d", "sas", false);
        assert_eq!(
            service["properties"]["desired"]["$metadata"]["rate"]["$lastUpdatedVersion"],
            2
        );
        let replaced = twins
            .update("d", Some(&Map::new()), None, Some("*"), true)
            .unwrap();
        assert_eq!(
            replaced.desired_notification,
            Some(json!({"rate": null, "$version": 3}))
        );
    }

    #[test]
    fn sections_over_32_kb_are_refused_and_leave_the_twin_as_it_was() {
        let twins = Twins::in_memory();
        let big = "x".repeat(MAX_SECTION_BYTES);
        let refused = twins.patch_reported("d", &json!({ "k": big }));
        assert!(matches!(
            refused,
            Err(TwinError::TooLarge {
                section: Section::Reported,
                ..
            })
        ));
        assert_eq!(twins.device_view("d")["reported"]["$version"], 1);
        let fits = "x".repeat(MAX_SECTION_BYTES - 1);
        assert!(twins.patch_reported("d", &json!({ "k": fits })).is_ok());
    }

    #[test]
    fn twins_are_read_back_from_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        let twins = Twins::open(dir.path()).unwrap();
        twins
            .patch_reported("drone/1", &json!({"fw": "1.2"}))
            .unwrap();
        drop(twins);
        let again = Twins::open(dir.path()).unwrap();
        assert_eq!(
            again.device_view("drone/1")["reported"],
            json!({"fw": "1.2", "$version": 2})
        );
    }
}
