//! What the integration tests share: a minimal signed REST client (every request is signed
//! with the master key through `cosmos_wire::auth`, as a real client does, or carries an
//! Entra ID token), an endpoint started
//! with the container they use, and batch headers and bodies.
#![allow(dead_code)]

use cosmos_sim::CosmosSim;
use cosmos_wire::auth::{MasterKey, aad_authorization, resource_for_path};
use cosmos_wire::batch::{
    BatchBody, OperationRef, OperationType, UNDEFINED_PARTITION_KEY_JSON, partition_key_json,
};
use cosmos_wire::headers as h;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The documents path of the container [`start`] creates.
pub const DOCS: &str = "/dbs/db/colls/c/docs";

/// Starts an endpoint whose containers get `partitions` ranges sharing `ru_per_sec`, with
/// database `db` and container `c` keyed on `/deviceId`; and a client for it.
pub async fn start(partitions: usize, ru_per_sec: f64) -> (CosmosSim, Rest) {
    let sim = CosmosSim::builder()
        .partitions(partitions)
        .ru_per_sec(ru_per_sec)
        .start()
        .await
        .unwrap();
    let rest = Rest::new(&sim.endpoint(), sim.key());
    rest.setup("db", "c").await;
    (sim, rest)
}

/// Headers of a non-atomic bulk batch aimed at a range that continues past failures.
pub fn bulk_headers(range: &str) -> Vec<(&'static str, String)> {
    vec![
        (h::IS_BATCH_REQUEST, "True".to_string()),
        (h::BATCH_ATOMIC, "False".to_string()),
        (h::BATCH_CONTINUE_ON_ERROR, "True".to_string()),
        (h::PARTITION_KEY_RANGE_ID, range.to_string()),
    ]
}

/// Headers of a transactional batch on the logical partition `pk` (a key's JSON array).
pub fn atomic_headers(pk: &str) -> Vec<(&'static str, String)> {
    vec![
        (h::IS_BATCH_REQUEST, "True".to_string()),
        (h::BATCH_ATOMIC, "True".to_string()),
        (h::PARTITION_KEY, pk.to_string()),
    ]
}

/// One batch operation: what, the key's JSON array, the id, the body.
pub type Op<'a> = (OperationType, &'a str, Option<&'a str>, Option<&'a str>);

/// A batch body of these operations.
pub fn batch_body(ops: &[Op<'_>]) -> Vec<u8> {
    let mut body = BatchBody::new();
    for (kind, pk, id, doc) in ops {
        body.push(&OperationRef {
            operation_type: *kind,
            partition_key: pk,
            id: *id,
            resource_body: doc.map(str::as_bytes),
            if_match: None,
        });
    }
    body.finish()
}

pub struct Rest {
    pub http: reqwest::Client,
    pub endpoint: String,
    pub key: MasterKey,
    /// An Entra ID access token sent instead of the key's signature.
    pub token: Option<String>,
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    pub fn charge(&self) -> f64 {
        self.headers[h::REQUEST_CHARGE]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Rest {
    pub fn new(endpoint: &str, key: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .unwrap(),
            endpoint: endpoint.trim_end_matches('/').to_string(),
            key: MasterKey::from_base64(key).unwrap(),
            token: None,
        }
    }

    /// A client that sends `token` (`type=aad`) instead of signing with the key.
    pub fn with_token(endpoint: &str, token: &str) -> Self {
        Self {
            token: Some(token.to_string()),
            ..Self::new(endpoint, cosmos_wire::auth::EMULATOR_KEY)
        }
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Answer {
        let date = cosmos_wire::http_date(std::time::SystemTime::now());
        let (rtype, link) = resource_for_path(path);
        let auth = match &self.token {
            Some(token) => aad_authorization(token),
            None => self
                .key
                .authorization(method.as_str(), &rtype, &link, &date),
        };
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.endpoint))
            .header("authorization", auth)
            .header(h::DATE, date)
            .header(h::VERSION, cosmos_wire::API_VERSION);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    /// Posts to the documents of container `c`: a batch, a create or a query.
    pub async fn post_docs(&self, headers: &[(&str, String)], body: Vec<u8>) -> Answer {
        self.send(Method::POST, DOCS, headers, Some(body)).await
    }

    pub async fn setup(&self, db: &str, coll: &str) {
        let r = self
            .send(
                Method::POST,
                "/dbs",
                &[],
                Some(json!({"id": db}).to_string().into_bytes()),
            )
            .await;
        assert!(r.status == 201 || r.status == 409, "{:?}", r.body);
        let def = json!({"id": coll, "partitionKey": {"paths": ["/deviceId"], "kind": "Hash", "version": 2}});
        let r = self
            .send(
                Method::POST,
                &format!("/dbs/{db}/colls"),
                &[],
                Some(def.to_string().into_bytes()),
            )
            .await;
        assert_eq!(r.status, 201, "{:?}", r.body);
    }

    /// Upserts a document under its `deviceId`, or under the undefined key if it has none.
    pub async fn upsert(&self, db: &str, coll: &str, doc: &Value) -> Answer {
        let pk = doc["deviceId"].as_str().map_or_else(
            || UNDEFINED_PARTITION_KEY_JSON.to_string(),
            partition_key_json,
        );
        self.send(
            Method::POST,
            &format!("/dbs/{db}/colls/{coll}/docs"),
            &[(h::PARTITION_KEY, pk), (h::IS_UPSERT, "True".into())],
            Some(doc.to_string().into_bytes()),
        )
        .await
    }

    pub async fn ranges(
        &self,
        db: &str,
        coll: &str,
    ) -> Vec<cosmos_wire::resources::PartitionKeyRange> {
        let r = self
            .send(
                Method::GET,
                &format!("/dbs/{db}/colls/{coll}/pkranges"),
                &[],
                None,
            )
            .await;
        assert_eq!(r.status, 200);
        serde_json::from_value::<cosmos_wire::resources::PartitionKeyRanges>(r.body)
            .unwrap()
            .ranges
    }

    pub async fn query(
        &self,
        db: &str,
        coll: &str,
        sql: &str,
        params: Value,
        target: (&str, String),
    ) -> Answer {
        self.send(
            Method::POST,
            &format!("/dbs/{db}/colls/{coll}/docs"),
            &[
                (h::IS_QUERY, "True".into()),
                ("content-type", "application/query+json".into()),
                (h::MAX_ITEM_COUNT, "-1".into()),
                target,
            ],
            Some(
                json!({"query": sql, "parameters": params})
                    .to_string()
                    .into_bytes(),
            ),
        )
        .await
    }
}
