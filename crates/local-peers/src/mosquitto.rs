//! A real Mosquitto broker on a free port of 127.0.0.1, with its own config, data
//! directory and log in a temporary directory.
//!
//! # What survives a restart
//! With persistence on (the default), the broker keeps persistent sessions
//! (`clean_session = false`), their subscriptions, their queued QoS 1/2 messages and
//! retained messages in `mosquitto.db` in its data directory:
//! - [`Mosquitto::stop`] (SIGTERM) always writes the database before exiting, so a
//!   graceful [`Mosquitto::restart`] loses nothing.
//! - [`Mosquitto::kill`] (SIGKILL) writes nothing: by default the database is only
//!   written on a graceful stop (`autosave_interval 0`), so a killed broker comes back
//!   with the state of its last graceful stop. [`MosquittoConfig::save_every_change`]
//!   writes the database after every change instead (`autosave_on_changes true`,
//!   `autosave_interval 1`), so a kill loses at most the change being handled; it costs
//!   a full database write per change, so keep it off for load tests.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::PeerError;
use crate::process::{self, Program, Readiness};

const MOSQUITTO: Program = Program {
    name: "mosquitto",
    env_var: "MOSQUITTO_BIN",
    extra_dirs: &["/usr/sbin", "/usr/local/sbin"],
    install: "apt-get install mosquitto",
};

const MOSQUITTO_PASSWD: Program = Program {
    name: "mosquitto_passwd",
    env_var: "MOSQUITTO_PASSWD_BIN",
    extra_dirs: &["/usr/bin", "/usr/local/bin"],
    install: "apt-get install mosquitto",
};

/// Writes a Mosquitto password file for `users` (name, password) with `mosquitto_passwd`,
/// for [`MosquittoConfig::access`].
pub fn write_password_file(path: &Path, users: &[(&str, &str)]) -> Result<(), PeerError> {
    let program = MOSQUITTO_PASSWD.find()?;
    std::fs::write(path, "").map_err(PeerError::io("create the password file"))?;
    for (user, password) in users {
        let args = [
            OsStr::new("-b"),
            path.as_os_str(),
            OsStr::new(user),
            OsStr::new(password),
        ];
        let status = process::command(&program, args)
            .status()
            .map_err(PeerError::io("run mosquitto_passwd"))?;
        if !status.success() {
            return Err(PeerError::Io {
                context: format!("mosquitto_passwd for {user}"),
                source: std::io::Error::other(status.to_string()),
            });
        }
    }
    Ok(())
}

const HOST: &str = "127.0.0.1";
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many fresh ports `start` tries when another process takes the free port first.
const PORT_ATTEMPTS: usize = 3;

/// Options for a [`Mosquitto`] broker; `MosquittoConfig::default().start()` is
/// [`Mosquitto::start`].
#[derive(Debug, Clone)]
pub struct MosquittoConfig {
    persistence: bool,
    save_every_change: bool,
    websockets: bool,
    max_queued_messages: u32,
    max_inflight_messages: u32,
    access: Option<(PathBuf, PathBuf)>,
    tls: Option<TlsListener>,
}

/// A TLS listener's files (PEM): the CA that client certificates must chain to, the
/// server's certificate and key; `require_certificate` refuses clients without one.
#[derive(Debug, Clone)]
pub struct TlsListener {
    /// CA of the client certificates (and the one clients trust for the server).
    pub ca_file: PathBuf,
    /// The server's certificate.
    pub cert_file: PathBuf,
    /// The server's private key.
    pub key_file: PathBuf,
    /// Refuse clients that present no certificate signed by `ca_file`.
    pub require_certificate: bool,
}

impl Default for MosquittoConfig {
    /// Persistence on, saved on graceful stop; no websockets listener; no limit on
    /// queued or in-flight messages per client (suitable for load tests).
    fn default() -> Self {
        MosquittoConfig {
            persistence: true,
            save_every_change: false,
            websockets: false,
            max_queued_messages: 0,
            max_inflight_messages: 0,
            access: None,
            tls: None,
        }
    }
}

impl MosquittoConfig {
    /// Keep sessions, queued messages and retained messages across a graceful restart.
    pub fn persistence(mut self, on: bool) -> Self {
        self.persistence = on;
        self
    }

    /// Write the database after every change, so that state also survives SIGKILL
    /// (see the module docs). Implies persistence.
    pub fn save_every_change(mut self, on: bool) -> Self {
        self.save_every_change = on;
        self
    }

    /// Also open an MQTT-over-WebSockets listener on another free port.
    pub fn websockets(mut self, on: bool) -> Self {
        self.websockets = on;
        self
    }

    /// QoS 1/2 messages queued per client beyond those in flight; 0 is no limit
    /// (the default). Mosquitto's own default is 1000.
    pub fn max_queued_messages(mut self, count: u32) -> Self {
        self.max_queued_messages = count;
        self
    }

    /// QoS 1/2 messages in flight per client; 0 is no limit (the default).
    /// Mosquitto's own default is 20.
    pub fn max_inflight_messages(mut self, count: u32) -> Self {
        self.max_inflight_messages = count;
        self
    }

    /// Every client authenticates against `password_file` (made with `mosquitto_passwd`)
    /// and is held to `acl_file`; anonymous clients are refused.
    pub fn access(mut self, password_file: &Path, acl_file: &Path) -> Self {
        self.access = Some((password_file.to_path_buf(), acl_file.to_path_buf()));
        self
    }

    /// Also open an MQTT-over-TLS listener on another free port.
    pub fn tls(mut self, listener: TlsListener) -> Self {
        self.tls = Some(listener);
        self
    }

    /// Starts a broker with these options; see [`Mosquitto::start`].
    pub fn start(self) -> Result<Mosquitto, PeerError> {
        Mosquitto::start_with(self)
    }

    /// The config file text for a broker with these options.
    fn render(
        &self,
        port: u16,
        ws_port: Option<u16>,
        tls_port: Option<u16>,
        dir: &Path,
        log: &Path,
    ) -> String {
        let mut conf = String::new();
        // Infallible: writing to a String.
        let mut line = |text: String| {
            let _ = writeln!(conf, "{text}");
        };
        line(format!("listener {port} {HOST}"));
        if let Some(ws_port) = ws_port {
            line(format!("listener {ws_port} {HOST}"));
            line("protocol websockets".into());
            // Without it, libwebsockets ignores the address and binds [::] (all interfaces).
            line("socket_domain ipv4".into());
        }
        if let (Some(tls_port), Some(tls)) = (tls_port, &self.tls) {
            line(format!("listener {tls_port} {HOST}"));
            line(format!("cafile {}", tls.ca_file.display()));
            line(format!("certfile {}", tls.cert_file.display()));
            line(format!("keyfile {}", tls.key_file.display()));
            line(format!("require_certificate {}", tls.require_certificate));
        }
        match &self.access {
            Some((passwords, acl)) => {
                line("allow_anonymous false".into());
                line(format!("password_file {}", passwords.display()));
                line(format!("acl_file {}", acl.display()));
            }
            None => line("allow_anonymous true".into()),
        }
        // Started as root, Mosquitto switches to the `mosquitto` user, which cannot
        // write this directory; `user root` keeps the current user.
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            line("user root".into());
        }
        line(format!("max_queued_messages {}", self.max_queued_messages));
        line(format!(
            "max_inflight_messages {}",
            self.max_inflight_messages
        ));
        let persistence = self.persistence || self.save_every_change;
        line(format!("persistence {persistence}"));
        if persistence {
            line(format!("persistence_location {}/", dir.display()));
            if self.save_every_change {
                line("autosave_on_changes true".into());
                line("autosave_interval 1".into());
            } else {
                line("autosave_interval 0".into());
            }
        }
        line(format!("log_dest file {}", log.display()));
        for kind in ["error", "warning", "notice", "information"] {
            line(format!("log_type {kind}"));
        }
        line("connection_messages true".into());
        line("log_timestamp_format %Y-%m-%dT%H:%M:%S".into());
        conf
    }
}

/// A running Mosquitto broker. Dropping it kills the broker and deletes its directory.
#[derive(Debug)]
pub struct Mosquitto {
    child: Option<Child>,
    program: PathBuf,
    port: u16,
    ws_port: Option<u16>,
    tls_port: Option<u16>,
    // Dropped after `child` is killed (see `Drop`).
    dir: TempDir,
}

impl Mosquitto {
    /// Starts a broker with the default options ([`MosquittoConfig::default`]) and
    /// waits until it accepts connections.
    pub fn start() -> Result<Mosquitto, PeerError> {
        MosquittoConfig::default().start()
    }

    fn start_with(config: MosquittoConfig) -> Result<Mosquitto, PeerError> {
        let program = MOSQUITTO.find()?;
        let mut attempt = 1;
        loop {
            let mut broker = Mosquitto::prepare(&config, program.clone())?;
            match broker.launch() {
                Err(PeerError::ExitedEarly { log, .. })
                    if attempt < PORT_ATTEMPTS && log.contains("Address already in use") =>
                {
                    attempt += 1;
                }
                result => return result.map(|()| broker),
            }
        }
    }

    /// Picks ports and writes the config into a new temporary directory.
    fn prepare(config: &MosquittoConfig, program: PathBuf) -> Result<Mosquitto, PeerError> {
        let dir = tempfile::Builder::new()
            .prefix("mosquitto-")
            .tempdir()
            .map_err(PeerError::io("create a temporary directory for mosquitto"))?;
        let port = process::free_port()?;
        let ws_port = if config.websockets {
            Some(process::free_port()?)
        } else {
            None
        };
        let tls_port = match config.tls {
            Some(_) => Some(process::free_port()?),
            None => None,
        };
        let broker = Mosquitto {
            child: None,
            program,
            port,
            ws_port,
            tls_port,
            dir,
        };
        let conf = config.render(
            port,
            ws_port,
            tls_port,
            broker.dir.path(),
            &broker.log_path(),
        );
        std::fs::write(broker.conf_path(), conf).map_err(PeerError::io("write mosquitto.conf"))?;
        Ok(broker)
    }

    /// Spawns the broker and waits until its listeners accept connections.
    fn launch(&mut self) -> Result<(), PeerError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(PeerError::io("open mosquitto.log"))?;
        let clone = |file: &File| {
            file.try_clone()
                .map_err(PeerError::io("duplicate the mosquitto.log handle"))
        };
        // The log is kept across restarts: count this start's "running" line only.
        let runs_before = self.log().matches(" running").count();
        let mut command =
            process::command(&self.program, ["-c".as_ref(), self.conf_path().as_os_str()]);
        command
            .stdout(Stdio::from(clone(&log)?))
            .stderr(Stdio::from(log));
        let child = process::spawn(command)
            .map_err(PeerError::io(format!("spawn {}", self.program.display())))?;
        let child = self.child.insert(child);
        let ports: Vec<u16> = std::iter::once(self.port)
            .chain(self.ws_port)
            .chain(self.tls_port)
            .collect();
        let mut readiness = process::wait_until_accepting(child, &ports, READY_TIMEOUT)
            .map_err(PeerError::io("wait for mosquitto"))?;
        if let Readiness::Ready = readiness {
            // A port that accepts may belong to another process that took the free port
            // first (this broker then failed to bind it and exits): only the broker's own
            // "running" line, logged once every listener is bound, says that it is ours.
            let log_path = self.log_path();
            let running = || process::read_log(&log_path).matches(" running").count() > runs_before;
            let child = self.child.as_mut().expect("launched above");
            let mut exited = None;
            process::wait_until(READY_TIMEOUT, || {
                exited = child.try_wait().ok().flatten();
                exited.is_some() || running()
            });
            readiness = match exited {
                Some(status) => Readiness::Exited(status),
                None if running() => Readiness::Ready,
                None => Readiness::TimedOut,
            };
        }
        match readiness {
            Readiness::Ready => Ok(()),
            Readiness::Exited(status) => {
                self.child = None;
                Err(PeerError::ExitedEarly {
                    peer: "mosquitto",
                    status,
                    log: self.log(),
                })
            }
            Readiness::TimedOut => {
                self.kill()?;
                Err(PeerError::Timeout {
                    peer: "mosquitto",
                    what: "accept connections",
                    secs: READY_TIMEOUT.as_secs(),
                    log: self.log(),
                })
            }
        }
    }

    /// The broker's TCP port on [`Mosquitto::host`]; the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker's address, `127.0.0.1`.
    pub fn host(&self) -> &str {
        HOST
    }

    /// `mqtt://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mqtt://{HOST}:{}", self.port)
    }

    /// The WebSockets listener's port, if [`MosquittoConfig::websockets`] asked for one.
    pub fn ws_port(&self) -> Option<u16> {
        self.ws_port
    }

    /// The TLS listener's port, if [`MosquittoConfig::tls`] asked for one.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `ws://127.0.0.1:PORT`, if [`MosquittoConfig::websockets`] asked for a listener.
    pub fn ws_url(&self) -> Option<String> {
        self.ws_port.map(|port| format!("ws://{HOST}:{port}"))
    }

    /// The broker's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the broker gracefully (SIGTERM; it saves its database) and waits for it
    /// to exit. Does nothing if it is not running.
    pub fn stop(&mut self) -> Result<(), PeerError> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        if child
            .try_wait()
            .map_err(PeerError::io("check mosquitto"))?
            .is_none()
        {
            process::signal(child.id(), libc::SIGTERM)
                .map_err(PeerError::io("send SIGTERM to mosquitto"))?;
            let exited = process::wait_for_exit(child, STOP_TIMEOUT)
                .map_err(PeerError::io("wait for mosquitto to stop"))?;
            if exited.is_none() {
                self.kill()?;
                return Err(PeerError::Timeout {
                    peer: "mosquitto",
                    what: "stop after SIGTERM (it was killed)",
                    secs: STOP_TIMEOUT.as_secs(),
                    log: self.log(),
                });
            }
        }
        self.child = None;
        Ok(())
    }

    /// Kills the broker (SIGKILL; nothing is saved) and waits for it to exit.
    /// Does nothing if it is not running.
    pub fn kill(&mut self) -> Result<(), PeerError> {
        if let Some(mut child) = self.child.take() {
            process::kill_and_reap(&mut child).map_err(PeerError::io("kill mosquitto"))?;
        }
        Ok(())
    }

    /// Starts the broker again on the same port with the same data directory, stopping
    /// it gracefully first if it runs, and waits until it accepts connections.
    ///
    /// Mosquitto binds with `SO_REUSEADDR`, so connections left in TIME_WAIT do not
    /// block the port. Between stop and start another process could take the port; the
    /// restart then fails with the broker's log.
    pub fn restart(&mut self) -> Result<(), PeerError> {
        self.stop()?;
        self.launch()
    }

    /// Whether the broker process is running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(Ok(Some(_)) | Err(_)) | None => false,
        }
    }

    /// The broker's log so far (all runs, including what it wrote to stderr).
    pub fn log(&self) -> String {
        process::read_log(&self.log_path())
    }

    /// Waits until the broker's log contains `text` (e.g. `"Client sensor-1 disconnected"`),
    /// at most `timeout`; the error quotes the log. The log spans every run of this
    /// broker, so after a restart a line from an earlier run also matches.
    pub fn wait_for_log(&self, text: &str, timeout: Duration) -> Result<(), PeerError> {
        if process::wait_until(timeout, || self.log().contains(text)) {
            Ok(())
        } else {
            Err(PeerError::Timeout {
                peer: "mosquitto",
                what: "log the expected line",
                secs: timeout.as_secs(),
                log: self.log(),
            })
        }
    }

    /// The directory holding the config, the log and the persistence database.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn conf_path(&self) -> PathBuf {
        self.dir.path().join("mosquitto.conf")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("mosquitto.log")
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        // Nothing useful can be done with a failure here; the pdeathsig set at spawn
        // still ends the broker with this process.
        let _ = self.kill();
    }
}
