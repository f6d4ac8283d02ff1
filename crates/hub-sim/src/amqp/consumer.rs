//! Receivers of the built-in endpoint: the link address
//! `{hub}/ConsumerGroups/{group}/Partitions/{id}`, the selector filter that says where to
//! start, the owner level (`com.microsoft:epoch`: a higher or equal one takes the partition
//! from the consumer group's other receivers, which are detached as stolen), and the events
//! as AMQP messages with Event Hubs' and IoT Hub's annotations.

use crate::partitions::{AuthMethod, Event, MessageSource, StartAt};
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Data, Message, MessageAnnotations, Properties, Source,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

/// The descriptor of the selector filter, as a symbol.
const SELECTOR_SYMBOL: &str = "apache.org:selector-filter:string";
/// The same descriptor as a code.
const SELECTOR_CODE: u64 = 0x0000_468C_0000_0004;

/// A parsed receiver address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionAddress {
    /// The hub (entity) name.
    pub hub: String,
    /// The consumer group.
    pub group: String,
    /// The partition id.
    pub partition: String,
}

/// Parses `[amqps://host/]{hub}/ConsumerGroups/{group}/Partitions/{id}`.
pub fn parse_address(address: &str) -> Option<PartitionAddress> {
    let path = address.split_once("://").map_or(address, |(_, rest)| {
        rest.split_once('/').map_or("", |(_, path)| path)
    });
    let (hub, rest) = path
        .trim_start_matches('/')
        .split_once("/ConsumerGroups/")?;
    let (group, partition) = rest.split_once("/Partitions/")?;
    let hub = hub.rsplit('/').next()?;
    if hub.is_empty() || group.is_empty() || partition.is_empty() || partition.contains('/') {
        return None;
    }
    Some(PartitionAddress {
        hub: hub.to_owned(),
        group: group.to_owned(),
        partition: partition.to_owned(),
    })
}

/// Parses a selector expression (`amqp.annotation.x-opt-offset > '12'`, ...).
pub fn parse_selector(expression: &str) -> Option<StartAt> {
    let rest = expression.trim().strip_prefix("amqp.annotation.x-opt-")?;
    let (field, rest) = rest.split_once(char::is_whitespace)?;
    let rest = rest.trim_start();
    let (inclusive, value) = if let Some(v) = rest.strip_prefix(">=") {
        (true, v)
    } else {
        (false, rest.strip_prefix('>')?)
    };
    let value = value.trim().trim_matches('\'');
    match field {
        "offset" => match value {
            "@latest" => Some(StartAt::Latest),
            v => v.parse().ok().map(|o| StartAt::Offset(o, inclusive)),
        },
        "sequence-number" => {
            let n: i64 = value.parse().ok()?;
            Some(StartAt::Sequence(if inclusive { n } else { n + 1 }))
        }
        "enqueued-time" => value
            .parse()
            .ok()
            .map(|t| StartAt::EnqueuedTime(t, inclusive)),
        _ => None,
    }
}

/// Where a receiver attached with `source` starts: its selector filter, or the beginning.
pub fn start_of(source: Option<&Source>) -> Result<StartAt, String> {
    let Some(filters) = source.and_then(|s| s.filter.as_ref()) else {
        return Ok(StartAt::Sequence(0));
    };
    for (name, value) in filters.iter() {
        let Value::Described(described) = value else {
            continue;
        };
        let is_selector = name.0 == SELECTOR_SYMBOL
            || match &described.descriptor {
                serde_amqp::descriptor::Descriptor::Name(s) => s.0 == SELECTOR_SYMBOL,
                serde_amqp::descriptor::Descriptor::Code(c) => *c == SELECTOR_CODE,
            };
        if !is_selector {
            continue;
        }
        let Value::String(expression) = &described.value else {
            return Err("the selector filter's value is not a string".into());
        };
        return parse_selector(expression)
            .ok_or_else(|| format!("unsupported selector `{expression}`"));
    }
    Ok(StartAt::Sequence(0))
}

/// The owner level (`com.microsoft:epoch`) in a link's properties.
pub fn epoch_of(properties: Option<&fe2o3_amqp::types::definitions::Fields>) -> Option<i64> {
    let value = properties?.get(&Symbol::from("com.microsoft:epoch"))?;
    match value {
        Value::Long(v) => Some(*v),
        Value::Int(v) => Some(i64::from(*v)),
        Value::Uint(v) => Some(i64::from(*v)),
        Value::Ulong(v) => i64::try_from(*v).ok(),
        _ => None,
    }
}

#[derive(Debug)]
struct Reader {
    id: u64,
    epoch: Option<i64>,
    stolen: CancellationToken,
}

/// Who reads which partition of which consumer group, with their owner levels.
#[derive(Debug, Default)]
pub struct Owners {
    readers: Mutex<HashMap<(String, usize), Vec<Reader>>>,
    next_id: AtomicU64,
}

/// A refused claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRefused(pub String);

impl Owners {
    /// Claims a reader's place: a receiver with an owner level at least the highest present
    /// steals the partition from every other (their tokens are cancelled); a lower one, or
    /// one without a level while a level is present, is refused.
    pub fn claim(
        &self,
        group: &str,
        partition: usize,
        epoch: Option<i64>,
    ) -> Result<(u64, CancellationToken), ClaimRefused> {
        let mut all = self.readers.lock();
        let readers = all.entry((group.to_owned(), partition)).or_default();
        let highest = readers.iter().filter_map(|r| r.epoch).max();
        match (epoch, highest) {
            (None, Some(h)) => {
                return Err(ClaimRefused(format!(
                    "a receiver with owner level {h} holds partition {partition} of group {group}"
                )));
            }
            (Some(e), Some(h)) if e < h => {
                return Err(ClaimRefused(format!(
                    "owner level {e} is below the present owner level {h}"
                )));
            }
            (Some(_), _) => {
                for reader in readers.drain(..) {
                    reader.stolen.cancel();
                }
            }
            (None, None) => {}
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let stolen = CancellationToken::new();
        readers.push(Reader {
            id,
            epoch,
            stolen: stolen.clone(),
        });
        Ok((id, stolen))
    }

    /// Releases reader `id`.
    pub fn release(&self, group: &str, partition: usize, id: u64) {
        if let Some(readers) = self.readers.lock().get_mut(&(group.to_owned(), partition)) {
            readers.retain(|r| r.id != id);
        }
    }
}

fn symbol(key: &str) -> fe2o3_amqp::types::messaging::annotations::OwnedKey {
    Symbol::from(key).into()
}

/// An event as the built-in endpoint delivers it. Device messages carry how their sender
/// authenticated; events the hub emits (connection state, twin changes) carry only the
/// device id, the enqueued time and their message source, as IoT Hub's do.
pub fn to_message(event: &Event) -> Message<Data> {
    let m = &event.message;
    let enqueued = Timestamp::from_milliseconds(event.enqueued_ms);
    let mut annotations = MessageAnnotations::builder()
        .insert(
            symbol("x-opt-sequence-number"),
            Value::Long(event.sequence_number),
        )
        .insert(
            symbol("x-opt-offset"),
            Value::String(event.offset.to_string()),
        )
        .insert(
            symbol("x-opt-enqueued-time"),
            Value::Timestamp(enqueued.clone()),
        )
        .insert(
            symbol("iothub-connection-device-id"),
            Value::String(m.device_id.to_string()),
        );
    if m.source == MessageSource::Telemetry {
        annotations = annotations
            .insert(
                symbol("iothub-connection-auth-method"),
                Value::String(m.auth.as_json().to_owned()),
            )
            .insert(
                symbol("iothub-connection-auth-generation-id"),
                Value::String(generation_id(&m.device_id)),
            );
    }
    annotations = annotations.insert(symbol("iothub-enqueuedtime"), Value::Timestamp(enqueued));
    if m.source != MessageSource::Telemetry || m.auth != AuthMethod::Api {
        annotations = annotations.insert(
            symbol("iothub-message-source"),
            Value::String(m.source.as_str().into()),
        );
    }
    let properties = Properties {
        message_id: m.message_id.clone().map(Into::into),
        correlation_id: m.correlation_id.clone().map(Into::into),
        user_id: m.user_id.clone().map(|u| Binary::from(u.into_bytes())),
        content_type: m.content_type.clone().map(Symbol::from),
        content_encoding: m.content_encoding.clone().map(Symbol::from),
        ..Properties::default()
    };
    let mut app = ApplicationProperties::builder();
    for (k, v) in &m.properties {
        app = app.insert(k.clone(), SimpleValue::String(v.clone()));
    }
    Message::builder()
        .message_annotations(annotations.build())
        .properties(properties)
        .application_properties(app.build())
        .data(Binary::from(m.body.to_vec()))
        .build()
}

/// A stable generation id per device (IoT Hub's changes when a device is re-created).
fn generation_id(device_id: &str) -> String {
    format!(
        "{:018}",
        crate::partitions::stable_hash(device_id) % 1_000_000_000_000_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_with_and_without_a_host_parse() {
        let expected = PartitionAddress {
            hub: "hub".into(),
            group: "$Default".into(),
            partition: "3".into(),
        };
        assert_eq!(
            parse_address("amqps://localhost:5672/hub/ConsumerGroups/$Default/Partitions/3"),
            Some(expected.clone())
        );
        assert_eq!(
            parse_address("hub/ConsumerGroups/$Default/Partitions/3"),
            Some(expected)
        );
        assert_eq!(parse_address("$cbs"), None);
        assert_eq!(parse_address("hub/ConsumerGroups/g/Partitions/"), None);
    }

    #[test]
    fn selectors_map_to_starting_positions() {
        let p = parse_selector;
        assert_eq!(
            p("amqp.annotation.x-opt-offset > '-1'"),
            Some(StartAt::Offset(-1, false))
        );
        assert_eq!(
            p("amqp.annotation.x-opt-offset >= '40'"),
            Some(StartAt::Offset(40, true))
        );
        assert_eq!(
            p("amqp.annotation.x-opt-offset > '@latest'"),
            Some(StartAt::Latest)
        );
        assert_eq!(
            p("amqp.annotation.x-opt-sequence-number > '5'"),
            Some(StartAt::Sequence(6))
        );
        assert_eq!(
            p("amqp.annotation.x-opt-sequence-number >= 5"),
            Some(StartAt::Sequence(5))
        );
        assert_eq!(
            p("amqp.annotation.x-opt-enqueued-time > '1700000000000'"),
            Some(StartAt::EnqueuedTime(1_700_000_000_000, false))
        );
        assert_eq!(p("amqp.annotation.x-opt-other > 1"), None);
        assert_eq!(p("nonsense"), None);
    }

    #[test]
    fn a_higher_owner_level_steals_and_a_lower_one_is_refused() {
        let owners = Owners::default();
        let (_, plain) = owners.claim("g", 0, None).unwrap();
        let (first, one) = owners.claim("g", 0, Some(1)).unwrap();
        assert!(plain.is_cancelled());
        assert!(owners.claim("g", 0, None).is_err());
        assert!(owners.claim("g", 0, Some(0)).is_err());
        let (_, two) = owners.claim("g", 0, Some(2)).unwrap();
        assert!(one.is_cancelled() && !two.is_cancelled());
        owners.release("g", 0, first);
        assert!(owners.claim("other", 0, None).is_ok());
        assert!(owners.claim("g", 1, None).is_ok());
    }
}
