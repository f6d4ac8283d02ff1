//! A minimal signed REST client for the tests: every request is signed with the master key
//! through `cosmos_wire::auth`, as a real client does.
#![allow(dead_code)]

use cosmos_wire::auth::{MasterKey, resource_for_path};
use cosmos_wire::batch::{UNDEFINED_PARTITION_KEY_JSON, partition_key_json};
use cosmos_wire::headers as h;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

pub struct Rest {
    pub http: reqwest::Client,
    pub endpoint: String,
    pub key: MasterKey,
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
        let auth = self
            .key
            .authorization(method.as_str(), &rtype, &link, &date);
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
