//! The agent binary against a real gpsd: `gpsfake` (Debian's `gpsd-clients`) feeds our NMEA
//! log `data/flight.nmea` (RMC + GGA + GSA + GSV, 30 fixes in three stretches of GGA fix
//! quality 1, 2 and 4, no fix before, between and after them; made by
//! `data/make_flight_nmea.py`) to a gpsd of its own, over and over, and a subscriber on
//! Mosquitto reads what the agent publishes.
//!
//! The expected positions come from the log, read here as NMEA defines it (ddmm.mmmm,
//! hemispheres, the RMC date and time, the GGA altitude), never from the agent's code; so
//! does the GNSS health (the GGA fix quality and satellites in use, the GSV satellites in
//! view), except the accuracy, which is gpsd's own estimate (`eph` of its TPV report, read
//! by a second client of the same gpsd). The
//! agent samples the latest fix every interval, so a fix may be published twice or not at
//! all; what must hold is that every published position is a fix of the log, that many
//! distinct ones arrive, and that between the stretches the agent counts intervals without
//! a fix (`no_fix` in its status file) instead of publishing.

use std::collections::BTreeSet;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use rumqttc::{AsyncClient, Event, Incoming, MqttOptions, QoS};
use test_harness::{Mosquitto, eventually};

const DEVICE: &str = "drone-gpsd";

/// How long the whole exchange may take (a cycle of the log is about 12 s).
const DEADLINE: Duration = Duration::from_secs(120);

/// Distinct fixes of the log's 30 that must arrive.
const DISTINCT: usize = 20;

/// Changes from one stretch of fixes to another that must be seen.
const GAPS: usize = 2;

/// Half the log's precision (0.0001 minute), in degrees.
const DEGREES: f64 = 0.5 * 0.0001 / 60.0;

/// One fix of the log.
#[derive(Debug, Clone)]
struct LogFix {
    time: DateTime<Utc>,
    lat: f64,
    lon: f64,
    alt_m: f64,
    /// The GGA fix quality (1 GPS, 2 DGPS, 4 RTK fixed).
    quality: u8,
    /// The GGA satellites in use.
    used: u8,
    /// Which stretch of consecutive fixes it belongs to.
    stretch: usize,
}

impl LogFix {
    /// The fix type on the wire: a GGA fix quality (GSA says 3D throughout).
    fn fix_type(&self) -> &'static str {
        match self.quality {
            1 => "3d",
            2 => "dgps",
            4 => "rtkFixed",
            5 => "rtkFloat",
            other => panic!("GGA fix quality {other} is not in the log"),
        }
    }
}

/// The fixes of an NMEA log: each RMC with status A, with the altitude, fix quality and
/// satellites in use of the GGA of the same time; and the satellites in view its GSV
/// sentences give (one count for the whole log). Every sentence's checksum is checked.
fn log_fixes(text: &str) -> (Vec<LogFix>, u8) {
    let mut fixes = Vec::new();
    let mut gga = std::collections::HashMap::new();
    let mut in_view = BTreeSet::new();
    let mut stretch = 0;
    let mut in_stretch = false;
    for line in text.lines() {
        let body = line.strip_prefix('$').expect("a sentence starts with $");
        let (body, checksum) = body.split_once('*').expect("a sentence has a checksum");
        let sum = body.bytes().fold(0u8, |acc, b| acc ^ b);
        assert_eq!(
            u8::from_str_radix(checksum.trim(), 16).unwrap(),
            sum,
            "{line}"
        );
        let fields: Vec<&str> = body.split(',').collect();
        match fields[0] {
            "GPRMC" if fields[2] == "A" => {
                if !in_stretch {
                    stretch += 1;
                    in_stretch = true;
                }
                let time = NaiveTime::parse_from_str(fields[1], "%H%M%S%.f").unwrap();
                let date = NaiveDate::parse_from_str(fields[9], "%d%m%y").unwrap();
                fixes.push(LogFix {
                    time: date.and_time(time).and_utc(),
                    lat: angle(fields[3], 2, fields[4], "S"),
                    lon: angle(fields[5], 3, fields[6], "W"),
                    alt_m: f64::NAN,
                    quality: 0,
                    used: 0,
                    stretch,
                });
            }
            "GPRMC" => in_stretch = false,
            "GPGGA" if fields[6] != "0" => {
                let time = NaiveTime::parse_from_str(fields[1], "%H%M%S%.f").unwrap();
                let quality = fields[6].parse::<u8>().unwrap();
                let used = fields[7].parse::<u8>().unwrap();
                gga.insert(time, (fields[9].parse::<f64>().unwrap(), quality, used));
            }
            "GPGSV" => {
                in_view.insert(fields[3].parse::<u8>().unwrap());
            }
            _ => {}
        }
    }
    for fix in &mut fixes {
        (fix.alt_m, fix.quality, fix.used) = gga[&fix.time.time()];
    }
    assert_eq!(
        in_view.len(),
        1,
        "one count of satellites in view: {in_view:?}"
    );
    (fixes, in_view.pop_first().unwrap())
}

/// NMEA's d..dmm.mmmm with its hemisphere as degrees (negative south or west).
fn angle(text: &str, degree_digits: usize, hemisphere: &str, negative: &str) -> f64 {
    let degrees: f64 = text[..degree_digits].parse().unwrap();
    let minutes: f64 = text[degree_digits..].parse().unwrap();
    let value = degrees + minutes / 60.0;
    if hemisphere == negative {
        -value
    } else {
        value
    }
}

/// `gpsfake` replaying a log into its own gpsd on a free port, both killed (as one
/// process group) when dropped; gpsd's control socket is in `dir`.
struct GpsFake {
    child: Child,
    port: u16,
}

impl GpsFake {
    fn start(log: &Path, dir: &Path) -> GpsFake {
        let mut last = String::new();
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            // gpsfake runs `gpsd`, which Debian installs in /usr/sbin.
            let path = format!(
                "{}:/usr/sbin:/sbin",
                std::env::var("PATH").unwrap_or_default()
            );
            // -n: gpsd reads the log from the start, with or without a client; -c: 0.1 s
            // between sentences (an epoch of RMC + GGA every 0.2 s); the log repeats.
            // Its messages go to a file: a pipe nobody reads could fill and stop it.
            let messages = dir.join(format!("gpsfake-{port}.log"));
            let spawned = Command::new("gpsfake")
                .args(["-q", "-n", "-c", "0.1", "-P", &port.to_string()])
                .arg(log)
                .env("PATH", path)
                .env("TMPDIR", dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&messages).unwrap())
                .process_group(0)
                .spawn();
            let child = match spawned {
                Ok(child) => child,
                Err(err) => panic!(
                    "gpsfake cannot start ({err}): install it with `apt-get install --no-install-recommends gpsd gpsd-clients`"
                ),
            };
            let mut fake = GpsFake { child, port };
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return fake;
                }
                if let Some(status) = fake.child.try_wait().unwrap() {
                    let stderr = std::fs::read_to_string(&messages).unwrap_or_default();
                    last = format!("gpsfake ended ({status}): {stderr}");
                    break;
                }
                // Not `eventually`: gpsfake ending early is retried on another port.
                std::thread::sleep(Duration::from_millis(50));
            }
            if last.is_empty() {
                last = format!("gpsd did not listen on port {port} within 20 s");
            }
        }
        panic!("no gpsfake: {last}");
    }
}

impl Drop for GpsFake {
    fn drop(&mut self) {
        // The group: gpsfake and the gpsd it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// A client of gpsd, as the agent is: every TPV report gpsd sends, by its time.
struct Watcher {
    tpv: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl Watcher {
    /// Watches gpsd on `port` from a thread of its own, which ends when gpsd closes.
    fn start(port: u16) -> Watcher {
        use std::io::{BufRead, Write};
        let tpv = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(b"?WATCH={\"enable\":true,\"json\":true}\n")
            .unwrap();
        let reports = tpv.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let report: serde_json::Value = serde_json::from_str(&line).unwrap();
                if report["class"] == "TPV" {
                    reports.lock().unwrap().push(report);
                }
            }
        });
        Watcher { tpv }
    }

    /// The `eph` values gpsd reported in TPV reports of time `ts`.
    fn eph_at(&self, ts: &str) -> Vec<f64> {
        self.tpv
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r["time"] == ts)
            .filter_map(|r| r["eph"].as_f64())
            .collect()
    }
}

/// One published message and the agent's status when it arrived.
struct Received {
    message: serde_json::Value,
    no_fix: u64,
}

/// The status file's `no_fix` (0 before the agent first wrote it; it is replaced whole).
fn no_fix(status_file: &Path) -> u64 {
    match std::fs::read(status_file) {
        Ok(text) => {
            let status: serde_json::Value = serde_json::from_slice(&text).unwrap();
            status["no_fix"].as_u64().unwrap()
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
        Err(err) => panic!("{}: {err}", status_file.display()),
    }
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpsd_fixes_are_published_as_the_log_has_them_and_gaps_are_no_fix() {
    let log = data("flight.nmea");
    let (fixes, in_view) = log_fixes(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(fixes.len(), 30);
    assert_eq!(fixes.last().unwrap().stretch, 3);
    assert_eq!(in_view, 11);

    let dir = tempfile::tempdir().unwrap();
    let broker = Mosquitto::start().unwrap();
    let gpsd = GpsFake::start(&log, dir.path());
    let watcher = Watcher::start(gpsd.port);
    let status_file = dir.path().join("status.json");

    // Subscribed before the agent starts.
    let mut options = MqttOptions::new("sub-gpsd", broker.host(), broker.port());
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut eventloop) = AsyncClient::new(options, 64);
    client
        .subscribe(
            format!("devices/{DEVICE}/messages/events/#"),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Event::Incoming(Incoming::SubAck(_)) = eventloop.poll().await.unwrap() {
                break;
            }
        }
    })
    .await
    .expect("subscribed");

    let agent_log = dir.path().join("agent.log");
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .env_clear()
        .env("POSITION_SOURCE", "gpsd")
        .env("GPSD_ADDRESS", format!("127.0.0.1:{}", gpsd.port))
        .env("MQTT_URL", broker.url())
        .env("DEVICE_ID", DEVICE)
        .env("BUFFER_DIR", dir.path().join("buffer"))
        .env("BUFFER_FSYNC", "false")
        .env("REPORT_INTERVAL", "100ms")
        // Fixes never go stale here: only gpsd's own "no fix" may stop the messages.
        .env("MAX_FIX_AGE", "60s")
        .env("RECONNECT_BASE", "50ms")
        .env("RECONNECT_CAP", "500ms")
        .env("STATUS_FILE", &status_file)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&agent_log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let mut received: Vec<Received> = Vec::new();
    let mut distinct = BTreeSet::new();
    let mut gaps = 0;
    let mut with_satellites = 0;
    let outcome = tokio::time::timeout(DEADLINE, async {
        while distinct.len() < DISTINCT || gaps < GAPS || with_satellites == 0 {
            let Event::Incoming(Incoming::Publish(publish)) = eventloop.poll().await.unwrap()
            else {
                continue;
            };
            let message: serde_json::Value = serde_json::from_slice(&publish.payload).unwrap();
            let received_now = Received {
                message,
                no_fix: no_fix(&status_file),
            };
            let fix = log_fix(&fixes, in_view, &received_now.message);
            distinct.insert(fix.time);
            with_satellites += usize::from(received_now.message.get("sats").is_some());
            if let Some(before) = received.last() {
                let before_fix = log_fix(&fixes, in_view, &before.message);
                if before_fix.stretch != fix.stretch {
                    gaps += 1;
                    // The intervals of the gap were counted as no fix, not published.
                    assert!(
                        received_now.no_fix > before.no_fix,
                        "from {} (stretch {}) to {} (stretch {}) no interval without a fix was counted",
                        before_fix.time,
                        before_fix.stretch,
                        fix.time,
                        fix.stretch
                    );
                }
            }
            received.push(received_now);
        }
    })
    .await;
    let _ = agent.kill().await;
    if outcome.is_err() {
        panic!(
            "within {DEADLINE:?}: {} messages, {} distinct fixes (of {DISTINCT}), {gaps} gaps crossed (of {GAPS}); agent status:\n{}\nagent log:\n{}",
            received.len(),
            distinct.len(),
            std::fs::read_to_string(&status_file).unwrap_or_default(),
            std::fs::read_to_string(&agent_log).unwrap_or_default()
        );
    }
    // seq goes up by one per message: none is missing between those received.
    for pair in received.windows(2) {
        assert_eq!(
            pair[1].message["seq"].as_u64().unwrap(),
            pair[0].message["seq"].as_u64().unwrap() + 1
        );
    }
    assert!(received.last().unwrap().no_fix > 0);
    // The accuracy is gpsd's eph of that fix, as gpsd told its other client.
    for r in &received {
        let ts = r.message["ts"].as_str().unwrap();
        let h_acc = r.message["hAccM"]
            .as_f64()
            .unwrap_or_else(|| panic!("gpsd gives eph with every fix: {}", r.message));
        let what = format!("gpsd's TPV at {ts} with the eph of {}", r.message);
        eventually(
            &what,
            Duration::from_secs(30),
            async || watcher.eph_at(ts),
            |eph| eph.contains(&h_acc),
        )
        .await;
    }
}

/// The fix of the log that `message` publishes, checked field by field (the satellites
/// when gpsd's SKY report came with it; the log has `in_view` satellites in view); a panic
/// if it is none of them.
fn log_fix<'a>(fixes: &'a [LogFix], in_view: u8, message: &serde_json::Value) -> &'a LogFix {
    assert_eq!(message["deviceId"], DEVICE, "{message}");
    let ts: DateTime<Utc> = message["ts"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap_or_else(|err| panic!("{message}: {err}"));
    let Some(fix) = fixes.iter().find(|fix| fix.time == ts) else {
        panic!("{message}: the log has no fix at {ts}");
    };
    let lat = message["lat"].as_f64().unwrap();
    let lon = message["lon"].as_f64().unwrap();
    assert!(
        (lat - fix.lat).abs() <= DEGREES && (lon - fix.lon).abs() <= DEGREES,
        "{message}: the log's fix at {ts} is {}, {}",
        fix.lat,
        fix.lon
    );
    assert_eq!(
        message["altM"].as_f64(),
        Some(fix.alt_m),
        "{message}: the log's GGA altitude at {ts}"
    );
    assert_eq!(
        message["fix"],
        fix.fix_type(),
        "{message}: the log's GGA fix quality at {ts} is {}",
        fix.quality
    );
    if message.get("sats").is_some() {
        assert_eq!(
            message["sats"], fix.used,
            "{message}: GGA satellites in use"
        );
        assert_eq!(
            message["satsVisible"], in_view,
            "{message}: GSV satellites in view"
        );
    }
    fix
}
