//! The Kubernetes view: what the agent learns from and reports to the API server, all of it
//! in the background (IPAM never waits for it): the API client's state, the connected client
//! (for `ANNOTATE_POD_IP`), the node's ENIConfig under custom networking, and the pool's
//! prefix fallback that the Node report follows.

use tokio::sync::watch;
use vpcnet_ipam::PrefixFallback;

use crate::kubernetes::client::SharedStatus;
use crate::kubernetes::eniconfig_watch::EniConfigTracked;

/// The agent's view of Kubernetes (see the module doc).
pub struct KubeView {
    /// The Kubernetes API client's state (`/v1/apiserver`), written by its task.
    api: SharedStatus,
    /// The node's ENIConfig under custom networking (written by the ENIConfig watch, read by
    /// the reconciler and `/v1/eniconfig`); `None` without custom networking.
    eniconfig: Option<watch::Sender<EniConfigTracked>>,
    /// The connected Kubernetes client, once [`crate::start`] has spawned the API client
    /// (the pod annotation of `ANNOTATE_POD_IP` waits for it); its sender is dropped when no
    /// API server is configured.
    clients: std::sync::OnceLock<watch::Receiver<Option<kube::Client>>>,
    /// The pool's prefix fallback as of the last [`crate::state::Shared::update_gauges`]
    /// (the Node report follows it: [`crate::kubernetes::prefix_fallback_report`]).
    prefix_fallback: watch::Sender<Option<PrefixFallback>>,
}

impl KubeView {
    /// `custom_networking`: whether the node's ENIConfig is followed (starts unresolved at
    /// `now_ms`).
    pub(super) fn new(custom_networking: bool, now_ms: u64) -> Self {
        KubeView {
            api: Default::default(),
            eniconfig: custom_networking
                .then(|| watch::channel(EniConfigTracked::initial(now_ms)).0),
            clients: std::sync::OnceLock::new(),
            prefix_fallback: watch::channel(None).0,
        }
    }

    /// The API client's state, shared with its task.
    pub fn api_status(&self) -> &SharedStatus {
        &self.api
    }

    /// The API client's state now (`/v1/apiserver`).
    pub fn api_doc(&self) -> vpcnet_introspection::ApiServerDoc {
        self.api.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The node's ENIConfig channel under custom networking; `None` without.
    pub fn eniconfig(&self) -> Option<&watch::Sender<EniConfigTracked>> {
        self.eniconfig.as_ref()
    }

    /// Hands in the API client's connections (once, at start).
    pub fn set_clients(&self, clients: watch::Receiver<Option<kube::Client>>) {
        let _ = self.clients.set(clients);
    }

    /// The API client's connections, once [`Self::set_clients`] has run.
    pub fn clients(&self) -> Option<&watch::Receiver<Option<kube::Client>>> {
        self.clients.get()
    }

    /// Follows the pool's prefix fallback.
    pub fn prefix_fallback(&self) -> watch::Receiver<Option<PrefixFallback>> {
        self.prefix_fallback.subscribe()
    }

    /// Publishes the pool's prefix fallback; watchers are told only when it starts or ends.
    pub fn publish_prefix_fallback(&self, now: Option<PrefixFallback>) {
        self.prefix_fallback.send_if_modified(|f| {
            let changed = f.is_some() != now.is_some();
            *f = now;
            changed
        });
    }
}
