//! The CNI verbs. Each returns what goes to stdout on success (`None` = nothing) or a
//! [`CniError`] (printed as error JSON by `main`).

mod add;
mod check;
mod del;
mod gc;
mod status;

use std::path::Path;

use serde_json::Value;
use vpcnet_datapath::names;

use crate::cni::args::{Command, Env};
use crate::cni::config::NetConf;
use crate::cni::error::{code, CniError};
use crate::cni::version;

/// One plugin invocation: verb, environment and configuration.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub cmd: Command,
    pub env: Env,
    pub conf: NetConf,
}

/// Runs a verb other than VERSION (which needs no configuration; see
/// [`crate::cni::version::version_info`]).
pub async fn run(inv: &Invocation) -> Result<Option<Value>, CniError> {
    match inv.cmd {
        Command::Add => add::add(inv).await.map(Some),
        Command::Del => del::del(inv).await.map(|()| None),
        Command::Check if inv.conf.cni_version.starts_with("0.3") => Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            format!(
                "CHECK needs cniVersion 0.4.0 or later, the configuration has {}",
                inv.conf.cni_version
            ),
            "set cniVersion to 0.4.0 or later to use CHECK",
        )),
        Command::Check => check::check(inv).await.map(|()| None),
        Command::Status | Command::Gc if !version::has_status_and_gc(&inv.conf.cni_version) => {
            Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!(
                    "{:?} needs cniVersion 1.1.0, the configuration has {}",
                    inv.cmd, inv.conf.cni_version
                ),
                "set cniVersion to 1.1.0 to use STATUS and GC",
            ))
        }
        Command::Status => status::status(inv).await.map(|()| None),
        Command::Gc => gc::gc(inv).await.map(|()| None),
        Command::Version => Ok(Some(version::version_info(&inv.conf.cni_version))),
    }
}

/// The host veth name of this pod: from K8S_POD_NAMESPACE/K8S_POD_NAME when both are set,
/// else from the container ID.
pub fn host_veth(inv: &Invocation) -> String {
    host_veth_of(inv, 0)
}

/// The host veth name of the pod's interface `n` (0: CNI_IFNAME; n > 0: a multi-homed pod's
/// further interface `mNicIf<n>`).
pub fn host_veth_of(inv: &Invocation, n: u32) -> String {
    let e = &inv.env;
    names::pod_host_veth_name(
        &inv.conf.veth_prefix,
        &e.pod_namespace,
        &e.pod_name,
        &e.container_id,
        n,
    )
}

/// A datapath error as a CNI error.
pub(crate) fn datapath_error(what: &str, e: vpcnet_datapath::Error) -> CniError {
    CniError::new(
        code::DATAPATH,
        format!("{what} failed"),
        format!("{e}; see the plugin log (pluginLogFile) and `ip link`, `ip rule`, `ip route` on the node"),
    )
}

pub(crate) fn netns_path(inv: &Invocation) -> &Path {
    Path::new(&inv.env.netns)
}
