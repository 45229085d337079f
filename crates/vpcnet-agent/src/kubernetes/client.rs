//! Choosing the API endpoint, building the kube-rs client, and the background connection loop.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

use vpcnet_introspection::{ApiServerDoc, ApiState, NodeCapacity};

use super::capacity::CapacityCheck;
use crate::clock::now_ms;
use crate::metrics::Metrics;

/// Where a pod finds its service-account token, CA and namespace.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Deadline of one connection attempt or check.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Backoff between failed attempts: starts here, doubles, with equal jitter (half of each
/// ceiling always waited, the other half random) ...
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// ... up to this.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Interval of the connectivity check once connected.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(15);

/// The API client's inputs, from the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiSettings {
    /// `CLUSTER_ENDPOINT` (the VPC CNI's variable): the API server's URL.
    pub cluster_endpoint: Option<String>,
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` (set by kubelet in every pod).
    pub service_host: Option<String>,
    /// `KUBERNETES_SERVICE_PORT` (default 443).
    pub service_port: Option<String>,
    /// Directory with `token`, `ca.crt` (and `namespace`): [`SERVICE_ACCOUNT_DIR`].
    pub service_account_dir: PathBuf,
    /// `MY_NODE_NAME`: the agent's Node (downward API), for the capacity check.
    pub node_name: Option<String>,
}

/// Where the endpoint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointSource {
    /// `CLUSTER_ENDPOINT`.
    ClusterEndpoint,
    /// The in-cluster `kubernetes` Service.
    Service,
}

impl EndpointSource {
    /// How logs and introspection name it.
    pub fn name(self) -> &'static str {
        match self {
            EndpointSource::ClusterEndpoint => "CLUSTER_ENDPOINT",
            EndpointSource::Service => "kubernetes Service",
        }
    }
}

/// The chosen API server URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https://host:port`.
    pub url: String,
    /// Where it came from.
    pub source: EndpointSource,
}

/// `CLUSTER_ENDPOINT` if set (must be an `https://` URL with a host), else
/// `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, else `None` (no API server
/// configured). Errors name the variable, the value and the fix.
pub fn endpoint(s: &ApiSettings) -> Result<Option<Endpoint>> {
    if let Some(raw) = s
        .cluster_endpoint
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        let uri: http::Uri = raw.parse().with_context(|| {
            format!(
                "CLUSTER_ENDPOINT={raw:?} is not a URL: use the API server's https://host[:port]"
            )
        })?;
        if uri.scheme_str() != Some("https") || uri.host().is_none() {
            bail!(
                "CLUSTER_ENDPOINT={raw:?} must be an https:// URL with a host (the cluster's API server endpoint, e.g. from `aws eks describe-cluster --query cluster.endpoint`)"
            );
        }
        return Ok(Some(Endpoint {
            url: raw.trim_end_matches('/').to_string(),
            source: EndpointSource::ClusterEndpoint,
        }));
    }
    let Some(host) = s.service_host.as_deref().filter(|h| !h.is_empty()) else {
        return Ok(None);
    };
    let port = s.service_port.as_deref().unwrap_or("443");
    let port: u16 = port
        .parse()
        .with_context(|| format!("KUBERNETES_SERVICE_PORT={port:?} is not a port number"))?;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    Ok(Some(Endpoint {
        url: format!("https://{host}:{port}"),
        source: EndpointSource::Service,
    }))
}

/// The kube-rs configuration for `ep` with the service account in `sa_dir`: its CA as the only
/// trust root, its token (re-read by kube-rs as it is rotated), its namespace. `read_timeout`
/// bounds the wait for each read of an answer: set for one-shot calls, `None` for watches (a
/// quiet watch sends nothing for minutes; the server ends it at its own timeout and kube-rs's
/// watcher has an idle deadline beyond that).
fn kube_config(
    ep: &Endpoint,
    sa_dir: &Path,
    read_timeout: Option<Duration>,
) -> Result<kube::Config> {
    let ca_path = sa_dir.join("ca.crt");
    let pem = std::fs::read(&ca_path).with_context(|| {
        format!(
            "reading the cluster CA {} (the pod's service-account volume)",
            ca_path.display()
        )
    })?;
    let certs = rustls_pemfile_certs(&pem)
        .with_context(|| format!("no PEM certificate in {}", ca_path.display()))?;
    let mut c = kube::Config::new(ep.url.parse().context("API server URL")?);
    c.root_cert = Some(certs);
    c.auth_info.token_file = Some(sa_dir.join("token").display().to_string());
    c.connect_timeout = Some(CALL_TIMEOUT);
    c.read_timeout = read_timeout;
    if let Ok(ns) = std::fs::read_to_string(sa_dir.join("namespace")) {
        c.default_namespace = ns.trim().to_string();
    }
    Ok(c)
}

/// DER certificates of every `CERTIFICATE` block in `pem`.
fn rustls_pemfile_certs(pem: &[u8]) -> Result<Vec<Vec<u8>>> {
    use rustls_pki_types::pem::PemObject;
    let certs: Vec<Vec<u8>> = rustls_pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<std::result::Result<_, _>>()
        .context("parsing PEM")?;
    if certs.is_empty() {
        bail!("no certificate");
    }
    Ok(certs)
}

/// The shared status, updated by [`run`], read by introspection.
pub type SharedStatus = Arc<RwLock<ApiServerDoc>>;

fn update(status: &SharedStatus, f: impl FnOnce(&mut ApiServerDoc)) {
    let mut g = status.write().unwrap_or_else(|e| e.into_inner());
    f(&mut g);
}

/// What [`run`] needs to check the Node's capacity: the instance type and a function giving
/// the check for a capacity (the agent's mode: prefix delegation, `MAX_ENI`, custom
/// networking).
pub struct CapacityInput {
    /// EC2 instance type, for the message.
    pub instance_type: String,
    /// The check for a `capacity.pods` value.
    pub check: Box<dyn Fn(u32) -> Option<CapacityCheck> + Send + Sync>,
}

/// Where the connection loop gets its clients.
pub enum Source {
    /// The API server at `endpoint`, reached with the service account in `service_account_dir`
    /// (production).
    Endpoint {
        endpoint: Endpoint,
        service_account_dir: PathBuf,
    },
    /// A client handed to the agent ([`crate::AgentDeps::kube`]), used as it is for one-shot
    /// calls and watches.
    Given(Client),
}

impl Source {
    /// The API server `settings` name ([`endpoint`]): `Ok(None)` when none is configured, an
    /// error naming the variable when the configuration is unusable.
    pub fn from_settings(settings: &ApiSettings) -> Result<Option<Source>> {
        Ok(endpoint(settings)?.map(|endpoint| Source::Endpoint {
            endpoint,
            service_account_dir: settings.service_account_dir.clone(),
        }))
    }

    /// The URL shown in logs and introspection.
    fn url(&self) -> String {
        match self {
            Source::Endpoint { endpoint, .. } => endpoint.url.clone(),
            Source::Given(_) => "(the client handed to the agent)".into(),
        }
    }

    /// Where the endpoint came from, as introspection names it.
    fn name(&self) -> &'static str {
        match self {
            Source::Endpoint { endpoint, .. } => endpoint.source.name(),
            Source::Given(_) => "given client",
        }
    }

    /// A connection: the client for one-shot calls, the client the watchers share, and the
    /// API server's version (the call that proves the connection).
    async fn connect(&self) -> Result<(Client, Client, String)> {
        match self {
            Source::Endpoint {
                endpoint,
                service_account_dir,
            } => {
                let (client, version) = connect(endpoint, service_account_dir).await?;
                let watch = watch_client(endpoint, service_account_dir)?;
                Ok((client, watch, version))
            }
            Source::Given(client) => {
                let version = server_version(client, &self.url()).await?;
                Ok((client.clone(), client.clone(), version))
            }
        }
    }
}

/// The connection loop; returns only when no API server is configured or its configuration
/// is unusable (`source` is `Ok(None)` or an error; both shown in `status`), else runs while
/// the agent runs (it is spawned). `node_name` is the agent's Node, for the capacity check;
/// `started` is the agent's start, for [`ApiServerDoc::first_connected_after_ms`]. Each
/// connection's watch client is sent on `clients` (for the watches); dropping it there tells
/// its receivers that no API server will be reached.
pub async fn run(
    source: Result<Option<Source>>,
    node_name: Option<String>,
    status: SharedStatus,
    metrics: Arc<Metrics>,
    started: tokio::time::Instant,
    capacity: CapacityInput,
    clients: tokio::sync::watch::Sender<Option<Client>>,
) {
    let source = match source {
        Ok(Some(source)) => source,
        Ok(None) => {
            tracing::info!(
                "Kubernetes API: none configured (no CLUSTER_ENDPOINT, no KUBERNETES_SERVICE_HOST): running without it; IPAM does not need it"
            );
            update(&status, |s| s.state = ApiState::Disabled);
            return;
        }
        Err(e) => {
            tracing::error!("Kubernetes API: {e:#}; IPAM keeps serving without the API");
            update(&status, |s| {
                s.state = ApiState::Misconfigured;
                s.last_error = Some(format!("{e:#}"));
                s.last_error_ms = Some(now_ms());
            });
            return;
        }
    };
    let url = source.url();
    match &source {
        Source::Endpoint { endpoint: ep, .. } if ep.source == EndpointSource::ClusterEndpoint => {
            tracing::info!(
                endpoint = %url,
                "Kubernetes API: connecting to {url} (CLUSTER_ENDPOINT: the API server directly, no kube-proxy needed)"
            )
        }
        Source::Endpoint { .. } => tracing::info!(
            endpoint = %url,
            "Kubernetes API: connecting to {url} (the kubernetes Service: reachable once kube-proxy has programmed it; set CLUSTER_ENDPOINT to reach the API server directly)"
        ),
        Source::Given(_) => {
            tracing::info!("Kubernetes API: connecting through the client handed to the agent")
        }
    }
    update(&status, |s| {
        s.state = ApiState::Connecting;
        s.endpoint = Some(url.clone());
        s.source = Some(source.name().to_string());
    });
    let mut backoff = vpcnet_backoff::Backoff::new(BACKOFF_MIN, BACKOFF_MAX).start();
    loop {
        update(&status, |s| s.attempts += 1);
        metrics.inc_apiserver_connect_attempts();
        match source.connect().await {
            Ok((client, watch, version)) => {
                backoff.reset();
                let after = started.elapsed().as_millis() as u64;
                tracing::info!(
                    endpoint = %url,
                    version = %version,
                    "Kubernetes API: connected to {url} ({version}) {after} ms after start"
                );
                update(&status, |s| {
                    s.state = ApiState::Connected;
                    s.connected_since_ms = Some(now_ms());
                    s.first_connected_after_ms.get_or_insert(after);
                    s.server_version = Some(version);
                });
                metrics.set_apiserver_connected(1);
                clients.send_replace(Some(watch));
                let e =
                    connected(&client, node_name.as_deref(), &status, &metrics, &capacity).await;
                tracing::warn!(endpoint = %url, "Kubernetes API: lost: {e:#}; reconnecting");
                metrics.set_apiserver_connected(0);
                update(&status, |s| {
                    s.state = ApiState::Connecting;
                    s.connected_since_ms = None;
                    s.last_error = Some(format!("{e:#}"));
                    s.last_error_ms = Some(now_ms());
                });
            }
            Err(e) => {
                let attempts = status.read().map(|s| s.attempts).unwrap_or(0);
                // The first failures are expected while kube-proxy starts: log them quietly.
                if attempts <= 3 {
                    tracing::info!(endpoint = %url, "Kubernetes API: not reachable yet: {e:#}");
                } else {
                    tracing::warn!(endpoint = %url, attempts, "Kubernetes API: not reachable: {e:#}");
                }
                update(&status, |s| {
                    s.last_error = Some(format!("{e:#}"));
                    s.last_error_ms = Some(now_ms());
                });
            }
        }
        // Unbounded: the client runs while the agent runs.
        if let Some(d) = backoff.next_delay() {
            tokio::time::sleep(d).await;
        }
    }
}

/// kube-rs's TLS (rustls) needs a process-wide crypto provider, and rustls cannot choose one
/// itself when two are compiled in (the AWS SDK brings aws-lc-rs, kube-rs ring): installs
/// ring's, once (a no-op when one is installed already).
fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The client for one-shot calls (reads time out after [`CALL_TIMEOUT`] × 2) and the API
/// server's version.
async fn connect(ep: &Endpoint, sa_dir: &Path) -> Result<(Client, String)> {
    ensure_crypto_provider();
    let client = Client::try_from(kube_config(ep, sa_dir, Some(CALL_TIMEOUT * 2))?)
        .context("building the client")?;
    let version = server_version(&client, &ep.url).await?;
    Ok((client, version))
}

/// `GET /version` of the API server at `url` through `client`, within [`CALL_TIMEOUT`].
async fn server_version(client: &Client, url: &str) -> Result<String> {
    let v = tokio::time::timeout(CALL_TIMEOUT, client.apiserver_version())
        .await
        .map_err(|_| anyhow::anyhow!("no answer from {url} within {CALL_TIMEOUT:?}"))?
        .with_context(|| format!("GET {url}/version"))?;
    Ok(v.git_version)
}

/// The client the watchers share: no read timeout (see [`kube_config`]); what else they call
/// through it is bounded by their own deadlines.
pub fn watch_client(ep: &Endpoint, sa_dir: &Path) -> Result<Client> {
    ensure_crypto_provider();
    Client::try_from(kube_config(ep, sa_dir, None)?).context("building the watch client")
}

/// While connected: the Node's capacity check (until the Node exists, and again when its
/// capacity changes), and a connectivity check every [`CHECK_INTERVAL`]. Returns the error that
/// ended the connection.
async fn connected(
    client: &Client,
    node_name: Option<&str>,
    status: &SharedStatus,
    metrics: &Metrics,
    capacity: &CapacityInput,
) -> anyhow::Error {
    let mut warned_for: Option<u32> = None;
    loop {
        if let Some(name) = node_name {
            match tokio::time::timeout(CALL_TIMEOUT, Api::<Node>::all(client.clone()).get_opt(name))
                .await
            {
                Ok(Ok(Some(node))) => {
                    if let Err(e) =
                        check_node(client, &node, status, metrics, capacity, &mut warned_for).await
                    {
                        tracing::warn!(node = %name, "capacity check: {e:#}");
                    }
                }
                Ok(Ok(None)) => tracing::debug!(node = %name, "Node not registered yet"),
                Ok(Err(e)) => return anyhow::Error::new(e).context(format!("GET node {name}")),
                Err(_) => {
                    return anyhow::anyhow!("GET node {name}: no answer within {CALL_TIMEOUT:?}")
                }
            }
        }
        tokio::time::sleep(CHECK_INTERVAL).await;
        match tokio::time::timeout(CALL_TIMEOUT, client.apiserver_version()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return anyhow::Error::new(e).context("GET /version"),
            Err(_) => return anyhow::anyhow!("GET /version: no answer within {CALL_TIMEOUT:?}"),
        }
    }
}

async fn check_node(
    client: &Client,
    node: &Node,
    status: &SharedStatus,
    metrics: &Metrics,
    capacity: &CapacityInput,
    warned_for: &mut Option<u32>,
) -> Result<()> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let Some(pods) = node
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("pods"))
        .and_then(|q| q.0.parse::<u32>().ok())
    else {
        return Ok(());
    };
    let Some(check) = (capacity.check)(pods) else {
        return Ok(());
    };
    update(status, |s| {
        s.node = Some(NodeCapacity {
            name: name.clone(),
            capacity_pods: check.capacity_pods,
            supported_pods: check.supported_pods,
            exceeded: check.exceeded(),
        })
    });
    metrics.set_max_pods_exceeds_pod_ips(u64::from(check.exceeded()));
    if !check.exceeded() || *warned_for == Some(pods) {
        return Ok(());
    }
    let msg = check.message(&capacity.instance_type);
    tracing::warn!(node = %name, "{msg}");
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "vpcnet-agent".into(),
            instance: Some(name.clone()),
        },
    );
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.clone()),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    };
    recorder
        .publish(
            &Event {
                type_: EventType::Warning,
                reason: "MaxPodsExceedsPodIPs".into(),
                note: Some(msg),
                action: "CheckCapacity".into(),
                secondary: None,
            },
            &reference,
        )
        .await
        .context("sending the Warning Event")?;
    *warned_for = Some(pods);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ce: Option<&str>, host: Option<&str>, port: Option<&str>) -> ApiSettings {
        ApiSettings {
            cluster_endpoint: ce.map(Into::into),
            service_host: host.map(Into::into),
            service_port: port.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn cluster_endpoint_wins_over_the_service() {
        let e = endpoint(&s(
            Some("https://10.0.0.10:6443/"),
            Some("10.100.0.1"),
            Some("443"),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(e.url, "https://10.0.0.10:6443");
        assert_eq!(e.source, EndpointSource::ClusterEndpoint);
    }

    #[test]
    fn the_service_address_otherwise() {
        let e = endpoint(&s(None, Some("10.100.0.1"), Some("443")))
            .unwrap()
            .unwrap();
        assert_eq!(e.url, "https://10.100.0.1:443");
        assert_eq!(e.source, EndpointSource::Service);
        let e = endpoint(&s(Some(""), Some("fd00::1"), None))
            .unwrap()
            .unwrap();
        assert_eq!(e.url, "https://[fd00::1]:443");
        assert_eq!(endpoint(&s(None, None, None)).unwrap(), None);
    }

    #[test]
    fn bad_endpoints_are_named() {
        for bad in ["http://10.0.0.10:6443", "not a url", "https://"] {
            let e = endpoint(&s(Some(bad), None, None)).unwrap_err().to_string();
            assert!(e.contains("CLUSTER_ENDPOINT"), "{bad}: {e}");
        }
        let e = endpoint(&s(None, Some("10.100.0.1"), Some("https")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("KUBERNETES_SERVICE_PORT"), "{e}");
    }

    #[test]
    fn ca_files_must_hold_a_certificate() {
        assert!(rustls_pemfile_certs(b"garbage").is_err());
    }
}
