//! Process plumbing shared by the peers: finding programs, spawning children that die
//! with this process, free ports, signals and bounded waits.

use std::ffi::OsStr;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::PeerError;

/// The interval at which a wait re-checks a condition it waits for.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How a missing program is looked for and installed.
pub struct Program {
    /// File name, looked up in `PATH`.
    pub name: &'static str,
    /// Environment variable holding an explicit path; wins over everything else.
    pub env_var: &'static str,
    /// Directories searched after `PATH`.
    pub extra_dirs: &'static [&'static str],
    /// The command that installs it, quoted in the error.
    pub install: &'static str,
}

impl Program {
    /// Finds the program: `$env_var`, then `PATH`, then `extra_dirs`.
    pub fn find(&self) -> Result<PathBuf, PeerError> {
        let not_found = |searched: String| PeerError::ProgramNotFound {
            program: self.name,
            env_var: self.env_var,
            searched,
            install: self.install,
        };
        if let Some(path) = std::env::var_os(self.env_var).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            return if is_executable(&path) {
                Ok(path)
            } else {
                Err(not_found(format!("${}={}", self.env_var, path.display())))
            };
        }
        let path_dirs = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path_dirs)
            .chain(self.extra_dirs.iter().map(PathBuf::from))
            .map(|dir| dir.join(self.name))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| not_found(format!("PATH, {}", self.extra_dirs.join(", "))))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A request to the spawner thread: the command, and where to send the child.
type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `command` so that the child is killed when this process dies, even by
/// SIGKILL, where no `Drop` runs.
///
/// Linux delivers `PR_SET_PDEATHSIG` when the *thread* that forked the child exits, not
/// the process. Threads (a test's, a runtime's) come and go (and a handle may be kept in a static shared
/// by several tests), so every child is forked from one spawner thread that lives as
/// long as the process.
pub fn spawn(mut command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    // SAFETY: the closure runs between fork and exec and only calls prctl(2), which is
    // async-signal-safe; it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("local-peers-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    // The requester may have gone away; then the child is dropped
                    // unreaped, like any leaked handle.
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the local-peers spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}

/// Asks the OS for a free TCP port on 127.0.0.1.
///
/// The port is free when this returns, but the listener is closed before the peer binds
/// it, so another process may take it in between. Callers that start a peer on it retry
/// with a new port when the bind fails.
pub fn free_port() -> Result<u16, PeerError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(PeerError::io("bind 127.0.0.1:0 to find a free port"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(PeerError::io("read the address of a free port"))
}

/// Sends `signal` to the process `pid`.
pub fn signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill(2) takes plain integers and has no memory effects.
    if unsafe { libc::kill(pid, signal) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `child` exits, at most `timeout`. `Ok(None)` means it is still running.
pub fn wait_for_exit(child: &mut Child, timeout: Duration) -> io::Result<Option<ExitStatus>> {
    let mut result = Ok(None);
    wait_until(timeout, || {
        result = child.try_wait();
        !matches!(result, Ok(None))
    });
    result
}

/// Polls `condition` until it holds (true) or `timeout` passes (false).
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// What became of a child waited on to accept connections.
pub enum Readiness {
    /// Every port accepts TCP connections.
    Ready,
    /// The child exited first.
    Exited(ExitStatus),
    /// The time ran out.
    TimedOut,
}

/// Waits until every port on 127.0.0.1 accepts a TCP connection, the child exits, or
/// `timeout` passes. A connection attempt is the readiness probe.
pub fn wait_until_accepting(
    child: &mut Child,
    ports: &[u16],
    timeout: Duration,
) -> io::Result<Readiness> {
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<u16> = ports.to_vec();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Readiness::Exited(status));
        }
        pending.retain(|&port| {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err()
        });
        if pending.is_empty() {
            return Ok(Readiness::Ready);
        }
        if Instant::now() >= deadline {
            return Ok(Readiness::TimedOut);
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Kills `child` with SIGKILL and reaps it; a child that already exited is just reaped.
pub fn kill_and_reap(child: &mut Child) -> io::Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    child.kill()?;
    child.wait()
}

/// Reads a log file for an error message; a missing or unreadable file reads as a note.
pub fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|err| format!("<cannot read {}: {err}>", path.display()))
}

/// A `Command` for `program` with `args`, stdin/stdout/stderr detached.
pub fn command<I, S>(program: &Path, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_program_says_how_to_install_it() {
        let program = Program {
            name: "no-such-program-for-local-peers",
            env_var: "LOCAL_PEERS_NO_SUCH_VARIABLE",
            extra_dirs: &["/nonexistent"],
            install: "apt-get install no-such-package",
        };
        let error = program.find().unwrap_err();
        // `unwrap()` in a test prints `Debug`: it must be the readable message.
        assert_eq!(format!("{error:?}"), error.to_string());
        let message = error.to_string();
        assert!(
            message.contains("no-such-program-for-local-peers not found"),
            "{message}"
        );
        assert!(
            message.contains("`apt-get install no-such-package`"),
            "{message}"
        );
    }
}
