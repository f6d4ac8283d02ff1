//! The harness's Azurite: its Blob service answers on the port it reports, refuses a
//! request that is not signed, and is gone once the handle drops.

use std::net::{Ipv4Addr, TcpStream};

use test_harness::Azurite;

#[tokio::test(flavor = "multi_thread")]
async fn azurite_refuses_unsigned_requests_and_stops_on_drop() {
    let azurite = Azurite::start().expect("azurite starts");
    let port = azurite.port();
    let response = reqwest::Client::new()
        .get(format!("{}?comp=list", azurite.blob_endpoint()))
        .header("x-ms-version", "2021-08-06")
        .send()
        .await
        .expect("azurite answers");
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    // Listing containers needs authorization: an anonymous request is refused, which
    // shows that Azurite checks requests (the store's signatures are held to it).
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.contains("AuthorizationFailure") || body.contains("NoAuthenticationInformation"),
        "{body}"
    );
    drop(azurite);
    assert!(
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err(),
        "nothing listens once the handle dropped"
    );
}
