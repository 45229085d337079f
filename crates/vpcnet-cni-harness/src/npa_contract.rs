//! `npa-contract` (lab/npa-contract, built by scripts/build-npa-contract.sh): the AWS node
//! agent's two gRPC edges from the VPC CNI's generated code. [`NodeAgent`] runs its `serve`
//! mode (`rpc.NPBackend` on a socket, each call recorded); [`get_network_policy_configs`] runs
//! its `config` mode (the node agent's start-up call to the IPAM daemon).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::build_cache;
use serde_json::Value;

/// Environment variable naming the directory of the binary (what the build script prints
/// last).
pub const BIN_DIR_ENV: &str = "VPCNET_NPA_CONTRACT_BIN_DIR";
/// The binary's name.
pub const BINARY: &str = "npa-contract";

/// The binary: `$VPCNET_NPA_CONTRACT_BIN_DIR/npa-contract`, else the newest complete build in
/// `$VPCNET_CACHE/npa-contract` (default cache `/var/cache/vpcnet`). Errors (a test fails,
/// never skips): nothing built, naming the script to run.
pub fn locate() -> Result<PathBuf> {
    let dir = std::env::var_os(BIN_DIR_ENV)
        .map(PathBuf::from)
        .or_else(|| build_cache::newest_complete(&build_cache::root("npa-contract")));
    let Some(dir) = dir else {
        bail!(
            "{BINARY} is not built: run scripts/build-npa-contract.sh (builds it from \
             lab/npa-contract/go.mod; scripts/test.sh does) or set {BIN_DIR_ENV}"
        );
    };
    let bin = dir.join(BINARY);
    if !bin.is_file() {
        bail!(
            "{} lacks {BINARY}: run scripts/build-npa-contract.sh and use the directory it prints",
            dir.display()
        );
    }
    Ok(bin)
}

/// A running stand-in of the node agent's `NPBackend`; killed on drop.
pub struct NodeAgent {
    pub socket: PathBuf,
    record: PathBuf,
    child: Child,
}

impl NodeAgent {
    /// Serves on `socket`, recording calls in `record`; `fail`: every answer Success=false.
    /// Returns once the socket accepts connections (at most 10 s).
    pub fn start(socket: &Path, record: &Path, fail: bool) -> Result<NodeAgent> {
        let bin = locate()?;
        let mut cmd = Command::new(&bin);
        cmd.arg("serve")
            .arg("-socket")
            .arg(socket)
            .arg("-record")
            .arg(record);
        if fail {
            cmd.arg("-fail");
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut me = NodeAgent {
            socket: socket.to_path_buf(),
            record: record.to_path_buf(),
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            if let Some(status) = me.child.try_wait()? {
                bail!("{BINARY} serve exited early: {status}");
            }
            if Instant::now() > deadline {
                bail!(
                    "{BINARY} serve did not listen on {} within 10 s",
                    socket.display()
                );
            }
            // A real process: wall time.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(me)
    }

    /// The calls received so far, one JSON object each, in order.
    pub fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("npa-contract writes JSON lines"))
            .collect()
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `GetNetworkPolicyConfigs` on the IPAM daemon's `socket`, as the node agent calls it at
/// start, with the VPC CNI's generated client: the reply as JSON (the VPC CNI's field names).
pub fn get_network_policy_configs(socket: &Path) -> Result<Value> {
    let bin = locate()?;
    let out = Command::new(&bin)
        .arg("config")
        .arg("-socket")
        .arg(socket)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{BINARY} config failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("npa-contract config prints one JSON object")
}
