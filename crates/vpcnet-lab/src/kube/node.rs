//! A lab node as a Kubernetes worker, booted the way an EKS node boots: `vpcnet-bootstrap`
//! (reading the node's IMDS and the lab cloud's EC2) writes the kubelet configuration,
//! kubeconfig, CA and the kubelet unit's drop-ins; kubelet then starts with the command line the
//! EKS AMI's unit builds from them, next to containerd (CRI) and kube-proxy (iptables mode), all
//! in the node's network and mount namespaces.

use std::fs;
use std::path::{Path, PathBuf};
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
/// Node path of the kubelet unit's drop-in directory.
pub const KUBELET_DROPINS: &str = "/etc/systemd/system/kubelet.service.d";
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
/// kubelet settings only the lab needs (cgroupfs driver under [`cgroup_root`], no swap check)
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
                },
                "flags": [format!("--node-labels={NODE_LABEL}={}", node.name)],
            },
        },
    });
    serde_yaml::to_string(&v).expect("YAML of JSON")
}

/// Writes the node's credentials: the ExecCredential with its `system:node:<name>` client
/// certificate and the `aws` stand-in (in `<node dir>/bin`, on kubelet's PATH) that prints it,
/// kube-proxy's kubeconfig and configuration, and the NodeConfig.
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
    Ok(())
}

/// kube-proxy's configuration: iptables mode, the node's name, conntrack sysctls left alone
/// (they are global, not per namespace, on this kernel), metrics and health on loopback.
pub fn kube_proxy_config(node_name: &str) -> String {
    serde_json::to_string_pretty(&json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig"},
        "mode": "iptables",
        "hostnameOverride": node_name,
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
    }))
    .expect("JSON")
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

/// One `Environment=` assignment of a systemd unit file: `Environment='KEY=VALUE'` (the form
/// vpcnet-bootstrap writes), with systemd's `%%` and backslash escapes undone.
fn parse_environment(line: &str) -> Option<(String, String)> {
    let rest = line.trim().strip_prefix("Environment=")?;
    let inner = rest
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
        .unwrap_or(rest);
    let (k, v) = inner.split_once('=')?;
    let mut out = String::new();
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('%', Some('%')) | ('\\', Some('\\')) => {
                out.push(c);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    Some((k.to_string(), out))
}

/// kubelet's command line as systemd builds it from the EKS AMI's kubelet unit
/// (`kubelet --config ... --kubeconfig ... --container-runtime-endpoint ... $KUBELET_ARGS
/// $KUBELET_EXTRA_ARGS`, unbraced variables split on whitespace) and the drop-ins
/// vpcnet-bootstrap wrote under `root`; `KUBELET_CLOUD_PROVIDER` becomes `--cloud-provider=` for
/// units that read it. Errors: the drop-in directory is missing (bootstrap did not run).
pub fn kubelet_argv(root: &Path, kubelet: &Path) -> Result<Vec<String>> {
    let dir = host_path(root, KUBELET_DROPINS);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("{} missing: did vpcnet-bootstrap run?", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "conf"))
        .collect();
    files.sort();
    let mut env = std::collections::BTreeMap::new();
    for f in files {
        for line in fs::read_to_string(&f)?.lines() {
            if let Some((k, v)) = parse_environment(line) {
                env.insert(k, v);
            }
        }
    }
    let mut argv = vec![
        kubelet.display().to_string(),
        format!("--config={KUBELET_CONFIG}"),
        format!("--kubeconfig={KUBELET_KUBECONFIG}"),
        format!("--container-runtime-endpoint={CRI_ENDPOINT}"),
    ];
    let has_cloud_flag = |v: &str| {
        v.split_whitespace()
            .any(|w| w.starts_with("--cloud-provider"))
    };
    if let Some(cp) = env.get("KUBELET_CLOUD_PROVIDER") {
        if !env.values().any(|v| has_cloud_flag(v)) {
            argv.push(format!("--cloud-provider={cp}"));
        }
    }
    for var in ["KUBELET_ARGS", "KUBELET_EXTRA_ARGS"] {
        if let Some(v) = env.get(var) {
            argv.extend(v.split_whitespace().map(str::to_string));
        }
    }
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
    fn environment_lines_are_unescaped() {
        assert_eq!(
            parse_environment("Environment='KUBELET_ARGS=--a=50%% --b=c\\\\d'"),
            Some(("KUBELET_ARGS".into(), "--a=50% --b=c\\d".into()))
        );
        assert_eq!(parse_environment("[Service]"), None);
    }

    #[test]
    fn kubelet_command_line_from_drop_ins() {
        let root = tempfile::tempdir().unwrap();
        let d = host_path(root.path(), KUBELET_DROPINS);
        fs::create_dir_all(&d).unwrap();
        fs::write(
            d.join("10-kubelet-args.conf"),
            "[Service]\nEnvironment='KUBELET_ARGS=--node-ip=10.0.1.5 --hostname-override=ip-10-0-1-5.ec2.internal'\n",
        )
        .unwrap();
        fs::write(
            d.join("20-kubelet-cloud-provider.conf"),
            "[Service]\nEnvironment='KUBELET_CLOUD_PROVIDER=external'\n",
        )
        .unwrap();
        fs::write(
            d.join("30-kubelet-extra-args.conf"),
            "[Service]\nEnvironment='KUBELET_EXTRA_ARGS=--node-labels=a=b'\n",
        )
        .unwrap();
        let argv = kubelet_argv(root.path(), Path::new("/k/kubelet")).unwrap();
        assert_eq!(argv[0], "/k/kubelet");
        assert!(argv.contains(&"--cloud-provider=external".to_string()));
        assert!(argv.contains(&"--node-ip=10.0.1.5".to_string()));
        assert_eq!(argv.last().unwrap(), "--node-labels=a=b");
        // A unit that already passes the flag in KUBELET_ARGS does not get it twice.
        fs::write(
            d.join("10-kubelet-args.conf"),
            "[Service]\nEnvironment='KUBELET_ARGS=--cloud-provider=external --node-ip=10.0.1.5'\n",
        )
        .unwrap();
        let argv = kubelet_argv(root.path(), Path::new("/k/kubelet")).unwrap();
        assert_eq!(
            argv.iter()
                .filter(|a| a.starts_with("--cloud-provider"))
                .count(),
            1
        );
    }

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
            y["spec"]["kubelet"]["flags"][0],
            "--node-labels=vpcnet.lab/node=n1"
        );
    }
}
