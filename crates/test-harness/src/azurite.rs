//! Azurite, Microsoft's Azure Storage emulator (npm `azurite`, installed in `tools/node`),
//! with its Blob service alone on a free port of 127.0.0.1, its data in a temporary
//! directory, stopped when the handle drops.
//!
//! Azurite checks Shared Key signatures against its well-known development account
//! ([`Azurite::ACCOUNT`], [`Azurite::KEY`]), so a request it takes was signed as Azure
//! Storage signs. Started with [`Azurite::start_oauth`], it serves HTTPS and also takes
//! Entra ID bearer tokens, checked as its `--oauth basic` level does: the issuer
//! (`https://sts.windows.net/...`, a v1.0 token's), the audience (`https://storage.azure.com`
//! or the account's blob endpoint) and the token's times, not its signature.

use std::fs::File;
use std::process::{Child, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::cosmosdb::{node_bin, node_dir};
use local_peers::PeerError;
use local_peers::Readiness;

const PEER: &str = "azurite-blob";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Tries with a new port when another process took the free one first.
const PORT_ATTEMPTS: usize = 3;

/// A running Azurite Blob service. Dropping it kills the process and deletes its data.
#[derive(Debug)]
pub struct Azurite {
    child: Child,
    port: u16,
    https: bool,
    // Dropped after the child is reaped.
    dir: TempDir,
}

impl Azurite {
    /// The development account's name (Azurite's documented default).
    pub const ACCOUNT: &'static str = "devstoreaccount1";
    /// The development account's key (Azurite's documented default; public, local use only).
    pub const KEY: &'static str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    /// Starts the Blob service and waits until it accepts connections.
    pub fn start() -> Result<Azurite, PeerError> {
        Azurite::start_with(None)
    }

    /// Starts the Blob service over HTTPS with the server certificate `cert_pem` and its key
    /// `key_pem`, taking bearer tokens besides Shared Key.
    pub fn start_oauth(cert_pem: &str, key_pem: &str) -> Result<Azurite, PeerError> {
        Azurite::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Result<Azurite, PeerError> {
        let mut attempt = 1;
        loop {
            match Azurite::launch(tls) {
                Err(PeerError::ExitedEarly { log, .. })
                    if attempt < PORT_ATTEMPTS && log.contains("EADDRINUSE") =>
                {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    fn launch(tls: Option<(&str, &str)>) -> Result<Azurite, PeerError> {
        let node = node_bin()?;
        let main = node_dir().join("node_modules/azurite/dist/src/blob/main.js");
        let dir = tempfile::Builder::new()
            .prefix("azurite-")
            .tempdir()
            .map_err(PeerError::io("create a temporary directory for azurite"))?;
        let port = local_peers::free_port()?;
        let log = File::create(dir.path().join("azurite.log"))
            .map_err(PeerError::io("create the azurite log"))?;
        let log_err = log
            .try_clone()
            .map_err(PeerError::io("share the azurite log"))?;
        let data = dir.path().join("data");
        let port_text = port.to_string();
        let mut args: Vec<std::ffi::OsString> = vec![
            main.into(),
            "--blobHost".into(),
            "127.0.0.1".into(),
            "--blobPort".into(),
            port_text.into(),
            "--location".into(),
            data.into(),
            "--silent".into(),
            "--skipApiVersionCheck".into(),
            "--disableProductStyleUrl".into(),
        ];
        if let Some((cert_pem, key_pem)) = tls {
            let cert = dir.path().join("cert.pem");
            let key = dir.path().join("key.pem");
            std::fs::write(&cert, cert_pem)
                .map_err(PeerError::io("write azurite's certificate"))?;
            std::fs::write(&key, key_pem).map_err(PeerError::io("write azurite's key"))?;
            args.extend([
                "--cert".into(),
                cert.into(),
                "--key".into(),
                key.into(),
                "--oauth".into(),
                "basic".into(),
            ]);
        }
        let mut command = local_peers::command(&node, args);
        command
            .current_dir(node_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let child = local_peers::spawn(command)
            .map_err(PeerError::io(format!("spawn {}", node.display())))?;
        let mut azurite = Azurite {
            child,
            port,
            https: tls.is_some(),
            dir,
        };
        match local_peers::wait_until_accepting(&mut azurite.child, &[port], READY_TIMEOUT)
            .map_err(PeerError::io("wait for azurite"))?
        {
            Readiness::Ready => Ok(azurite),
            Readiness::Exited(status) => Err(PeerError::ExitedEarly {
                peer: PEER,
                status,
                log: azurite.log(),
            }),
            Readiness::TimedOut => Err(PeerError::Timeout {
                peer: PEER,
                what: "accept connections",
                secs: READY_TIMEOUT.as_secs(),
                log: azurite.log(),
            }),
        }
    }

    /// The Blob service of the development account, `http://127.0.0.1:PORT/devstoreaccount1`
    /// (`https://` when started with [`Azurite::start_oauth`]).
    pub fn blob_endpoint(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}/{}", self.port, Self::ACCOUNT)
    }

    /// The development account's connection string for this service, as Azure Storage
    /// clients take it.
    pub fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol={};AccountName={};AccountKey={};BlobEndpoint={};",
            if self.https { "https" } else { "http" },
            Self::ACCOUNT,
            Self::KEY,
            self.blob_endpoint()
        )
    }

    /// The service's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What Azurite wrote to its output so far.
    pub fn log(&self) -> String {
        local_peers::read_log(&self.dir.path().join("azurite.log"))
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = local_peers::kill_and_reap(&mut self.child);
    }
}
