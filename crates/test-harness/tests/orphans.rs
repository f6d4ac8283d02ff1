//! Peers die with the test process even when it is killed and no `Drop` runs.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use test_harness::{CosmosDbServer, Mosquitto, eventually_blocking, process_running};

/// Set in the child process that runs `hold_peers_until_killed`.
const HELPER_ENV: &str = "TEST_HARNESS_HOLD_PEERS";

/// Run by `peers_die_with_a_killed_test_process` in a child process: starts both peers,
/// reports their pids, and waits to be killed.
#[test]
#[ignore = "helper: run by peers_die_with_a_killed_test_process in a child process"]
fn hold_peers_until_killed() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let broker = Mosquitto::start().expect("start mosquitto");
    let server = CosmosDbServer::start().expect("start cosmosdb-server");
    println!("pids {} {}", broker.pid().unwrap(), server.pid());
    // Returns only if the parent closes stdin instead of killing this process.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

#[test]
fn peers_die_with_a_killed_test_process() {
    // The killed helper cannot delete its peers' directories; they go with this one.
    let tmp = tempfile::tempdir().unwrap();
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hold_peers_until_killed",
            "--include-ignored",
            "--nocapture",
        ])
        .env(HELPER_ENV, "1")
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the helper test process");

    let stdout = BufReader::new(helper.stdout.take().unwrap());
    let pids: Vec<u32> = stdout
        .lines()
        .map(|line| line.expect("read the helper's stdout"))
        .find_map(|line| {
            line.strip_prefix("pids ")
                .map(|pids| pids.split(' ').map(|pid| pid.parse().unwrap()).collect())
        })
        .expect("the helper reports its peers' pids");
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&pid| process_running(pid)));

    helper.kill().unwrap();
    helper.wait().unwrap();

    eventually_blocking(
        "the peers to die with the killed test process",
        Duration::from_secs(10),
        || {
            pids.iter()
                .filter(|&&pid| process_running(pid))
                .collect::<Vec<_>>()
        },
        Vec::is_empty,
    );
}
