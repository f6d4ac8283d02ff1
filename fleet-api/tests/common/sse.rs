//! A viewer of the live stream (`GET /api/drones/stream`), reading its server-sent events
//! one at a time.

use std::time::Duration;

use serde_json::Value;

/// One server-sent event.
#[derive(Debug)]
pub struct Event {
    pub name: String,
    pub id: u64,
    pub data: Value,
}

/// A viewer's stream, read one event at a time.
pub struct Viewer {
    response: reqwest::Response,
    buffer: String,
}

impl Viewer {
    pub async fn open(base: &str, last_event_id: Option<u64>) -> Viewer {
        let mut request = reqwest::Client::new().get(format!("{base}/api/drones/stream"));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = tokio::time::timeout(Duration::from_secs(30), request.send())
            .await
            .expect("the stream answers within 30 s")
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Viewer {
            response,
            buffer: String::new(),
        }
    }

    /// The next event (keep-alive comments skipped).
    pub async fn next(&mut self) -> Event {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut name, mut id, mut data) = (String::new(), 0, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().unwrap();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if !name.is_empty() {
                    return Event {
                        name,
                        id,
                        data: serde_json::from_str(&data).unwrap(),
                    };
                }
                continue;
            }
            let chunk = self
                .response
                .chunk()
                .await
                .unwrap()
                .expect("the stream stays open");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}
