//! EKS's default add-ons in the lab ([`Lab::addons`]): kube-proxy as a DaemonSet
//! ([`kube_proxy`]) and CoreDNS as a Deployment behind the `kube-dns` Service ([`coredns`]),
//! from images the lab builds itself ([`images`]: the pinned kube-proxy with Debian's iptables,
//! CoreDNS built from its Go module) and imports into every node's containerd, so pods are
//! started by kubelet from them as on EKS.
//!
//! `lab up` uses them as [`crate::lab::UpOptions`] asks: kube-proxy as a lab process per node
//! ([`KubeProxyMode::Process`], the default) or as the DaemonSet ([`KubeProxyMode::DaemonSet`]),
//! held back when `kube_proxy` is false (created later with [`Addons::start_kube_proxy`]); and
//! CoreDNS when `coredns` is set.

pub mod coredns;
pub mod images;
pub mod kube_proxy;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::containerd;
use crate::kube::workload::{parse_pods, PodInfo};
use crate::lab::{progress, Lab};
use crate::state::NodeRecord;

/// How kube-proxy runs on the lab's nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KubeProxyMode {
    /// A lab process in each node's namespaces, configured from the node's files, with a client
    /// certificate (`system:kube-proxy`). The lab's default.
    #[default]
    Process,
    /// EKS's add-on: the `kube-proxy` DaemonSet, its pods started by kubelet from the lab's
    /// image, authenticated by their service-account token.
    DaemonSet,
}

impl std::str::FromStr for KubeProxyMode {
    type Err = anyhow::Error;
    /// `process` or `daemonset`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "process" => Ok(KubeProxyMode::Process),
            "daemonset" => Ok(KubeProxyMode::DaemonSet),
            _ => bail!("unknown kube-proxy mode {s:?}: use process or daemonset"),
        }
    }
}

/// File name of the kube-proxy image archive in the lab directory.
const KUBE_PROXY_ARCHIVE: &str = "kube-proxy.oci.tar";
/// File name of the CoreDNS image archive in the lab directory.
const COREDNS_ARCHIVE: &str = "coredns.oci.tar";

/// The lab's add-ons ([`Lab::addons`]).
#[derive(Debug, Clone, Copy)]
pub struct Addons<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// EKS's default add-ons: kube-proxy's DaemonSet and CoreDNS.
    pub fn addons(&self) -> Addons<'_> {
        Addons { lab: self }
    }
}

/// Manifest text of `objects` for `kubectl apply` (JSON documents).
fn manifest(objects: &[Value]) -> String {
    objects
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n")
}

impl Addons<'_> {
    fn archives(&self) -> [PathBuf; 2] {
        [
            self.lab.dir.join(KUBE_PROXY_ARCHIVE),
            self.lab.dir.join(COREDNS_ARCHIVE),
        ]
    }

    /// Builds the add-on images into the lab directory: kube-proxy's (from `k8s_bins`) when
    /// `kube_proxy`, CoreDNS's (from `coredns_bins`) when given. Returns what was written.
    pub fn build_images(
        &self,
        k8s_bins: &Path,
        kube_proxy: bool,
        coredns_bins: Option<&Path>,
    ) -> Result<Vec<images::Archive>> {
        let src = images::Sources {
            kube_proxy: k8s_bins.join("kube-proxy"),
            coredns: coredns_bins.map(|d| d.join("coredns")).unwrap_or_default(),
            host_root: "/".into(),
            arch: crate::image::oci_arch().into(),
        };
        let [kp, cd] = self.archives();
        let mut done = Vec::new();
        if kube_proxy {
            progress("building the kube-proxy add-on image (kube-proxy, iptables-nft and its extensions)");
            done.push(images::write(&images::kube_proxy(&src)?, &kp)?);
        }
        if coredns_bins.is_some() {
            progress("building the CoreDNS add-on image");
            done.push(images::write(&images::coredns(&src)?, &cd)?);
        }
        Ok(done)
    }

    /// Imports every add-on image the lab built into `node`'s containerd (CRI namespace), as
    /// the lab's busybox and pause images are.
    pub(crate) fn import_images(&self, node: &NodeRecord) -> Result<()> {
        for a in self.archives() {
            if a.is_file() {
                containerd::import(node, containerd::CRI_NAMESPACE, &a)?;
            }
        }
        Ok(())
    }

    /// Applies what kube-proxy's DaemonSet needs, without the DaemonSet: its ServiceAccount and
    /// binding, and its two ConfigMaps (kubeconfig pointed at the API server's own address).
    pub fn prepare_kube_proxy(&self) -> Result<()> {
        let cp = self.lab.kube().control_plane()?;
        cp.kubectl()
            .apply(&manifest(&kube_proxy::config_objects(&cp.endpoint())))
            .context("applying kube-proxy's ServiceAccount, binding and ConfigMaps")
    }

    /// Creates the kube-proxy DaemonSet (its pods start on every node as soon as kubelet runs
    /// them). The lab calls it during `lab up` unless kube-proxy is held back.
    pub fn start_kube_proxy(&self) -> Result<()> {
        progress("creating the kube-proxy DaemonSet");
        self.lab
            .kube()
            .kubectl()?
            .apply(&manifest(&[kube_proxy::daemonset()]))
            .context("creating the kube-proxy DaemonSet")
    }

    /// Applies CoreDNS: ServiceAccount, ClusterRole and binding, Corefile, Deployment and the
    /// `kube-dns` Service at the cluster DNS address ([`coredns::cluster_dns_ip`]).
    pub fn install_coredns(&self) -> Result<()> {
        let ip = coredns::cluster_dns_ip()?;
        progress(&format!(
            "installing CoreDNS: Deployment {} ({} replicas) behind Service {} at {ip}",
            coredns::NAME,
            coredns::REPLICAS,
            coredns::SERVICE
        ));
        self.lab
            .kube()
            .kubectl()?
            .apply(&manifest(&coredns::objects(ip)))
            .context("applying CoreDNS")
    }

    /// Pods of `kube-system` matching the label `selector`.
    pub fn pods(&self, selector: &str) -> Result<Vec<PodInfo>> {
        Ok(parse_pods(&self.lab.kube().kubectl()?.json(&[
            "get",
            "pods",
            "-n",
            kube_proxy::NAMESPACE,
            "-l",
            selector,
        ])?))
    }

    /// Waits until `count` pods of `kube-system` match `selector`, Running and Ready; the error
    /// lists the pods as they were. Fails early when a lab process exits.
    fn wait_ready(
        &self,
        what: &str,
        selector: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<PodInfo>> {
        let procs = self.lab.state()?.processes;
        let refs: Vec<&crate::procs::ProcRecord> = procs
            .iter()
            .filter(|p| !p.role.starts_with("ctr "))
            .collect();
        let mut last = Vec::new();
        self.lab
            .processes()
            .wait_ready(&format!("{count} {what} pods Running and Ready"), timeout, &refs, || {
                last = self.pods(selector)?;
                let ok = last.iter().filter(|p| p.phase == "Running" && p.ready).count();
                if ok == count && last.len() == count {
                    return Ok(Some(last.clone()));
                }
                std::thread::sleep(Duration::from_millis(500));
                Ok(None)
            })
            .with_context(|| {
                let states: Vec<String> = last
                    .iter()
                    .map(|p| format!("{} {} ready={} node={}", p.name, p.phase, p.ready, p.node))
                    .collect();
                format!(
                    "{what} pods now: [{}] (see `kubectl -n kube-system describe pods -l {selector}` and the nodes' kubelet logs)",
                    states.join("; ")
                )
            })
    }

    /// Waits until a kube-proxy pod runs on every node.
    pub fn wait_kube_proxy(&self, timeout: Duration) -> Result<Vec<PodInfo>> {
        let n = self.lab.state()?.nodes.len();
        self.wait_ready("kube-proxy", kube_proxy::SELECTOR, n, timeout)
    }

    /// Waits until both CoreDNS replicas are Ready (their `ready` plugin answers: the
    /// `kubernetes` plugin has synced with the API server, through the `kubernetes` Service).
    pub fn wait_coredns(&self, timeout: Duration) -> Result<Vec<PodInfo>> {
        self.wait_ready(
            "CoreDNS",
            coredns::SELECTOR,
            coredns::REPLICAS as usize,
            timeout,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_proxy_modes_parse_and_unknown_ones_are_named() {
        assert_eq!(
            "process".parse::<KubeProxyMode>().unwrap(),
            KubeProxyMode::Process
        );
        assert_eq!(
            "daemonset".parse::<KubeProxyMode>().unwrap(),
            KubeProxyMode::DaemonSet
        );
        let e = "ds".parse::<KubeProxyMode>().unwrap_err().to_string();
        assert!(e.contains("\"ds\"") && e.contains("daemonset"), "{e}");
    }

    #[test]
    fn manifests_are_json_documents_kubectl_splits() {
        let m = manifest(&kube_proxy::config_objects("https://10.0.0.9:6443"));
        let docs: Vec<Value> = m
            .split("\n---\n")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 4);
    }
}
