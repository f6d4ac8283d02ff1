//! Percent-encoding as JavaScript's `encodeURIComponent` does it, on the `percent-encoding`
//! crate: the Azure SDKs encode Cosmos DB authorization headers and resource ids, and the
//! resource URI and signature of SAS tokens, this way.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What `encodeURIComponent` leaves alone: letters, digits and `- _ . ! ~ * ' ( )`.
pub const URI_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// Percent-encodes `text` like JavaScript's `encodeURIComponent` (UTF-8, uppercase hex).
pub fn encode_component(text: &str) -> String {
    utf8_percent_encode(text, URI_COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_as_encode_uri_component() {
        // Node: encodeURIComponent("a b/c?d=e&f+g~h!i*j'k(l)m_n.o-p é")
        assert_eq!(
            encode_component("a b/c?d=e&f+g~h!i*j'k(l)m_n.o-p é"),
            "a%20b%2Fc%3Fd%3De%26f%2Bg~h!i*j'k(l)m_n.o-p%20%C3%A9"
        );
    }
}
