//! The `Key=Value;Key=Value` form of Azure connection strings (IoT Hub device strings,
//! Event Hubs strings), split into its parts. Each client's typed parser builds on this and
//! decides which keys it needs, whether their case matters and what an absent one means.

/// A part of a connection string that is not `Key=Value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedPart {
    /// The 1-based position of the part among the `;`-separated parts.
    pub index: usize,
}

/// The `(key, value)` parts of `text`, in order, each trimmed of surrounding whitespace.
/// Empty parts (a trailing `;`, or `;;`) are skipped; a part without `=` is an error. A value
/// is everything after the first `=`, so base64 padding stays in it.
pub fn parts(text: &str) -> impl Iterator<Item = Result<(&str, &str), MalformedPart>> {
    text.split(';')
        .enumerate()
        .filter(|(_, part)| !part.trim().is_empty())
        .map(|(index, part)| {
            let (key, value) = part
                .split_once('=')
                .ok_or(MalformedPart { index: index + 1 })?;
            Ok((key.trim(), value.trim()))
        })
}

/// The value of the first well-formed part whose key is `key`, compared without regard
/// to ASCII case (as the Event Hubs SDK reads its keys).
pub fn value_ignore_case<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    parts(text)
        .flatten()
        .find(|(name, _)| name.eq_ignore_ascii_case(key))
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_into_trimmed_parts_and_keeps_padding_in_values() {
        let text = " HostName=h.azure-devices.net ;DeviceId=d;;SharedAccessKey=AA== ;";
        let got: Vec<_> = parts(text).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            [
                ("HostName", "h.azure-devices.net"),
                ("DeviceId", "d"),
                ("SharedAccessKey", "AA=="),
            ]
        );
    }

    #[test]
    fn a_part_without_equals_is_named_by_its_position() {
        let got: Vec<_> = parts("HostName=h;junk;DeviceId=d").collect();
        assert_eq!(got[1], Err(MalformedPart { index: 2 }));
        assert_eq!(got[2], Ok(("DeviceId", "d")));
    }

    #[test]
    fn looks_up_a_value_whatever_the_case_of_its_key() {
        let text = "endpoint=sb://x/;junk;EntityPath=hub;ENTITYPATH=other";
        assert_eq!(value_ignore_case(text, "Endpoint"), Some("sb://x/"));
        assert_eq!(value_ignore_case(text, "entitypath"), Some("hub"));
        assert_eq!(value_ignore_case(text, "SharedAccessKey"), None);
    }
}
