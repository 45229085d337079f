//! A lab node as a Kubernetes worker, booted the way an EKS node boots: `vpcnet-bootstrap`
//! (reading the node's IMDS and the lab cloud's EC2) writes the kubelet configuration,
//! kubeconfig, CA and the kubelet unit's drop-ins; kubelet then starts with the command line the
//! EKS AMI's unit builds from them, next to containerd (CRI) and kube-proxy (iptables mode), all
//! in the node's network and mount namespaces.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use base64::Engine;
use serde_json::json;

use super::control_plane::{ControlPlaneRecord, CLUSTER_NAME, SERVICE_CIDR};
use super::manifests::AGENT_SERVICE_ACCOUNT;
use super::pki::{self, Ca, Identity};
use crate::machine::host_path;
use crate::state::NodeRecord;

/// Node path of the lab's NodeConfig for vpcnet-bootstrap.
pub const NODE_CONFIG: &str = "/etc/kubernetes/lab/nodeconfig.yaml";
/// Node path of the ExecCredential the lab's `aws eks get-token` stand-in prints.
pub const EXEC_CREDENTIAL: &str = "/etc/kubernetes/lab/exec-credential.json";
/// Node path of the kubelet configuration vpcnet-bootstrap writes.
pub const KUBELET_CONFIG: &str = "/etc/kubernetes/kubelet/kubelet-config.json";
/// Node path of the kubeconfig vpcnet-bootstrap writes.
pub const KUBELET_KUBECONFIG: &str = "/var/lib/kubelet/kubeconfig";
/// Node path of the lab's containerd configuration template, which vpcnet-bootstrap installs
/// as `/etc/containerd/config.toml` (`--containerd-config-file`, `SANDBOX_IMAGE` replaced).
pub const CONTAINERD_TEMPLATE: &str = "/etc/kubernetes/lab/containerd-config.toml";
/// containerd's CRI socket (its default) as kubelet reaches it.
pub const CRI_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// Label every lab node carries: the lab's short node name (`n1`).
pub const NODE_LABEL: &str = "vpcnet.lab/node";
/// Node path of kube-proxy's configuration.
pub const KUBE_PROXY_CONFIG: &str = "/var/lib/kube-proxy/config.json";
/// Directory of the service-account token the agent reads as a pod would.
pub const SERVICE_ACCOUNT_DIR: &str = "/run/secrets/kubernetes.io/serviceaccount";

/// The cgroup (in every v1 hierarchy) under which kubelet puts the node's pods: unique per lab
/// run, the same name as the node's containerd namespace, so teardown finds both.
pub fn cgroup_root(node: &NodeRecord) -> String {
    format!("/{}", node.ctr_namespace())
}

/// The lab's NodeConfig (`node.eks.aws/v1alpha1`) for one node: cluster from the control plane,
/// kubelet settings only the lab needs (cgroupfs driver under [`cgroup_root`], no swap check,
/// disk eviction thresholds of 1 % and no image collection, since the host's disk is shared)
/// merged through `kubelet.config`, and the node's lab name as a label.
pub fn node_config(cp: &ControlPlaneRecord, ca_pem: &str, node: &NodeRecord) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let v = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": CLUSTER_NAME,
                "apiServerEndpoint": cp.endpoint(),
                "certificateAuthority": ca,
                "cidr": SERVICE_CIDR,
            },
            "kubelet": {
                "config": {
                    "cgroupDriver": "cgroupfs",
                    "cgroupRoot": cgroup_root(node),
                    "failSwapOn": false,
                    "containerRuntimeEndpoint": CRI_ENDPOINT,
                    // The nodes share the host's disk with everything else on it: evicting
                    // for the host's free space (EKS: 10 % of nodefs, 15 % of imagefs) would
                    // fail the lab's pods whenever the host's disk is fuller than that.
                    "evictionHard": {
                        "memory.available": "100Mi",
                        "nodefs.available": "1%",
                        "nodefs.inodesFree": "1%",
                        "imagefs.available": "1%",
                        "imagefs.inodesFree": "1%",
                    },
                    // Nor collect the lab's local images (imported, never pullable) for it.
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                },
                "flags": [format!("--node-labels={NODE_LABEL}={}", node.name)],
            },
        },
    });
    serde_yaml::to_string(&v).expect("YAML of JSON")
}

/// Writes the node's credentials: the ExecCredential with its `system:node:<name>` client
/// certificate and the `aws` stand-in (in `<node dir>/bin`, on kubelet's PATH) that prints it,
/// kube-proxy's kubeconfig and configuration, the NodeConfig and the containerd template.
pub fn write_node_files(
    node: &NodeRecord,
    root: &Path,
    ca: &Ca,
    cp: &ControlPlaneRecord,
) -> Result<()> {
    let kubelet = ca.client(&Identity::node(&node.k8s_name))?;
    pki::write_file(
        &host_path(root, EXEC_CREDENTIAL),
        &pki::exec_credential(&kubelet),
        0o600,
    )?;
    let stub = node.dir.join("bin/aws");
    pki::write_file(
        &stub,
        &format!(
            "#!/bin/sh\n# vpcnet lab: stands in for `aws eks get-token` (EKS maps the node's IAM role to\n# system:node:<name>); prints an ExecCredential with the node's client certificate.\nexec cat {EXEC_CREDENTIAL}\n"
        ),
        0o755,
    )?;
    let proxy = ca.client(&Identity::user("system:kube-proxy"))?;
    pki::write_file(
        &host_path(root, "/var/lib/kube-proxy/kubeconfig"),
        &pki::kubeconfig(&cp.endpoint(), &ca.cert_pem, "system:kube-proxy", &proxy),
        0o600,
    )?;
    pki::write_file(
        &host_path(root, KUBE_PROXY_CONFIG),
        &kube_proxy_config(&node.k8s_name),
        0o644,
    )?;
    pki::write_file(
        &host_path(root, NODE_CONFIG),
        &node_config(cp, &ca.cert_pem, node),
        0o644,
    )?;
    pki::write_file(
        &host_path(root, CONTAINERD_TEMPLATE),
        &crate::containerd::config_toml("SANDBOX_IMAGE"),
        0o644,
    )?;
    Ok(())
}

/// kube-proxy's configuration: iptables mode, the node's name, conntrack sysctls left alone
/// (they are global, not per namespace, on this kernel), metrics and health on loopback.
pub fn kube_proxy_config(node_name: &str) -> String {
    let mut c = kube_proxy_configuration();
    c["hostnameOverride"] = json!(node_name);
    serde_json::to_string_pretty(&c).expect("JSON")
}

/// The node-independent part of [`kube_proxy_config`], shared with the kube-proxy add-on's
/// ConfigMap (whose pods get the node's name with `--hostname-override`): the kubeconfig at
/// `/var/lib/kube-proxy/kubeconfig`, iptables mode, conntrack sysctls left alone, metrics and
/// health on loopback.
pub fn kube_proxy_configuration() -> serde_json::Value {
    json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig"},
        "mode": "iptables",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
    })
}

/// Writes the agent's service-account token (a TokenRequest for `kube-system/aws-node`, as a
/// projected volume would hold it), the CA and the namespace where a pod finds them:
/// [`SERVICE_ACCOUNT_DIR`] in the node's mount namespace.
pub fn write_agent_token(cp: &ControlPlaneRecord, root: &Path) -> Result<()> {
    let (ns, sa) = AGENT_SERVICE_ACCOUNT;
    let token = cp
        .kubectl()
        .run(&["create", "token", sa, "-n", ns, "--duration=24h"])
        .context("requesting the agent's service-account token")?;
    let dir = host_path(root, SERVICE_ACCOUNT_DIR);
    pki::write_file(&dir.join("token"), token.trim(), 0o600)?;
    pki::write_file(
        &dir.join("ca.crt"),
        &fs::read_to_string(&cp.ca_file)?,
        0o644,
    )?;
    pki::write_file(&dir.join("namespace"), ns, 0o644)?;
    Ok(())
}

/// Creates [`cgroup_root`] in every cgroup v1 hierarchy (kubelet's cgroupfs driver requires it
/// to exist), with the cpuset hierarchy's CPUs and memory nodes copied from its parent.
pub fn create_cgroup_root(node: &NodeRecord) -> Result<()> {
    let name = cgroup_root(node);
    let rel = name.trim_start_matches('/');
    for e in fs::read_dir("/sys/fs/cgroup").context("reading /sys/fs/cgroup")? {
        let h = e?.path();
        if !h.join("cgroup.procs").exists() {
            continue;
        }
        let d = h.join(rel);
        fs::create_dir_all(&d).with_context(|| format!("creating cgroup {}", d.display()))?;
        for f in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(v) = fs::read_to_string(h.join(f)) {
                fs::write(d.join(f), v.trim())
                    .with_context(|| format!("setting {}", d.join(f).display()))?;
            }
        }
    }
    Ok(())
}

/// kubelet's command line as systemd would start it from the kubelet unit and drop-ins
/// vpcnet-bootstrap installed under `root` (see `vpcnet_bootstrap::systemd`), with the lab's
/// `kubelet` binary as `argv[0]`. Errors: no unit installed (bootstrap did not run), or one it
/// cannot read.
pub fn kubelet_argv(root: &Path, kubelet: &Path) -> Result<Vec<String>> {
    let mut argv = vpcnet_bootstrap::systemd::kubelet_command_line(
        root,
        vpcnet_bootstrap::systemd::Unit::Installed,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
    .context("building kubelet's command line from the unit vpcnet-bootstrap installed")?;
    if argv.is_empty() {
        bail!("the kubelet unit under {} starts nothing", root.display());
    }
    argv[0] = kubelet.display().to_string();
    Ok(argv)
}

/// Builds a [`Command`] from `argv` (program first).
pub fn command(argv: &[String]) -> Result<Command> {
    let Some((prog, args)) = argv.split_first() else {
        bail!("empty command line");
    };
    let mut c = Command::new(prog);
    c.args(args);
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_config_merges_lab_settings_through_kubelet_config() {
        let cp = ControlPlaneRecord {
            ip: "10.0.0.10".into(),
            ..Default::default()
        };
        let node = NodeRecord {
            name: "n1".into(),
            netns: "vlabc-n1".into(),
            ..Default::default()
        };
        let y: serde_yaml::Value = serde_yaml::from_str(&node_config(&cp, "PEM", &node)).unwrap();
        assert_eq!(y["kind"], "NodeConfig");
        assert_eq!(
            y["spec"]["cluster"]["apiServerEndpoint"],
            "https://10.0.0.10:6443"
        );
        assert_eq!(y["spec"]["kubelet"]["config"]["cgroupRoot"], "/vlabc-n1");
        assert_eq!(
            y["spec"]["kubelet"]["config"]["evictionHard"]["nodefs.available"],
            "1%"
        );
        assert_eq!(
            y["spec"]["kubelet"]["flags"][0],
            "--node-labels=vpcnet.lab/node=n1"
        );
    }
}
