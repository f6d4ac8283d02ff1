//! An Event Grid topic with the CloudEvents 1.0 schema: `POST {endpoint}?api-version=2018-01-01`,
//! a batch of events (`Content-Type: application/cloudevents-batch+json; charset=utf-8`),
//! authorized by the topic's access key (`aeg-sas-key`) or an Entra ID token for
//! `https://eventgrid.azure.net/.default` (role "EventGrid Data Sender"), as Microsoft's
//! `azure-eventgrid` SDK sends them.

use std::sync::Arc;

use entra_credential::EntraCredential;
use reqwest::RequestBuilder;
use settings::Secret;
use url::Url;

/// Events per request (Event Grid takes up to 1 MB per batch; alerts are under 1 KB).
pub(super) const MAX_BATCH: usize = 100;

/// The API version the SDK sends.
const API_VERSION: &str = "2018-01-01";

/// The scope of Event Grid's data plane.
pub const SCOPE: &str = "https://eventgrid.azure.net/.default";

/// The CloudEvents batch media type.
const BATCH: &str = "application/cloudevents-batch+json; charset=utf-8";

/// How requests are authorized.
pub enum EventGridAuth {
    /// The topic's access key.
    Key(Secret),
    /// Entra ID tokens.
    Entra(Arc<EntraCredential>),
}

impl std::fmt::Debug for EventGridAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EventGridAuth::Key(_) => "Key(..)",
            EventGridAuth::Entra(_) => "Entra",
        })
    }
}

/// A topic.
#[derive(Debug)]
pub struct EventGrid {
    /// The topic endpoint, e.g. `https://{topic}.{region}-1.eventgrid.azure.net/api/events`.
    pub endpoint: Url,
    /// How requests are authorized.
    pub auth: EventGridAuth,
}

impl EventGrid {
    /// The request that posts the batch `body`.
    pub(super) async fn request(
        &self,
        http: &reqwest::Client,
        body: Vec<u8>,
    ) -> Result<RequestBuilder, String> {
        let mut url = self.endpoint.clone();
        url.query_pairs_mut()
            .append_pair("api-version", API_VERSION);
        let request = http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, BATCH)
            .body(body);
        Ok(match &self.auth {
            EventGridAuth::Key(key) => request.header("aeg-sas-key", key.expose()),
            EventGridAuth::Entra(credential) => {
                let token = credential
                    .token(SCOPE)
                    .await
                    .map_err(|e| format!("no Entra ID token for Event Grid: {e}"))?;
                request.bearer_auth(token)
            }
        })
    }
}
