//! The exact requests the client puts on the wire: a plain TCP listener in the test reads each
//! request head and answers a canned response, so the headers can be checked one by one (the
//! signature against the published algorithm, the partition key and batch headers, the
//! percent-encoded path, the priority level).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cosmos::{
    BulkConfig, BulkOperation, CosmosClient, CosmosConfig, CosmosError, Credential, MasterKey,
    OperationType, Priority, TokenCredential,
};
use cosmos_wire::auth::{EMULATOR_KEY, aad_authorization};
use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One request as the listener saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// A canned answer: status, body and extra headers.
type Reply = (u16, String, Vec<(&'static str, String)>);

/// Accepts connections and answers every request with `response(request)`.
async fn listener(response: fn(&Seen) -> Reply) -> (String, mpsc::UnboundedReceiver<Seen>) {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/", socket.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = socket.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        let n = stream.read(&mut chunk).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    };
                    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
                    let mut lines = head.split("\r\n");
                    let mut start = lines.next().unwrap().split(' ');
                    let (method, path) = (start.next().unwrap(), start.next().unwrap());
                    let headers: HashMap<String, String> = lines
                        .filter_map(|l| l.split_once(": "))
                        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                        .collect();
                    let len: usize = headers
                        .get("content-length")
                        .map_or(0, |v| v.parse().unwrap());
                    while buf.len() < head_end + len {
                        let mut chunk = [0u8; 4096];
                        let n = stream.read(&mut chunk).await.unwrap();
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let seen = Seen {
                        method: method.to_string(),
                        path: path.to_string(),
                        headers,
                        body: buf[head_end..head_end + len].to_vec(),
                    };
                    buf.drain(..head_end + len);
                    let (status, body, extra) = response(&seen);
                    let mut reply =
                        format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
                    for (k, v) in extra {
                        reply.push_str(&format!("{k}: {v}\r\n"));
                    }
                    reply.push_str("\r\n");
                    reply.push_str(&body);
                    stream.write_all(reply.as_bytes()).await.unwrap();
                    tx.send(seen).unwrap();
                }
            });
        }
    });
    (endpoint, rx)
}

fn client(endpoint: &str, credential: Credential) -> CosmosClient {
    CosmosClient::new(CosmosConfig::new(endpoint.parse().unwrap(), credential)).unwrap()
}

fn key() -> MasterKey {
    MasterKey::from_base64(EMULATOR_KEY).unwrap()
}

#[tokio::test]
async fn point_write_is_signed_over_the_decoded_document_link() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (endpoint, mut seen) = listener(|_| {
            (
                201,
                "{}".into(),
                vec![
                    ("etag", "\"e1\"".into()),
                    ("x-ms-request-charge", "5.71".into()),
                ],
            )
        })
        .await;
        let container =
            client(&endpoint, Credential::MasterKey(key())).container("tele metry", "positions");
        let written = container
            .replace(
                "drone-ä",
                "drone:7/ä",
                b"{\"id\":\"drone:7/\\u00e4\"}",
                Some("\"e0\""),
            )
            .await
            .unwrap();
        assert_eq!(written.etag.as_deref(), Some("\"e1\""));
        assert_eq!(written.request_charge, 5.71);

        let r = seen.recv().await.unwrap();
        assert_eq!(r.method, "PUT");
        assert_eq!(
            r.path,
            "/dbs/tele%20metry/colls/positions/docs/drone%3A7%2F%C3%A4"
        );
        let date = &r.headers["x-ms-date"];
        assert!(date.ends_with(" GMT") && httpdate_parses(date), "{date}");
        assert_eq!(r.headers["x-ms-version"], "2020-07-15");
        assert_eq!(
            r.headers["x-ms-documentdb-partitionkey"],
            r#"["drone-\u00e4"]"#
        );
        assert_eq!(r.headers["if-match"], "\"e0\"");
        assert_eq!(r.headers["content-type"], "application/json");
        // The signature covers the verb, type `docs` and the decoded link of the document.
        let expected = key().authorization(
            "PUT",
            "docs",
            "dbs/tele metry/colls/positions/docs/drone:7/ä",
            date,
        );
        assert_eq!(r.headers["authorization"], expected);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn requests_carry_the_priority_level_of_their_client() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (endpoint, mut seen) = listener(|_| (404, "{}".into(), Vec::new())).await;
        let mut config = CosmosConfig::new(endpoint.parse().unwrap(), Credential::MasterKey(key()));
        let unmarked = CosmosClient::new(config.clone())
            .unwrap()
            .container("telemetry", "positions");
        config.priority = Some(Priority::High);
        let high = CosmosClient::new(config)
            .unwrap()
            .container("telemetry", "positions");
        let low = unmarked.with_priority(Priority::Low);
        for (container, expected) in [
            (&unmarked, None),
            (&high, Some("High")),
            (&low, Some("Low")),
        ] {
            assert!(
                container
                    .read("drone-1", "drone-1")
                    .await
                    .unwrap()
                    .is_none()
            );
            let r = seen.recv().await.unwrap();
            assert_eq!(
                r.headers
                    .get("x-ms-cosmos-priority-level")
                    .map(String::as_str),
                expected
            );
        }
    })
    .await
    .expect("the test finished within its time limit");
}

fn httpdate_parses(date: &str) -> bool {
    // "Sun, 22 Nov 2026 03:00:00 GMT": six fields, weekday with a comma.
    let fields: Vec<&str> = date.split(' ').collect();
    fields.len() == 6 && fields[0].ends_with(',') && fields[4].len() == 8
}

#[tokio::test]
async fn bulk_batch_targets_a_range_without_a_partition_key_header() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (endpoint, mut seen) = listener(|r| {
            if r.path.ends_with("/pkranges") {
                let body = r#"{"PartitionKeyRanges":[{"id":"0","minInclusive":"","maxExclusive":"FF"}],"_count":1}"#;
                return (200, body.into(), vec![]);
            }
            let ops: Vec<serde_json::Value> = serde_json::from_slice(&r.body).unwrap();
            let results: Vec<_> = ops
                .iter()
                .map(|_| serde_json::json!({"statusCode": 200, "requestCharge": 1.5, "eTag": "\"x\""}))
                .collect();
            (200, serde_json::to_string(&results).unwrap(), vec![("x-ms-request-charge", "3".into())])
        })
        .await;
        let container = client(&endpoint, Credential::MasterKey(key())).container("db", "c");
        let (writer, mut outcomes) = container.bulk_writer::<u8>(BulkConfig::default());
        for (i, kind) in [OperationType::Upsert, OperationType::Patch]
            .into_iter()
            .enumerate()
        {
            let body = match kind {
                OperationType::Patch => {
                    r#"{"operations":[{"op":"set","path":"/a","value":1}],"condition":"from c where c.a < 1"}"#
                }
                _ => r#"{"id":"a","pk":"p"}"#,
            };
            writer
                .submit(BulkOperation {
                    kind,
                    partition_key: "p".into(),
                    id: Some("a".into()),
                    body: Bytes::from_static(body.as_bytes()),
                    if_match: (i == 1).then(|| "\"e\"".to_string()),
                    context: i as u8,
                })
                .await
                .unwrap();
        }
        writer.close().await;
        let mut n = 0;
        while let Some(o) = outcomes.next().await {
            assert!(o.is_success(), "{o:?}");
            assert_eq!(
                (o.range_id.as_str(), o.request_charge, o.etag.as_deref()),
                ("0", 1.5, Some("\"x\""))
            );
            n += 1;
        }
        assert_eq!(n, 2);

        let ranges = seen.recv().await.unwrap();
        assert_eq!(
            (ranges.method.as_str(), ranges.path.as_str()),
            ("GET", "/dbs/db/colls/c/pkranges")
        );
        let batch = seen.recv().await.unwrap();
        assert_eq!(
            (batch.method.as_str(), batch.path.as_str()),
            ("POST", "/dbs/db/colls/c/docs")
        );
        assert_eq!(batch.headers["x-ms-cosmos-is-batch-request"], "True");
        assert_eq!(batch.headers["x-ms-cosmos-batch-atomic"], "False");
        assert_eq!(batch.headers["x-ms-cosmos-batch-continue-on-error"], "True");
        assert_eq!(batch.headers["x-ms-documentdb-partitionkeyrangeid"], "0");
        assert!(!batch.headers.contains_key("x-ms-documentdb-partitionkey"));
        assert_eq!(batch.headers["prefer"], "return=minimal");
        let date = &batch.headers["x-ms-date"];
        assert_eq!(
            batch.headers["authorization"],
            key().authorization("POST", "docs", "dbs/db/colls/c", date)
        );
        let ops: serde_json::Value = serde_json::from_slice(&batch.body).unwrap();
        assert_eq!(
            ops,
            serde_json::json!([
                {"operationType": "Upsert", "partitionKey": "[\"p\"]", "id": "a", "resourceBody": {"id": "a", "pk": "p"}},
                {"operationType": "Patch", "partitionKey": "[\"p\"]", "id": "a", "ifMatch": "\"e\"",
                 "resourceBody": {"operations": [{"op": "set", "path": "/a", "value": 1}], "condition": "from c where c.a < 1"}}
            ])
        );
    })
    .await
    .expect("the test finished within its time limit");
}

struct StaticToken(&'static str);

impl TokenCredential for StaticToken {
    fn token(&self) -> BoxFuture<'_, Result<String, CosmosError>> {
        Box::pin(async move { Ok(self.0.to_string()) })
    }
}

#[tokio::test]
async fn entra_id_token_goes_in_the_authorization_header_and_never_in_debug() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (endpoint, mut seen) = listener(|_| {
            (
                200,
                r#"{"id":"c","partitionKey":{"paths":["/p"],"kind":"Hash","version":2}}"#.into(),
                vec![],
            )
        })
        .await;
        let credential = Credential::Token(Arc::new(StaticToken("eyJ0eXAi.secret-token")));
        let client = client(&endpoint, credential);
        assert!(!format!("{client:?}").contains("secret-token"));
        let props = client.container("db", "c").properties().await.unwrap();
        assert_eq!(props.partition_key.paths, vec!["/p".to_string()]);
        let r = seen.recv().await.unwrap();
        assert_eq!(
            r.headers["authorization"],
            aad_authorization("eyJ0eXAi.secret-token")
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn errors_carry_status_substatus_activity_and_charge() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (endpoint, _seen) = listener(|_| {
            (
                412,
                r#"{"code":"PreconditionFailed","message":"Operation cannot be performed because one of the specified precondition is not met."}"#.into(),
                vec![
                    ("x-ms-substatus", "0".into()),
                    ("x-ms-activity-id", "a1b2".into()),
                    ("x-ms-request-charge", "1.24".into()),
                ],
            )
        })
        .await;
        let container = client(&endpoint, Credential::MasterKey(key())).container("db", "c");
        let err = container
            .delete("p", "a", Some("\"old\""))
            .await
            .unwrap_err();
        assert!(err.is_precondition_failed());
        let CosmosError::Service(answer) = &err else {
            panic!("a service error, not {err}");
        };
        assert_eq!(answer.activity_id.as_deref(), Some("a1b2"));
        assert_eq!(answer.request_charge, 1.24);
        assert!(err.to_string().contains("precondition is not met"), "{err}");
    })
    .await
    .expect("the test finished within its time limit");
}
