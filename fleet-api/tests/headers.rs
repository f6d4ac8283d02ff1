//! The browser's rules over HTTP: the security headers on reads, refusals and the map; the
//! map's content security policy (no inline script or style); CORS closed by default and
//! open to exactly the listed origins.

mod common;

use std::time::Duration;

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys};
use reqwest::header::HeaderMap;

const OPS: &str = "https://ops.example.com";

async fn headers(request: reqwest::RequestBuilder) -> (u16, HeaderMap) {
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.headers().clone())
}

fn value<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or_default()
}

fn assert_secured(headers: &HeaderMap, policy: &str) {
    assert_eq!(value(headers, "x-content-type-options"), "nosniff");
    assert_eq!(value(headers, "x-frame-options"), "DENY");
    assert_eq!(value(headers, "referrer-policy"), "no-referrer");
    assert_eq!(value(headers, "cache-control"), "no-store");
    assert!(
        value(headers, "content-security-policy").starts_with(policy),
        "{headers:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_is_secured_and_cors_opens_only_to_listed_origins() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        seed_latest(&c, &scatter(2, 5)).await;
        let http = reqwest::Client::new();
        let listed = ApiOptions {
            cors_origins: vec![OPS.parse().unwrap()],
            ..ApiOptions::default()
        };
        let (open, _stop) = serve(c.clone(), listed).await;
        let (closed, _stop_closed) = serve(c.clone(), ApiOptions::default()).await;

        let (status, h) = headers(http.get(format!("{open}/api/drones"))).await;
        assert_eq!(status, 200);
        assert_secured(&h, "default-src 'none'");
        let (status, h) = headers(http.get(format!("{open}/"))).await;
        assert_eq!(status, 200);
        assert_secured(&h, "default-src 'self'");
        assert!(!value(&h, "content-security-policy").contains("unsafe"));
        for (file, kind) in [("map.js", "text/javascript"), ("map.css", "text/css")] {
            let (status, h) = headers(http.get(format!("{open}/{file}"))).await;
            assert_eq!(status, 200, "{file}");
            assert!(value(&h, "content-type").starts_with(kind), "{file}");
        }
        let page = http
            .get(format!("{open}/"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!page.contains("<script>") && !page.contains("<style") && !page.contains("style="));

        // A listed origin: the preflight and the read are allowed, the cost headers readable.
        let preflight = http
            .request(reqwest::Method::OPTIONS, format!("{open}/api/drones"))
            .header("Origin", OPS)
            .header("Access-Control-Request-Method", "GET")
            .header("Access-Control-Request-Headers", "x-api-key");
        let (status, h) = headers(preflight).await;
        assert!((200..300).contains(&status), "{status}");
        assert_eq!(value(&h, "access-control-allow-origin"), OPS);
        assert!(value(&h, "access-control-allow-headers").contains("x-api-key"));
        let (_, h) = headers(http.get(format!("{open}/api/drones")).header("Origin", OPS)).await;
        assert_eq!(value(&h, "access-control-allow-origin"), OPS);
        assert!(value(&h, "access-control-expose-headers").contains("x-query-request-charge"));
        // Another origin, or no list at all: no CORS headers, so browsers keep it out.
        let other = "https://evil.example";
        let (_, h) = headers(
            http.get(format!("{open}/api/drones"))
                .header("Origin", other),
        )
        .await;
        assert!(h.get("access-control-allow-origin").is_none(), "{h:?}");
        let (_, h) = headers(
            http.get(format!("{closed}/api/drones"))
                .header("Origin", OPS),
        )
        .await;
        assert!(h.get("access-control-allow-origin").is_none(), "{h:?}");

        // A refusal carries them too.
        let keys = ApiKeys::parse(&format!("ci Fleet.Read {}", "ab".repeat(32))).unwrap();
        let access = Access::start(AccessConfig {
            keys,
            oidc: None,
            anonymous: false,
        })
        .await
        .unwrap();
        let (guarded, _stop_guarded) = serve_with(c, ApiOptions::default(), access).await;
        let (status, h) = headers(http.get(format!("{guarded}/api/drones"))).await;
        assert_eq!(status, 401);
        assert_secured(&h, "default-src 'none'");
        sim.shutdown().await;
    })
    .await
    .expect("bounded");
}
