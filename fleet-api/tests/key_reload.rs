//! The API key file followed while the API runs: a key taken out of the file is refused
//! within 5 s without a restart, and an emptied file revokes every key; a version that does
//! not parse, or a file that goes away, keeps the last good keys, and each is counted in
//! `/metrics`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys, Role, key_line};

const KEY_A: &str = "key-a-0123456789-0123456789-0123456789-0123";
const KEY_B: &str = "key-b-0123456789-0123456789-0123456789-0123";

/// The status of a read with `key`.
async fn status(base: &str, key: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{base}/api/drones/drone-1"))
        .header("X-API-Key", key)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Writes `text` beside `file` and renames it over it, as a secret volume or an editor does.
fn replace(file: &Path, text: &str) {
    let next = file.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, file).unwrap();
}

/// The value of the key file failures counter in `/metrics`.
async fn failures(base: &str) -> u64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("fleet_api_key_file_reload_failures_total "))
        .unwrap_or_else(|| panic!("no failures counter in {text}"))
        .parse()
        .unwrap()
}

/// Sends reads with `key` until one answers `want`; the time it took.
async fn until(base: &str, key: &str, want: u16) -> Duration {
    let started = Instant::now();
    loop {
        if status(base, key).await == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{key}: never {want}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_is_refused_and_a_bad_file_keeps_the_last_good_keys() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let sim = CosmosSim::unthrottled().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        let a = key_line("a", Role::Read, KEY_A).unwrap();
        let b = key_line("b", Role::Read, KEY_B).unwrap();
        std::fs::write(&file, format!("{a}\n{b}\n")).unwrap();
        let access = Access::start(AccessConfig {
            keys: ApiKeys::load(&file).unwrap(),
            oidc: None,
            anonymous: false,
        })
        .await
        .unwrap();
        let (base, _stop) = serve_with(c, ApiOptions::default(), access).await;
        // Let in (no such drone: 404, not 401).
        assert_eq!(status(&base, KEY_A).await, 404);
        assert_eq!(status(&base, KEY_B).await, 404);
        assert_eq!(failures(&base).await, 0);

        replace(&file, &format!("{b}\n"));
        let took = until(&base, KEY_A, 401).await;
        assert!(took < Duration::from_secs(5), "revoked after {took:?}");
        assert_eq!(status(&base, KEY_B).await, 404);

        // Rewritten in place with a line that does not parse: B stays in, counted.
        std::fs::write(&file, format!("{b}\nc Fleet.Read not-a-hash\n")).unwrap();
        assert_eq!(status(&base, KEY_B).await, 404);
        assert_eq!(status(&base, KEY_A).await, 401);
        assert_eq!(failures(&base).await, 1);

        // Gone (moved away): the keys in hand stay, counted once.
        std::fs::remove_file(&file).unwrap();
        assert_eq!(status(&base, KEY_B).await, 404);
        assert_eq!(status(&base, KEY_B).await, 404);
        assert_eq!(failures(&base).await, 2);

        // Back with A: A is let in again, no restart.
        replace(&file, &format!("{a}\n"));
        until(&base, KEY_A, 404).await;
        assert_eq!(status(&base, KEY_B).await, 401);
        assert_eq!(failures(&base).await, 2);

        // Emptied (only a comment left): every key is revoked, which is no failure.
        replace(&file, "# all keys revoked\n");
        until(&base, KEY_A, 401).await;
        assert_eq!(failures(&base).await, 2);
    })
    .await
    .expect("test timed out");
}
