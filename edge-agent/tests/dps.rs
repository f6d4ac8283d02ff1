//! The agent onboarding itself through the local hub's Device Provisioning Service: the
//! first start registers with a key derived from the group's and publishes to the assigned
//! hub; a restart reuses the kept assignment without registering (the group is disabled by
//! then, so a registration would be refused); a disabled group is reported with DPS's error
//! code and tried again on the backoff schedule; the group key without the lab's opt-in
//! stops the agent.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use hub_sim::EnrollmentId;
use hub_sim::{HubConfig, HubSim};
use test_harness::eventually;

/// The most a step of a test is waited for: more than a poll cut to `MAX_RETRY_AFTER`
/// (60 s), within the test's bound.
const LIMIT: Duration = Duration::from_secs(150);

async fn bounded<T>(test: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(180), test)
        .await
        .expect("the test did not finish in time")
}

async fn hub(dir: &Path) -> HubSim {
    let mut config = HubConfig::new(dir.join("hub"));
    config.dps.retry_after = Duration::from_millis(100);
    HubSim::start(config).await.unwrap()
}

/// The agent binary onboarding through `hub`'s DPS as `registration_id` with the group key
/// (a lab's opt-in).
fn agent(
    hub: &HubSim,
    dir: &Path,
    registration_id: &str,
    group_key: &str,
) -> tokio::process::Child {
    agent_with(
        hub,
        dir,
        registration_id,
        &[
            ("DPS_GROUP_KEY", group_key),
            ("DPS_GROUP_KEY_ON_DEVICE", "true"),
        ],
    )
}

/// The agent binary onboarding through `hub`'s DPS as `registration_id` with `credential`
/// (its variables).
fn agent_with(
    hub: &HubSim,
    dir: &Path,
    registration_id: &str,
    credential: &[(&str, &str)],
) -> tokio::process::Child {
    let ca = dir.join("hub-ca.pem");
    std::fs::write(&ca, hub.ca_pem()).unwrap();
    let log = std::fs::File::create(dir.join(format!("{registration_id}.log"))).unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .env_clear()
        .env("DPS_ID_SCOPE", hub.id_scope())
        .env("DPS_REGISTRATION_ID", registration_id)
        .env("DPS_ALLOWED_HUB_SUFFIX", &hub.config().host)
        .envs(credential.iter().copied())
        .env(
            "DPS_ENDPOINT",
            format!("localhost:{}", hub.dps_addr().port()),
        )
        .env("IOTHUB_CA_FILE", &ca)
        .env("IOTHUB_PORT", hub.mqtt_addr().port().to_string())
        .env("POSITION_SOURCE", "sim")
        .env("REPORT_INTERVAL", "200ms")
        .env("RECONNECT_BASE", "500ms")
        .env("RECONNECT_CAP", "500ms")
        .env("BUFFER_DIR", dir.join(registration_id))
        .env("BUFFER_FSYNC", "false")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits until `hub` accepted more than `count` messages.
async fn accepted_more_than(hub: &HubSim, count: u64) -> u64 {
    eventually(
        "messages accepted",
        LIMIT,
        async || hub.stats().messages_accepted,
        |&accepted| accepted > count,
    )
    .await
}

async fn stop(mut agent: tokio::process::Child) {
    let pid = agent.id().unwrap() as i32;
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = agent.wait().await.unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_registers_and_a_restart_reuses_the_assignment() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(dir.path()).await;
        let group_key = hub.add_symmetric_key_group("fleet").unwrap();

        let first = agent(&hub, dir.path(), "drone-dps-1", &group_key);
        let accepted = accepted_more_than(&hub, 2).await;
        stop(first).await;
        let registrations = hub.dps_registrations();
        assert_eq!(registrations.len(), 1);
        assert_eq!(registrations[0].registration_id, "drone-dps-1");
        let kept = dir.path().join("drone-dps-1/assignment.json");
        let assignment: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&kept).unwrap()).unwrap();
        assert_eq!(assignment["deviceId"], "drone-dps-1");
        assert_eq!(assignment["assignedHub"], "localhost");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&kept).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&kept).unwrap();
        assert!(!text.contains(&group_key), "no key on disk");

        // A registration now would be refused: the restart publishes on the kept one.
        hub.set_enrollment_enabled(&EnrollmentId::Group("fleet".into()), false)
            .unwrap();
        let second = agent(&hub, dir.path(), "drone-dps-1", &group_key);
        accepted_more_than(&hub, accepted + 2).await;
        stop(second).await;
        assert_eq!(hub.dps_registrations().len(), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_group_is_reported_and_tried_again_on_the_backoff_schedule() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(dir.path()).await;
        let group_key = hub.add_symmetric_key_group("fleet").unwrap();
        hub.set_enrollment_enabled(&EnrollmentId::Group("fleet".into()), false)
            .unwrap();
        let log = dir.path().join("drone-dps-2.log");
        let refusals = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("DPS registration failed") && l.contains("401002"))
                .count()
        };
        let refused = agent(&hub, dir.path(), "drone-dps-2", &group_key);
        let counted = eventually("a refusal", LIMIT, async || refusals(), |&n| n >= 1).await;
        // Each wait is drawn in [0, 500 ms] (full jitter, RECONNECT_CAP): 12 tries take 3 s
        // on average and less than 1 s with a chance below 1 in 10,000; a retry without a
        // wait would make them in milliseconds. A slow machine only makes them take longer.
        let started = std::time::Instant::now();
        eventually(
            "12 more refusals",
            LIMIT,
            async || refusals(),
            |&n| n >= counted + 12,
        )
        .await;
        let took = started.elapsed();
        assert!(took >= Duration::from_secs(1), "12 refusals in {took:?}");
        assert_eq!(hub.stats().messages_accepted, 0);
        assert!(hub.dps_registrations().is_empty());

        // Enabled again: the agent registers and publishes without a restart.
        hub.set_enrollment_enabled(&EnrollmentId::Group("fleet".into()), true)
            .unwrap();
        accepted_more_than(&hub, 0).await;
        stop(refused).await;
    })
    .await;
}

/// The sequence numbers of the positions `device` sent to `hub`, in the order received.
fn received_seqs(hub: &HubSim, device: &str) -> Vec<u64> {
    let partitions = hub.partitions();
    let partition = partitions
        .get(partitions.partition_of(device))
        .expect("the device's partition");
    let mut events = Vec::new();
    partition.read(0, 100_000, &mut events);
    events
        .iter()
        .filter(|e| &*e.message.device_id == device)
        .map(|e| telemetry::wire::decode(&e.message.body).unwrap().seq)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_deleted_from_its_hub_registers_again_and_loses_no_position() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(dir.path()).await;
        let group_key = hub.add_symmetric_key_group("fleet").unwrap();
        let agent = agent(&hub, dir.path(), "drone-dps-3", &group_key);
        let before = accepted_more_than(&hub, 3).await;
        assert!(hub.remove_device("drone-dps-3").unwrap());
        // Refused three times, the agent forgets its assignment, registers again (DPS
        // creates the device anew) and publishes what it kept meanwhile.
        accepted_more_than(&hub, before + 10).await;
        stop(agent).await;
        let log = std::fs::read_to_string(dir.path().join("drone-dps-3.log")).unwrap();
        assert!(log.contains("registering with DPS again"), "{log}");
        let mut seqs = received_seqs(&hub, "drone-dps-3");
        let newest_first_after_gap = seqs.clone();
        seqs.sort_unstable();
        seqs.dedup();
        let newest = *seqs.last().unwrap();
        assert_eq!(
            seqs,
            (1..=newest).collect::<Vec<_>>(),
            "every position arrived"
        );
        // The backlog of the outage went out after the live positions of the new link:
        // some position arrived after a newer one.
        assert!(
            newest_first_after_gap.windows(2).any(|w| w[1] < w[0]),
            "{newest_first_after_gap:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drone_with_a_certificate_of_the_fleet_ca_registers_and_publishes_with_it() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(dir.path()).await;
        // The fleet's root CA is enrolled; the drone presents its leaf and the intermediate.
        let root = hub_sim::Ca::generate().unwrap();
        let intermediate = root.intermediate("fleet intermediate").unwrap();
        hub.add_x509_group("drones", &root.cert_pem).unwrap();
        let leaf = intermediate.issue(&[], "drone-x509-1").unwrap();
        let cert = dir.path().join("drone-chain.pem");
        std::fs::write(&cert, format!("{}{}", leaf.cert_pem, intermediate.cert_pem)).unwrap();
        let key = dir.path().join("drone-key.pem");
        std::fs::write(&key, &leaf.key_pem).unwrap();
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        let agent = agent_with(
            &hub,
            dir.path(),
            "drone-x509-1",
            &[("DPS_CERT_FILE", &cert), ("DPS_KEY_FILE", &key)],
        );
        accepted_more_than(&hub, 2).await;
        stop(agent).await;
        let registrations = hub.dps_registrations();
        assert_eq!(registrations.len(), 1);
        assert_eq!(registrations[0].registration_id, "drone-x509-1");
        assert!(received_seqs(&hub, "drone-x509-1").len() >= 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_key_on_a_drone_stops_run_naming_the_drones_own_credentials() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(dir.path()).await;
        let group_key = hub.add_symmetric_key_group("fleet").unwrap();
        let output = agent_with(
            &hub,
            dir.path(),
            "drone-dps-4",
            &[("DPS_GROUP_KEY", &group_key)],
        )
        .wait_with_output()
        .await
        .unwrap();
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let log = std::fs::read_to_string(dir.path().join("drone-dps-4.log")).unwrap();
        for named in ["DPS_DEVICE_KEY", "X.509", "derive-key"] {
            assert!(log.contains(named), "{named} not named in: {log}");
        }
        assert!(!log.contains(&group_key), "the key itself is never printed");
        assert!(hub.dps_registrations().is_empty());
    })
    .await;
}

/// Runs `openssl` with `args` in `dir`; panics with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "openssl {args:?}: {output:?}");
}

/// A fleet's root CA and intermediate made by OpenSSL in `dir`: `root.pem`, `int.pem` and
/// `int-key.pem`.
fn openssl_fleet_ca(dir: &Path) {
    let ca_ext = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n\
                  subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n";
    std::fs::write(dir.join("ca.ext"), ca_ext).unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut root = vec!["req", "-x509"];
    root.extend(ec);
    root.extend([
        "-keyout",
        "root-key.pem",
        "-out",
        "root.pem",
        "-days",
        "30",
        "-subj",
        "/CN=fleet root",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &root);
    let mut request = vec!["req"];
    request.extend(ec);
    request.extend([
        "-keyout",
        "int-key.pem",
        "-out",
        "int.csr",
        "-subj",
        "/CN=fleet intermediate",
    ]);
    openssl(dir, &request);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "int.csr",
            "-CA",
            "root.pem",
            "-CAkey",
            "root-key.pem",
            "-set_serial",
            "2",
            "-days",
            "30",
            "-extfile",
            "ca.ext",
            "-out",
            "int.pem",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_certs_issues_each_drone_a_certificate_the_fleets_x509_group_trusts() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(dir.path()).await;
        let pki = dir.path().join("pki");
        std::fs::create_dir_all(&pki).unwrap();
        openssl_fleet_ca(&pki);
        std::fs::write(pki.join("ids"), "drone-x509-2\ndrone-x509-3\n").unwrap();
        // fleet-certs, issuing from the intermediate a certificate for each id in `ids`.
        let issue = || {
            std::process::Command::new(env!("CARGO_BIN_EXE_fleet-certs"))
                .args([
                    "--ca-cert",
                    "int.pem",
                    "--ca-key",
                    "int-key.pem",
                    "--out",
                    "drones",
                    "ids",
                ])
                .current_dir(&pki)
                .output()
                .unwrap()
        };
        let issued = issue();
        assert!(issued.status.success(), "{issued:?}");
        let drones = pki.join("drones");
        for id in ["drone-x509-2", "drone-x509-3"] {
            // OpenSSL, not our code, checks the chain up to the root.
            openssl(
                &drones,
                &[
                    "verify",
                    "-purpose",
                    "sslclient",
                    "-CAfile",
                    "../root.pem",
                    "-untrusted",
                    "../int.pem",
                    &format!("{id}.pem"),
                ],
            );
            use std::os::unix::fs::PermissionsExt as _;
            let key = std::fs::metadata(drones.join(format!("{id}-key.pem"))).unwrap();
            assert_eq!(key.permissions().mode() & 0o777, 0o600);
        }
        // Issued again: refused, nothing replaced.
        let again = issue();
        assert_eq!(again.status.code(), Some(2), "{again:?}");

        // The DPS X.509 group of the fleet's root trusts the drone's chain.
        let root = std::fs::read_to_string(pki.join("root.pem")).unwrap();
        hub.add_x509_group("drones", &root).unwrap();
        let (cert, key) = (
            drones.join("drone-x509-2.pem"),
            drones.join("drone-x509-2-key.pem"),
        );
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        let agent = agent_with(
            &hub,
            dir.path(),
            "drone-x509-2",
            &[("DPS_CERT_FILE", &cert), ("DPS_KEY_FILE", &key)],
        );
        accepted_more_than(&hub, 2).await;
        stop(agent).await;
        assert_eq!(hub.dps_registrations()[0].registration_id, "drone-x509-2");
        assert!(received_seqs(&hub, "drone-x509-2").len() >= 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_outside_the_allowed_suffix_is_refused_and_nothing_is_kept() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(dir.path()).await;
        let group_key = hub.add_symmetric_key_group("fleet").unwrap();
        // The local hub's name is `localhost`; the agent allows only the public cloud's.
        let mut agent = agent_with(
            &hub,
            dir.path(),
            "drone-dps-5",
            &[
                ("DPS_GROUP_KEY", &group_key),
                ("DPS_GROUP_KEY_ON_DEVICE", "true"),
                ("DPS_ALLOWED_HUB_SUFFIX", ".azure-devices.net"),
            ],
        );
        let log = dir.path().join("drone-dps-5.log");
        let refusals = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter(|l| {
                    l.contains("DPS registration failed")
                        && l.contains("assigned the hub \"localhost\", outside DPS_ALLOWED_HUB_SUFFIX (.azure-devices.net)")
                })
                .count()
        };
        eventually("two refusals", LIMIT, async || {
            assert!(
                agent.try_wait().unwrap().is_none(),
                "the agent keeps trying: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            refusals()
        }, |&n| n >= 2)
        .await;
        stop(agent).await;
        assert!(!dir.path().join("drone-dps-5/assignment.json").exists());
        assert_eq!(hub.stats().messages_accepted, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_days_retry_after_from_dps_is_cut_to_a_minute() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let mut config = HubConfig::new(dir.path().join("hub"));
        config.dps.retry_after = Duration::from_secs(86_400);
        // One 202 (to the registration), then assigned at the first status poll.
        config.dps.assigning_polls = 0;
        let hub = HubSim::start(config).await.unwrap();
        let group_key = hub.add_symmetric_key_group("fleet").unwrap();
        let agent = agent(&hub, dir.path(), "drone-dps-6", &group_key);
        // DPS answers 202 with retry-after=86400; the agent polls again after at most
        // MAX_RETRY_AFTER (60 s, twice the registration's keep-alive: the connection holds),
        // is assigned and publishes well within the test's 180 s.
        accepted_more_than(&hub, 0).await;
        stop(agent).await;
        let log = std::fs::read_to_string(dir.path().join("drone-dps-6.log")).unwrap();
        assert!(
            log.contains("DPS asked for a longer wait than the agent takes")
                && log.contains("asked_secs=86400"),
            "{log}"
        );
        assert_eq!(edge_agent::MAX_RETRY_AFTER, Duration::from_secs(60));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hubs_linked_with_even_distribution_each_get_half_of_200_drones() {
    use edge_agent::{DpsConfig, DpsCredential, HubSuffix, register};
    use hub_sim::Allocation;
    use settings::Secret;
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let mut config = HubConfig::new(dir.path().join("a"));
        config.dps.retry_after = Duration::from_millis(50);
        config.dps.allocation = Allocation::EvenlyDistributed;
        let a = HubSim::start(config).await.unwrap();
        // Hub B shares A's CA and port, at 127.0.0.2 (only DPS on A is dialled).
        let b_dir = dir.path().join("b");
        std::fs::create_dir_all(&b_dir).unwrap();
        for file in ["ca.pem", "ca-key.pem"] {
            std::fs::copy(dir.path().join("a").join(file), b_dir.join(file)).unwrap();
        }
        let mut b_config = HubConfig::new(&b_dir);
        // Its name under the local hub's, which the drones allow.
        b_config.host = "hub-b.localhost".into();
        b_config.bind = "127.0.0.2".parse().unwrap();
        b_config.mqtt_port = a.mqtt_addr().port();
        let b = HubSim::start(b_config).await.unwrap();
        a.link_hub(&b).unwrap();
        let group_key = a.add_symmetric_key_group("fleet").unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, a.ca_pem()).unwrap();

        let drone = |i: usize| DpsConfig {
            id_scope: a.id_scope().to_owned(),
            registration_id: format!("drone-{i:03}"),
            credential: DpsCredential::Group(Secret::new(group_key.clone())),
            host: "localhost".into(),
            port: a.dps_addr().port(),
            ca_file: Some(ca.clone()),
            allowed_hubs: HubSuffix::new("localhost").unwrap(),
        };
        let mut on_b = 0;
        for batch in (0..200).collect::<Vec<_>>().chunks(25) {
            let registrations = batch.iter().map(|&i| {
                let config = drone(i);
                async move {
                    let attestation = config.attestation().unwrap();
                    register(&config, &attestation).await.unwrap()
                }
            });
            for assignment in futures::future::join_all(registrations).await {
                if assignment.assigned_hub == "hub-b.localhost" {
                    on_b += 1;
                } else {
                    assert_eq!(assignment.assigned_hub, "localhost");
                }
            }
        }
        assert!((90..=110).contains(&on_b), "{on_b} of 200 on hub B");
        assert_eq!(a.dps_registrations().len(), 200);
        b.shutdown().await;
    })
    .await;
}
