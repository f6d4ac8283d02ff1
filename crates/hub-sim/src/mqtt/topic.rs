//! IoT Hub's MQTT topics for a device: the telemetry topic with its property bag, and the
//! topic filters a device may subscribe to.

use crate::partitions::Incoming;
use percent_encoding::percent_decode_str;

/// Why a publish topic is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// Not `devices/{own id}/messages/events/...`.
    #[error("devices may publish only to devices/{{own id}}/messages/events/")]
    NotOwnTelemetry,
    /// The property bag does not decode.
    #[error("the property bag is not URL-encoded UTF-8")]
    BadPropertyBag,
}

fn decode(text: &str) -> Result<String, TopicError> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| TopicError::BadPropertyBag)
}

/// Parses a publish topic of device `device_id`: the property bag's pairs, decoded, in order.
pub fn telemetry_properties(
    topic: &str,
    device_id: &str,
) -> Result<Vec<(String, String)>, TopicError> {
    let rest = topic
        .strip_prefix("devices/")
        .ok_or(TopicError::NotOwnTelemetry)?;
    let (id, rest) = rest.split_once('/').ok_or(TopicError::NotOwnTelemetry)?;
    if decode(id)? != device_id {
        return Err(TopicError::NotOwnTelemetry);
    }
    let bag = rest
        .strip_prefix("messages/events")
        .ok_or(TopicError::NotOwnTelemetry)?;
    let bag = match bag {
        "" => "",
        _ => bag.strip_prefix('/').ok_or(TopicError::NotOwnTelemetry)?,
    };
    let bag = bag.strip_prefix('?').unwrap_or(bag);
    bag.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

/// Puts the property bag into a message: `$.`-keys become system properties, the rest
/// application properties.
pub fn apply_properties(message: &mut Incoming, pairs: Vec<(String, String)>) {
    for (key, value) in pairs {
        match key.as_str() {
            "$.mid" => message.message_id = Some(value),
            "$.cid" => message.correlation_id = Some(value),
            "$.uid" => message.user_id = Some(value),
            "$.ct" => message.content_type = Some(value),
            "$.ce" => message.content_encoding = Some(value),
            k if k.starts_with("$.") => {}
            _ => message.properties.push((key, value)),
        }
    }
}

/// Whether device `device_id` may subscribe to `filter`: cloud-to-device messages (never sent
/// here), and the twin and method topics ([`crate::hub::twin::device`]).
pub fn may_subscribe(filter: &str, device_id: &str) -> bool {
    let own = format!("devices/{device_id}/messages/devicebound/");
    filter.starts_with(&own)
        || filter.starts_with("$iothub/twin/")
        || filter.starts_with("$iothub/methods/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_property_bag_is_decoded_in_order() {
        let pairs = telemetry_properties(
            "devices/d1/messages/events/%24.ct=application%2Fjson&%24.ce=utf-8&kind=pos%20fix&e=",
            "d1",
        )
        .unwrap();
        assert_eq!(
            pairs,
            vec![
                ("$.ct".into(), "application/json".into()),
                ("$.ce".into(), "utf-8".into()),
                ("kind".into(), "pos fix".into()),
                ("e".into(), "".into()),
            ]
        );
        let mut m = Incoming::new("d1", "x");
        apply_properties(&mut m, pairs);
        assert_eq!(m.content_type.as_deref(), Some("application/json"));
        assert_eq!(m.properties.len(), 2);
    }

    #[test]
    fn only_the_own_telemetry_topic_is_accepted() {
        assert_eq!(
            telemetry_properties("devices/d1/messages/events/", "d1"),
            Ok(vec![])
        );
        assert_eq!(
            telemetry_properties("devices/d1/messages/events", "d1"),
            Ok(vec![])
        );
        for bad in [
            "devices/d2/messages/events/",
            "devices/d1/messages/eventsx",
            "devices/d1/messages/devicebound/",
            "$iothub/twin/GET/?$rid=1",
            "other",
        ] {
            assert_eq!(
                telemetry_properties(bad, "d1"),
                Err(TopicError::NotOwnTelemetry),
                "{bad}"
            );
        }
        assert!(may_subscribe("devices/d1/messages/devicebound/#", "d1"));
        assert!(!may_subscribe("devices/d2/messages/devicebound/#", "d1"));
        assert!(!may_subscribe("#", "d1"));
    }
}
