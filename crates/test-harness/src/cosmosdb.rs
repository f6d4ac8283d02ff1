//! `@vercel/cosmosdb-server`, an independent Cosmos DB implementation from the npm
//! registry, on a free port of 127.0.0.1; and the node installation in `tools/node`
//! that other tests use to run node scripts (e.g. with the official `@azure/cosmos` SDK,
//! through [`run_sdk_script`]).
//!
//! The server is started by `tools/node/cosmosdb-server.mjs`, which listens on a port
//! the OS picks, reports it on stdout and exits when its stdin closes: the handle holds
//! the write end, so the server ends with the handle, and with the test process even
//! when that is killed.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tempfile::TempDir;

use local_peers::PeerError;
use local_peers::Program;

const NODE: Program = Program {
    name: "node",
    env_var: "NODE_BIN",
    extra_dirs: &["/usr/bin", "/usr/local/bin"],
    install: "apt-get install nodejs npm",
};

const PEER: &str = "cosmosdb-server";
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an SDK script may run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The `tools/node` directory: `package.json`, the lockfile, the launcher scripts and,
/// once installed with `npm ci --prefix tools/node`, `node_modules`.
pub fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/node")
}

/// The `node` program: `$NODE_BIN`, else `node` on `PATH`.
///
/// Also checks that the packages in `tools/node` are installed, so that a script run
/// with it from [`node_dir`] finds `@vercel/cosmosdb-server`, `@azure/cosmos`, `@azure/identity`
/// and `azurite`.
pub fn node_bin() -> Result<PathBuf, PeerError> {
    let node = NODE.find()?;
    for package in [
        "@vercel/cosmosdb-server",
        "@azure/cosmos",
        "@azure/identity",
        "azurite",
        "puppeteer-core",
    ] {
        let dir = node_dir().join("node_modules").join(package);
        if !dir.join("package.json").is_file() {
            return Err(PeerError::NodePackagesMissing { missing: dir });
        }
    }
    Ok(node)
}

/// Runs the node script `script` against the Cosmos DB account at `endpoint`, signing
/// with `key`: its arguments are the endpoint, the key and [`node_dir`] (where it finds
/// the packages), then `args`; `envs` are set and [`node_dir`] is its working directory.
/// Returns the JSON of its last line of output.
///
/// Panics (failing the test) when node or the packages are missing, the script fails or
/// runs longer than two minutes, or its last line is not JSON; the panic holds its stderr.
pub async fn run_sdk_script(
    script: &Path,
    endpoint: &str,
    key: &str,
    args: &[&str],
    envs: &[(&str, &Path)],
) -> serde_json::Value {
    let node = node_bin().expect("node and tools/node packages (npm ci --prefix tools/node)");
    let child = tokio::process::Command::new(node)
        .arg(script)
        .arg(endpoint)
        .arg(key)
        .arg(node_dir())
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(node_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .expect("the SDK script finishes")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "SDK script failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"))
}

/// A running `@vercel/cosmosdb-server`. Dropping it stops the server.
///
/// The server starts empty, ignores request signatures and answers with
/// `Connection: keep-alive`.
#[derive(Debug)]
pub struct CosmosDbServer {
    child: Child,
    /// Closing it tells the launcher to exit.
    stdin: Option<ChildStdin>,
    port: u16,
    https: bool,
    // Holds the server's stderr; dropped after the child is reaped.
    dir: TempDir,
}

impl CosmosDbServer {
    /// Starts the server over plain HTTP and waits until it listens.
    pub fn start() -> Result<Self, PeerError> {
        Self::launch(false)
    }

    /// Starts the server over HTTPS with the package's bundled self-signed certificate
    /// (clients must accept invalid certificates) and waits until it listens.
    pub fn start_https() -> Result<Self, PeerError> {
        Self::launch(true)
    }

    fn launch(https: bool) -> Result<Self, PeerError> {
        let node = node_bin()?;
        let dir = tempfile::Builder::new()
            .prefix("cosmosdb-server-")
            .tempdir()
            .map_err(PeerError::io(
                "create a temporary directory for cosmosdb-server",
            ))?;
        let stderr_path = dir.path().join("stderr.log");
        let stderr =
            File::create(&stderr_path).map_err(PeerError::io("create the cosmosdb-server log"))?;
        let mut args = vec!["cosmosdb-server.mjs"];
        if https {
            args.push("--https");
        }
        let mut command = local_peers::command(&node, args);
        command
            .current_dir(node_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        let mut child = local_peers::spawn(command)
            .map_err(PeerError::io(format!("spawn {}", node.display())))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");

        // Reads the first line, then drains stdout so the server never blocks on it.
        let (line_tx, line_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let first = reader.read_line(&mut line).map(|_| line);
            let _ = line_tx.send(first);
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });

        let mut server = CosmosDbServer {
            child,
            stdin,
            port: 0,
            https,
            dir,
        };
        let line = match line_rx.recv_timeout(READY_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(err)) => return Err(PeerError::io("read cosmosdb-server's stdout")(err)),
            Err(_) => {
                return Err(PeerError::Timeout {
                    peer: PEER,
                    what: "report its port",
                    secs: READY_TIMEOUT.as_secs(),
                    log: server.log(),
                });
            }
        };
        if line.is_empty() {
            // End of stdout: the launcher exited.
            let status = server
                .child
                .wait()
                .map_err(PeerError::io("wait for cosmosdb-server"))?;
            return Err(PeerError::ExitedEarly {
                peer: PEER,
                status,
                log: server.log(),
            });
        }
        server.port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|port| port.parse().ok())
            .ok_or_else(|| PeerError::UnexpectedOutput {
                peer: PEER,
                line: line.clone(),
                log: server.log(),
            })?;
        Ok(server)
    }

    /// `http://127.0.0.1:PORT`, or `https://…` for [`CosmosDbServer::start_https`].
    pub fn endpoint(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server wrote to stderr so far (it logs failed requests there).
    pub fn log(&self) -> String {
        local_peers::read_log(&self.dir.path().join("stderr.log"))
    }
}

impl Drop for CosmosDbServer {
    fn drop(&mut self) {
        // Closing stdin alone would end the launcher; killing it does not wait for that.
        drop(self.stdin.take());
        let _ = local_peers::kill_and_reap(&mut self.child);
    }
}
