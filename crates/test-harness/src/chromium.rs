//! Debian's `chromium`, headless, to load a page and read what it drew: the DOM after the
//! page's scripts ran (`--dump-dom`) or a PNG screenshot. Nothing is downloaded: the
//! browser runs with a fresh profile in a temporary directory, background networking,
//! component updates and sync off, and `--virtual-time-budget` letting the page's timers
//! and requests run before the dump.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use local_peers::PeerError;
use local_peers::Program;

const CHROMIUM: Program = Program {
    name: "chromium",
    env_var: "CHROMIUM_BIN",
    extra_dirs: &["/usr/bin"],
    install: "apt-get install chromium",
};

/// The longest a single browser run may take before it is killed.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// A headless chromium. Each call runs a new browser process with its own profile.
#[derive(Debug, Clone)]
pub struct Chromium {
    bin: PathBuf,
}

impl Chromium {
    /// Finds `chromium` (`$CHROMIUM_BIN`, then `PATH`); an error says how to install it.
    pub fn find() -> Result<Self, PeerError> {
        Ok(Self {
            bin: CHROMIUM.find()?,
        })
    }

    /// The browser's executable, for a driver that starts it (puppeteer).
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// The DOM of `url` once the page's scripts had `budget` of virtual time.
    pub fn dump_dom(&self, url: &str, budget: Duration) -> Result<String, PeerError> {
        let profile = profile()?;
        let mut command = self.command(&profile, budget, (1280, 800));
        command.arg("--dump-dom").arg(url);
        let output = run(command)?;
        Ok(String::from_utf8_lossy(&output).into_owned())
    }

    /// A PNG of `url` at `size` (width, height) after `budget` of virtual time, to `path`.
    pub fn screenshot(
        &self,
        url: &str,
        path: &Path,
        size: (u32, u32),
        budget: Duration,
    ) -> Result<(), PeerError> {
        let profile = profile()?;
        let mut command = self.command(&profile, budget, size);
        command
            .arg(format!("--screenshot={}", path.display()))
            .arg("--hide-scrollbars")
            .arg(url);
        run(command)?;
        if path.is_file() {
            Ok(())
        } else {
            Err(PeerError::UnexpectedOutput {
                peer: "chromium",
                line: format!("no screenshot at {}", path.display()),
                log: String::new(),
            })
        }
    }

    fn command(&self, profile: &TempDir, budget: Duration, (w, h): (u32, u32)) -> Command {
        let mut command = local_peers::command(
            &self.bin,
            [
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-default-apps",
                "--disable-extensions",
                "--mute-audio",
            ],
        );
        command
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--virtual-time-budget={}", budget.as_millis()))
            .arg(format!("--window-size={w},{h}"));
        command
    }
}

fn profile() -> Result<TempDir, PeerError> {
    tempfile::Builder::new()
        .prefix("chromium-profile-")
        .tempdir()
        .map_err(PeerError::io("creating a chromium profile directory"))
}

/// Runs the browser to its end (killed after [`RUN_TIMEOUT`]); its standard output.
fn run(mut command: Command) -> Result<Vec<u8>, PeerError> {
    let log = tempfile::NamedTempFile::new().map_err(PeerError::io("creating a log file"))?;
    let out = tempfile::NamedTempFile::new().map_err(PeerError::io("creating an output file"))?;
    command
        .stdin(Stdio::null())
        .stdout(
            out.reopen()
                .map_err(PeerError::io("opening the output file"))?,
        )
        .stderr(
            log.reopen()
                .map_err(PeerError::io("opening the log file"))?,
        );
    let mut child = local_peers::spawn(command).map_err(PeerError::io("starting chromium"))?;
    let status = local_peers::wait_for_exit(&mut child, RUN_TIMEOUT)
        .map_err(PeerError::io("waiting for chromium"))?;
    let status = match status {
        Some(status) => status,
        None => {
            let _ = local_peers::kill_and_reap(&mut child);
            return Err(PeerError::Timeout {
                peer: "chromium",
                what: "finish",
                secs: RUN_TIMEOUT.as_secs(),
                log: local_peers::read_log(log.path()),
            });
        }
    };
    if !status.success() {
        return Err(PeerError::ExitedEarly {
            peer: "chromium",
            status,
            log: local_peers::read_log(log.path()),
        });
    }
    std::fs::read(out.path()).map_err(PeerError::io("reading chromium's output"))
}
