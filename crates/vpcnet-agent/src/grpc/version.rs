//! The version handshake between plugin and agent: every answer carries the agent's version,
//! a plugin of another version and calls this agent does not know are logged once.

use std::collections::BTreeSet;

use tonic::{Request, Status};

use super::{KNOWN_CALLS, SERVICE_NAME};

/// Every answer, errors and unknown calls included, carries the agent's version, so a newer
/// plugin calling something this agent does not know can name both versions.
pub(super) fn with_agent_version<B>(mut r: http::Response<B>) -> http::Response<B> {
    r.headers_mut().insert(
        vpcnet_proto::AGENT_VERSION_HEADER,
        http::HeaderValue::from_static(vpcnet_proto::VERSION),
    );
    r
}

/// The version handshake: a plugin of another version (or one from before the handshake,
/// which sends none) is logged once per version; its calls are served all the same (the API
/// only grows, so calls of earlier versions keep working).
pub(super) fn check_plugin_version(req: Request<()>) -> Result<Request<()>, Status> {
    static SEEN: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
    let plugin = req
        .metadata()
        .get(vpcnet_proto::PLUGIN_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if plugin != vpcnet_proto::VERSION
        && SEEN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(plugin.clone())
    {
        let shown = if plugin.is_empty() {
            "unknown (older than the version handshake)"
        } else {
            plugin.as_str()
        };
        tracing::warn!(plugin = shown, agent = vpcnet_proto::VERSION, "vpcnet-cni plugin and agent versions differ; calls the agent knows are served, others fail with a CNI error naming both versions: install the plugin shipped with this agent");
    }
    Ok(req)
}
/// Logs a call this agent does not know, once per method and caller version (the caller
/// gets `Unimplemented` with the agent's version from the server).
pub(super) fn log_unknown_call<B>(req: http::Request<B>) -> http::Request<B> {
    static SEEN: std::sync::Mutex<BTreeSet<(String, String)>> =
        std::sync::Mutex::new(BTreeSet::new());
    let path = req.uri().path();
    let method = path
        .strip_prefix(&format!("/{}/", SERVICE_NAME))
        .unwrap_or(path);
    if !KNOWN_CALLS.contains(&method) {
        let plugin = req
            .headers()
            .get(vpcnet_proto::PLUGIN_VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown (older than the version handshake)")
            .to_string();
        if SEEN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((path.to_string(), plugin.clone()))
        {
            tracing::warn!(call = %path, plugin = %plugin, agent = vpcnet_proto::VERSION, "unknown gRPC call: answered Unimplemented; the plugin is newer than this agent (install the plugin shipped with this agent)");
        }
    }
    req
}
