//! vpcnet-cni: the CNI plugin the container runtime executes per pod.
//!
//! The library holds everything but `main`: the CNI protocol types ([`cni`]), the agent client
//! ([`agent_client`]) and the verbs ([`verbs`]); [`run_plugin`] is the whole plugin. The
//! conflist model (what the agent writes to `/etc/cni/net.d/10-vpcnet.conflist` and
//! [`cni::config`] reads back) is the `vpcnet-cni-config` crate, re-exported as [`conflist`].

pub mod agent_client;
pub mod cni;
pub use vpcnet_cni_config as conflist;
pub mod log;
pub mod node_agent;
pub mod verbs;

use cni::args;
use cni::config;
use cni::error::CniError;

/// Runs one plugin invocation: reads the environment through `get` and the configuration from
/// `stdin`, and returns `(stdout, exit status)` (0 on success, 1 with error JSON otherwise).
pub fn run_plugin(get: &dyn Fn(&str) -> Option<String>, stdin: &[u8]) -> (String, i32) {
    let version = config::sniff_version(stdin);
    match run_inner(get, stdin) {
        Ok(Some(v)) => (v.to_string(), 0),
        Ok(None) => (String::new(), 0),
        Err(e) => {
            tracing::error!(code = e.code, msg = %e.msg, details = %e.details, "CNI error");
            (e.to_json(&version), 1)
        }
    }
}

fn run_inner(
    get: &dyn Fn(&str) -> Option<String>,
    stdin: &[u8],
) -> Result<Option<serde_json::Value>, CniError> {
    let cmd = args::command(get)?;
    if cmd == args::Command::Version {
        return Ok(Some(cni::version::version_info(&config::sniff_version(
            stdin,
        ))));
    }
    let conf = config::parse(stdin)?;
    log::init(&conf.plugin_log_file, &conf.plugin_log_level);
    let env = args::env(cmd, get)?;
    tracing::debug!(?cmd, container = %env.container_id, netns = %env.netns, "invoked");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            CniError::new(
                cni::error::code::IO_FAILURE,
                "cannot start the async runtime",
                e.to_string(),
            )
        })?;
    let inv = verbs::Invocation { cmd, env, conf };
    rt.block_on(verbs::run(&inv))
}
