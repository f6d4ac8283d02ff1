//! SAS tokens: the published format for a fixed expiry (library and `sas-token`
//! command), and renewal before expiry (with tokio's paused clock, against a minimal
//! MQTT peer in this test that records each CONNECT).

mod common;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use edge_agent::{Auth, Endpoint, SasConfig};
use edge_agent::{ConnectionState, SimConfig, SourceConfig};
use edge_agent::{DeviceConnectionString, resource_uri, sas_token};
use settings::SecretBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

const CONNECTION_STRING: &str = "HostName=myhub.azure-devices.net;DeviceId=drone-0042;SharedAccessKey=c2VjcmV0LWtleS1mb3ItdGVzdHMtb25seS0wMTIzNDU2Nzg5";

/// Computed independently (Python's hmac, hashlib, base64 and urllib.parse.quote with
/// encodeURIComponent's safe set) from the documented algorithm for the key above,
/// resource `myhub.azure-devices.net/devices/drone-0042` and expiry 1798761600.
const EXPECTED: &str = "SharedAccessSignature sr=myhub.azure-devices.net%2Fdevices%2Fdrone-0042&sig=h0uLuGRHhBkTUQF1Y4mhOtNpCqiP%2BwGr5c7F44N6v8A%3D&se=1798761600";

#[test]
fn a_token_for_a_fixed_expiry_matches_the_published_format() {
    let cs = DeviceConnectionString::parse(CONNECTION_STRING).unwrap();
    let token = sas_token(
        &resource_uri(&cs.host, &cs.device_id),
        cs.key.unwrap().expose(),
        1_798_761_600,
    );
    assert_eq!(token, EXPECTED);
}

#[test]
fn the_sas_token_command_prints_the_same_token() {
    let output = Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["sas-token", "--expiry", "1798761600"])
        .env("IOTHUB_DEVICE_CONNECTION_STRING", CONNECTION_STRING)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8(output.stdout).unwrap().trim(), EXPECTED);

    let output = Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["sas-token", "--ttl", "10m"])
        .env("IOTHUB_DEVICE_CONNECTION_STRING", CONNECTION_STRING)
        .output()
        .unwrap();
    let token = String::from_utf8(output.stdout).unwrap();
    let expiry: u64 = token.trim().rsplit("&se=").next().unwrap().parse().unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!((now + 590..=now + 610).contains(&expiry), "{token}");

    let output = Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["sas-token"])
        .env("IOTHUB_DEVICE_CONNECTION_STRING", "HostName=h;DeviceId=d")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("SharedAccessKey"), "{stderr}");
}

/// The connection string comes from a file or standard input, and never from a flag.
#[test]
fn the_sas_token_command_reads_the_connection_string_from_a_file_or_stdin() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cs");
    std::fs::write(&file, format!("{CONNECTION_STRING}\n")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["sas-token", "--expiry", "1798761600"])
        .env_remove("IOTHUB_DEVICE_CONNECTION_STRING")
        .env("IOTHUB_DEVICE_CONNECTION_STRING_FILE", &file)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8(output.stdout).unwrap().trim(), EXPECTED);

    let mut child = Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["sas-token", "--expiry", "1798761600"])
        .env_remove("IOTHUB_DEVICE_CONNECTION_STRING")
        .env("IOTHUB_DEVICE_CONNECTION_STRING_FILE", "-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(CONNECTION_STRING.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8(output.stdout).unwrap().trim(), EXPECTED);

    let output = Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["sas-token", "--connection-string", CONNECTION_STRING])
        .env_remove("IOTHUB_DEVICE_CONNECTION_STRING")
        .output()
        .unwrap();
    assert!(!output.status.success(), "a flag is refused");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.contains("SharedAccessKey="), "{stderr}");
}

/// One CONNECT as the peer saw it.
#[derive(Debug)]
struct Connect {
    at: Instant,
    client_id: String,
    username: String,
    password: String,
}

/// A minimal MQTT 3.1.1 server: CONNACK, PUBACK, PINGRESP; reports every CONNECT.
async fn mqtt_peer() -> (u16, mpsc::UnboundedReceiver<Connect>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(serve(stream, tx.clone()));
        }
    });
    (port, rx)
}

async fn serve(mut stream: TcpStream, connects: mpsc::UnboundedSender<Connect>) {
    while let Some((kind, body)) = read_packet(&mut stream).await {
        let reply: Vec<u8> = match kind >> 4 {
            1 => {
                let _ = connects.send(parse_connect(&body));
                vec![0x20, 0x02, 0x00, 0x00]
            }
            // A QoS 0 publish (the agent's twin requests) carries no packet id and gets no answer.
            3 if (kind >> 1) & 0x03 == 0 => continue,
            3 => {
                // QoS 1 publish: topic, then the packet id.
                let topic_len = usize::from(u16::from_be_bytes([body[0], body[1]]));
                let pkid = &body[2 + topic_len..4 + topic_len];
                vec![0x40, 0x02, pkid[0], pkid[1]]
            }
            8 => {
                // SUBSCRIBE: the packet id, then (filter, QoS) pairs; each refused (0x80), as a
                // basic-tier hub refuses the twin and method topics.
                let mut codes = 0u8;
                let mut pos = 2;
                while pos + 2 <= body.len() {
                    pos += 2 + usize::from(u16::from_be_bytes([body[pos], body[pos + 1]])) + 1;
                    codes += 1;
                }
                let mut suback = vec![0x90, 2 + codes, body[0], body[1]];
                suback.extend(std::iter::repeat_n(0x80, usize::from(codes)));
                suback
            }
            12 => vec![0xd0, 0x00],
            14 => return,
            _ => continue,
        };
        if stream.write_all(&reply).await.is_err() {
            return;
        }
    }
}

async fn read_packet(stream: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let kind = stream.read_u8().await.ok()?;
    let mut len = 0usize;
    for shift in (0..28).step_by(7) {
        let byte = stream.read_u8().await.ok()?;
        len |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
    }
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await.ok()?;
    Some((kind, body))
}

fn parse_connect(body: &[u8]) -> Connect {
    let mut pos = 0;
    let string = |pos: &mut usize| {
        let len = usize::from(u16::from_be_bytes([body[*pos], body[*pos + 1]]));
        let text = String::from_utf8(body[*pos + 2..*pos + 2 + len].to_vec()).unwrap();
        *pos += 2 + len;
        text
    };
    let protocol = string(&mut pos);
    assert_eq!(protocol, "MQTT");
    let flags = body[pos + 1];
    pos += 4;
    let client_id = string(&mut pos);
    let username = if flags & 0x80 != 0 {
        string(&mut pos)
    } else {
        String::new()
    };
    let password = if flags & 0x40 != 0 {
        string(&mut pos)
    } else {
        String::new()
    };
    Connect {
        at: Instant::now(),
        client_id,
        username,
        password,
    }
}

#[tokio::test(start_paused = true)]
async fn the_token_is_renewed_at_80_percent_of_its_lifetime() {
    let (port, mut connects) = mqtt_peer().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::sim_config("drone-0042", port, dir.path());
    config.report_interval = Duration::from_secs(5);
    config.source = SourceConfig::Sim(SimConfig::default());
    let ttl = Duration::from_secs(3600);
    config.transport.auth = Auth::Sas(SasConfig {
        hub_host: "myhub.azure-devices.net".into(),
        key: SecretBytes::new(b"secret-key-for-tests-only-0123456789".to_vec()),
        token_ttl: ttl,
        renew_fraction: 0.8,
    });
    config.transport.endpoint = Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port,
    };
    let agent = common::Running::start(config);

    let within = Duration::from_secs(2 * 3600);
    let first = tokio::time::timeout(within, connects.recv())
        .await
        .unwrap()
        .unwrap();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(first.client_id, "drone-0042");
    assert_eq!(
        first.username,
        "myhub.azure-devices.net/drone-0042/?api-version=2021-04-12"
    );
    let prefix = "SharedAccessSignature sr=myhub.azure-devices.net%2Fdevices%2Fdrone-0042&sig=";
    assert!(first.password.starts_with(prefix), "{}", first.password);
    let expiry = |token: &str| -> u64 { token.rsplit("&se=").next().unwrap().parse().unwrap() };
    let first_expiry = expiry(&first.password);
    assert!(
        (wall + 3590..=wall + 3610).contains(&first_expiry),
        "expiry {first_expiry} for a one-hour token at {wall}"
    );
    // Until renewal the agent publishes (the peer acknowledges).
    agent
        .wait_for("acknowledged messages", |s| s.acked >= 3)
        .await;

    let second = tokio::time::timeout(within, connects.recv())
        .await
        .unwrap()
        .unwrap();
    let renewed_after = second.at - first.at;
    assert!(
        renewed_after >= ttl.mul_f64(0.8)
            && renewed_after <= ttl.mul_f64(0.8) + Duration::from_secs(5),
        "renewed after {renewed_after:?}, expected 80% of {ttl:?}"
    );
    assert!(renewed_after < ttl, "renewed before expiry");
    assert!(second.password.starts_with(prefix), "a SAS token again");
    // The wall clock does not move with tokio's paused clock, so the new token's expiry
    // is only known not to go back.
    assert!(expiry(&second.password) >= first_expiry);
    let status = agent
        .wait_for("connected again", |s| {
            s.connection == ConnectionState::Connected && s.connections == 2
        })
        .await;
    // Renewal is planned: no backoff, no error.
    assert_eq!(status.connect_attempts, 2, "{status:?}");
    assert_eq!(status.last_error, None);
    agent.stop().await;
}
