//! A device of the hub as a plain MQTT client (rumqttc) from its connection string: SAS over
//! TLS trusting the hub's CA, as the edge agent connects. Shared by the tests and the MQTT
//! throughput bench.

use hub_sim::{make_token, now_secs};
use rumqttc::{MqttOptions, TlsConfiguration, Transport};
use std::time::Duration;

/// The value of `key` in a `Key=value;...` connection string, read as the clients read it.
fn field<'a>(connection_string: &'a str, key: &str) -> &'a str {
    azure_text::connection_string::value_ignore_case(connection_string, key)
        .unwrap_or_else(|| panic!("{key} in {connection_string}"))
}

/// The options of the device of `connection_string` (from `devices.txt`) connecting to the
/// hub's MQTT/TLS port `port`, trusting `ca_pem`, with up to `inflight` unacknowledged
/// publishes.
pub fn device_options(
    connection_string: &str,
    port: u16,
    ca_pem: &[u8],
    inflight: u16,
) -> MqttOptions {
    use base64::Engine as _;
    let host = field(connection_string, "HostName");
    let id = field(connection_string, "DeviceId");
    let key = base64::engine::general_purpose::STANDARD
        .decode(field(connection_string, "SharedAccessKey"))
        .expect("a base64 key");
    let token = make_token(
        &format!("{host}/devices/{id}"),
        &key,
        now_secs() + 3600,
        None,
    );
    let mut options = MqttOptions::new(id, host, port);
    options.set_credentials(format!("{host}/{id}/?api-version=2021-04-12"), token);
    options.set_keep_alive(Duration::from_secs(60));
    options.set_inflight(inflight);
    options.set_transport(Transport::tls_with_config(TlsConfiguration::Simple {
        ca: ca_pem.to_vec(),
        alpn: None,
        client_auth: None,
    }));
    options
}
