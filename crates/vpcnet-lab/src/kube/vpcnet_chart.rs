//! vpcnet installed on the lab cluster as an operator installs it on EKS ([`Lab::vpcnet_chart`]):
//! the node image (`vpcnet-image`, from the lab's binaries) imported into every node's
//! containerd, and `charts/vpcnet` installed with the pinned Helm (`scripts/build-helm.sh`).
//! kubelet then starts the agent as the `aws-node` DaemonSet's pod, under the chart's service
//! account and ClusterRole: its init container (`vpcnet-init`) installs the plugins into the
//! node's `/opt/cni/bin`, and the agent writes the conflist once it can serve.
//!
//! The chart's values the lab sets: the image (imported, so `pullPolicy: Never`) and, in `env`,
//! what only the lab knows: the lab cloud's EC2 endpoint and credentials, its IMDS address, the
//! cluster's name, and `CLUSTER_ENDPOINT` when asked. Everything else is the chart's default.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use vpcnet_charts::Chart;

use crate::containerd;
use crate::lab::{progress, Lab};
use crate::spawn::Place;
use crate::state::NodeRecord;
use crate::wait::wait_for;

/// The Helm release name of the node agent's chart.
pub const RELEASE: &str = "vpcnet";
/// The namespace the chart is installed in (the VPC CNI's).
pub const NAMESPACE: &str = "kube-system";
/// The DaemonSet's name and its pods' `k8s-app` label (the chart's default, the VPC CNI's).
pub const DAEMONSET: &str = "aws-node";

/// The helm binary: `$VPCNET_HELM_BIN_DIR/helm` when set (what `scripts/build-helm.sh`
/// prints), else the newest build in its cache (`$VPCNET_CACHE/helm/<key>/bin/helm`). Errors
/// say how to build it.
pub fn helm() -> Result<PathBuf> {
    if std::env::var_os(vpcnet_charts::HELM_BIN_DIR_ENV).is_some_and(|d| !d.is_empty()) {
        return Ok(vpcnet_charts::helm()?);
    }
    let cache =
        PathBuf::from(std::env::var("VPCNET_CACHE").unwrap_or_else(|_| "/var/cache/vpcnet".into()))
            .join("helm");
    let mut builds: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let helm = e.path().join("bin/helm");
            let t = std::fs::metadata(&helm).ok()?.modified().ok()?;
            Some((t, helm))
        })
        .collect();
    builds.sort();
    builds.pop().map(|(_, helm)| helm).with_context(|| {
        format!(
            "helm is not built: run scripts/build-helm.sh (builds the Helm pinned in \
             lab/helm/go.mod into {}), or set {} to a directory holding helm",
            cache.display(),
            vpcnet_charts::HELM_BIN_DIR_ENV
        )
    })
}

/// `helm upgrade --install <release> charts/<chart> --namespace <namespace>` with `values`
/// (written to `<lab>/<release>-values.json`), run in the control plane's namespace with the
/// admin kubeconfig (the operator's). Returns once Helm has applied the objects.
pub fn helm_upgrade_install(
    lab: &Lab,
    release: &str,
    chart: Chart,
    namespace: &str,
    values: &Value,
) -> Result<()> {
    let helm = helm()?;
    let values_file = lab.dir.join(format!("{release}-values.json"));
    std::fs::write(&values_file, serde_json::to_vec_pretty(values)?)?;
    let kubectl = lab.kube().kubectl()?;
    let mut c = std::process::Command::new(&helm);
    c.arg("upgrade")
        .arg("--install")
        .arg(release)
        .arg(chart.dir())
        .args(["--namespace", namespace, "--values"])
        .arg(&values_file)
        .arg("--kubeconfig")
        .arg(&kubectl.kubeconfig);
    Place::netns(&kubectl.netns).apply(&mut c)?;
    let out = c
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    if !out.status.success() {
        bail!(
            "helm upgrade --install {release} charts/{} failed: {}",
            chart.name(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The vpcnet chart on one lab ([`Lab::vpcnet_chart`]).
#[derive(Debug, Clone, Copy)]
pub struct VpcnetChart<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// vpcnet installed with its chart ([`VpcnetChart`]).
    pub fn vpcnet_chart(&self) -> VpcnetChart<'_> {
        VpcnetChart { lab: self }
    }
}

/// One agent pod as the API server reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPod {
    pub name: String,
    /// Kubernetes node name.
    pub node: String,
    pub phase: String,
    pub ready: bool,
    /// Restarts of the agent container.
    pub restarts: u64,
    /// The agent container's ID (`containerd://...`), empty before it started.
    pub container_id: String,
}

/// Parses `kubectl get pods -o json` of the agent's pods.
pub fn parse_agent_pods(list: &Value) -> Vec<AgentPod> {
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .map(|p| {
            let agent = p["status"]["containerStatuses"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["name"] == DAEMONSET).cloned())
                .unwrap_or(Value::Null);
            AgentPod {
                name: p["metadata"]["name"].as_str().unwrap_or_default().into(),
                node: p["spec"]["nodeName"].as_str().unwrap_or_default().into(),
                phase: p["status"]["phase"].as_str().unwrap_or_default().into(),
                ready: agent["ready"].as_bool().unwrap_or(false),
                restarts: agent["restartCount"].as_u64().unwrap_or(0),
                container_id: agent["containerID"].as_str().unwrap_or_default().into(),
            }
        })
        .collect()
}

/// Builds one of vpcnet's images (`image`: [`vpcnet_image::images::node`] or `targets`) from
/// the lab's binaries ([`Lab::bin_dir`]) and the host's packages into `archive`, tagged with
/// this build's version; returns its reference and digest. `what` names the image and how to
/// build its binaries, for the error.
pub(crate) fn build_lab_image(
    lab: &Lab,
    image: fn(&vpcnet_image::images::Inputs) -> Result<vpcnet_image::images::Image>,
    archive: &std::path::Path,
    what: &str,
) -> Result<(String, String)> {
    use vpcnet_image::images::{self, Inputs};
    let inputs = Inputs {
        bin_dir: lab.bin_dir(),
        host_root: "/".into(),
        arch: images::host_arch().to_string(),
        repository: images::DEFAULT_REPOSITORY.to_string(),
        tag: env!("CARGO_PKG_VERSION").to_string(),
        mtime: 0,
    };
    let image =
        image(&inputs).with_context(|| format!("building {what} from the lab's binaries"))?;
    let built = image.build(0)?;
    std::fs::write(archive, &built.archive)
        .with_context(|| format!("writing {}", archive.display()))?;
    Ok((image.spec.reference, built.manifest_digest))
}

/// The values file the lab installs the chart with: the image `reference` (imported, never
/// pulled) and `env` merged over the chart's default `env`. `VPCNET_ENABLE_NETWORK_POLICY`
/// in `env` becomes the chart's `enableNetworkPolicy`, as an operator turns enforcement on
/// (the chart then also grants the agent its watches), and `VPCNET_POLICY_EVENT_LOGS` its
/// `nodeAgent.enablePolicyEventLogs`.
pub fn values(reference: &str, env: &BTreeMap<String, String>) -> Value {
    let image = json!({"override": reference, "pullPolicy": "Never"});
    let mut env = env.clone();
    let mut flag = |name: &str| {
        env.remove(name)
            .is_some_and(|v| ["1", "t", "T", "TRUE", "true", "True"].contains(&v.as_str()))
    };
    let policy = flag("VPCNET_ENABLE_NETWORK_POLICY");
    let event_logs = flag("VPCNET_POLICY_EVENT_LOGS");
    let mut values = json!({
        "image": image,
        "init": {"image": image},
        "env": env,
        "enableNetworkPolicy": policy.to_string(),
    });
    if event_logs {
        values["nodeAgent"] = json!({"enablePolicyEventLogs": "true"});
    }
    values
}

impl VpcnetChart<'_> {
    /// The node image's archive in the lab directory.
    fn archive(&self) -> PathBuf {
        self.lab.dir.join("vpcnet-node.oci.tar")
    }

    /// Builds the node image from the lab's binaries ([`Lab::bin_dir`]) into the lab directory
    /// and returns its reference and digest. Errors: a binary is missing (names the build
    /// command), or a host package the image takes files from is missing.
    pub fn build_image(&self) -> Result<(String, String)> {
        build_lab_image(
            self.lab,
            vpcnet_image::images::node,
            &self.archive(),
            "the node image (cargo build --workspace builds vpcnet-agent, vpcnet-cni, \
             vpcnet-init and vpcnet)",
        )
    }

    /// Imports the node image built by [`Self::build_image`] into `node`'s containerd (the
    /// CRI namespace kubelet uses).
    pub fn import_image(&self, node: &NodeRecord) -> Result<()> {
        containerd::import(node, containerd::CRI_NAMESPACE, &self.archive())
    }

    /// The environment the lab gives the agent through the chart's `env`: the lab cloud's
    /// endpoints and credentials, the cluster's name, `CLUSTER_ENDPOINT` when
    /// `cluster_endpoint`, then `extra` (later entries win).
    pub fn env(
        &self,
        cluster_endpoint: bool,
        extra: &[(String, String)],
    ) -> Result<BTreeMap<String, String>> {
        let mut env = self.lab.cloud().env()?;
        let cp = self.lab.kube().control_plane()?;
        env.insert(
            "CLUSTER_NAME".into(),
            crate::kube::control_plane::CLUSTER_NAME.into(),
        );
        if cluster_endpoint {
            env.insert("CLUSTER_ENDPOINT".into(), cp.endpoint());
        }
        for (k, v) in extra {
            env.insert(k.clone(), v.clone());
        }
        Ok(env)
    }

    /// `helm upgrade --install` of `charts/vpcnet` as release [`RELEASE`] in [`NAMESPACE`]
    /// with the image `reference` and `env`, run in the control plane's namespace with the
    /// admin kubeconfig (the operator's). Returns once Helm has applied the objects; the pods
    /// start as kubelet gets to them ([`Self::wait_agents_ready`]).
    pub fn install(&self, reference: &str, env: &BTreeMap<String, String>) -> Result<()> {
        helm_upgrade_install(
            self.lab,
            RELEASE,
            Chart::Vpcnet,
            NAMESPACE,
            &values(reference, env),
        )
    }

    /// Builds and imports the node image on every node, then installs the chart
    /// ([`Self::install`]) with [`Self::env`].
    pub fn install_on_nodes(
        &self,
        nodes: &[NodeRecord],
        cluster_endpoint: bool,
        extra_env: &[(String, String)],
    ) -> Result<()> {
        progress("building the node image (vpcnet-image) from the lab's binaries");
        let (reference, digest) = self.build_image()?;
        for n in nodes {
            progress(&format!(
                "node {}: importing {reference} ({digest})",
                n.name
            ));
            self.import_image(n)?;
        }
        progress(&format!(
            "helm install {RELEASE} charts/vpcnet into {NAMESPACE} (the aws-node DaemonSet)"
        ));
        self.install(&reference, &self.env(cluster_endpoint, extra_env)?)
    }

    /// The agent's pods (`k8s-app=aws-node` in [`NAMESPACE`]).
    pub fn agent_pods(&self) -> Result<Vec<AgentPod>> {
        let kubectl = self.lab.kube().kubectl()?;
        Ok(parse_agent_pods(&kubectl.json(&[
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            &format!("k8s-app={DAEMONSET}"),
        ])?))
    }

    /// The agent pod on the node with Kubernetes name `k8s_node`.
    pub fn agent_pod(&self, k8s_node: &str) -> Result<AgentPod> {
        self.agent_pods()?
            .into_iter()
            .find(|p| p.node == k8s_node)
            .with_context(|| format!("no {DAEMONSET} pod on node {k8s_node}"))
    }

    /// Waits until every node has a Ready agent pod.
    pub fn wait_agents_ready(&self, timeout: Duration) -> Result<Vec<AgentPod>> {
        let nodes = self.lab.state()?.nodes.len();
        let mut last = Vec::new();
        wait_for(
            &format!("{nodes} {DAEMONSET} pods Running and Ready"),
            timeout,
            || {
                last = self.agent_pods()?;
                let ready = last
                    .iter()
                    .filter(|p| p.phase == "Running" && p.ready)
                    .count();
                Ok((ready == nodes && last.len() == nodes).then(|| last.clone()))
            },
        )
        .with_context(|| {
            let states: Vec<String> = last
                .iter()
                .map(|p| {
                    format!(
                        "{} {} ready={} restarts={} node={}",
                        p.name, p.phase, p.ready, p.restarts, p.node
                    )
                })
                .collect();
            format!("agent pods now: {}", states.join("; "))
        })
    }

    /// `kubectl exec` of `argv` in the agent container of the pod on `k8s_node`.
    pub fn exec(&self, k8s_node: &str, argv: &[&str]) -> Result<std::process::Output> {
        let pod = self.agent_pod(k8s_node)?;
        let mut args = vec!["exec", "-n", NAMESPACE, &pod.name, "-c", DAEMONSET, "--"];
        args.extend_from_slice(argv);
        self.lab.kube().kubectl()?.output(&args, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_set_the_image_for_both_containers_and_merge_env() {
        let env = BTreeMap::from([("AWS_REGION".to_string(), "us-east-1".to_string())]);
        let v = values("localhost/vpcnet/vpcnet-node:0.1.0", &env);
        for image in [&v["image"], &v["init"]["image"]] {
            assert_eq!(image["override"], "localhost/vpcnet/vpcnet-node:0.1.0");
            assert_eq!(image["pullPolicy"], "Never");
        }
        assert_eq!(v["env"]["AWS_REGION"], "us-east-1");
        assert_eq!(v["enableNetworkPolicy"], "false");
    }

    #[test]
    fn the_network_policy_variable_becomes_the_charts_value() {
        let env = BTreeMap::from([(
            "VPCNET_ENABLE_NETWORK_POLICY".to_string(),
            "true".to_string(),
        )]);
        let v = values("r", &env);
        assert_eq!(v["enableNetworkPolicy"], "true");
        assert!(
            v["env"].get("VPCNET_ENABLE_NETWORK_POLICY").is_none(),
            "{v}"
        );
    }

    #[test]
    fn the_event_log_variable_becomes_the_node_agent_value() {
        let env = BTreeMap::from([
            (
                "VPCNET_ENABLE_NETWORK_POLICY".to_string(),
                "true".to_string(),
            ),
            ("VPCNET_POLICY_EVENT_LOGS".to_string(), "true".to_string()),
        ]);
        let v = values("r", &env);
        assert_eq!(v["nodeAgent"]["enablePolicyEventLogs"], "true");
        assert!(v["env"].get("VPCNET_POLICY_EVENT_LOGS").is_none(), "{v}");
        let v = values("r", &BTreeMap::new());
        assert!(v.get("nodeAgent").is_none(), "{v}");
    }

    #[test]
    fn agent_pods_read_the_agent_containers_status() {
        let list = json!({"items": [{
            "metadata": {"name": "aws-node-x1"},
            "spec": {"nodeName": "ip-10-0-0-10.ec2.internal"},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "other", "ready": false, "restartCount": 9},
                {"name": "aws-node", "ready": true, "restartCount": 1,
                 "containerID": "containerd://abc"}
            ]}
        }, {
            "metadata": {"name": "aws-node-x2"},
            "spec": {},
            "status": {"phase": "Pending"}
        }]});
        let pods = parse_agent_pods(&list);
        assert_eq!(
            pods[0],
            AgentPod {
                name: "aws-node-x1".into(),
                node: "ip-10-0-0-10.ec2.internal".into(),
                phase: "Running".into(),
                ready: true,
                restarts: 1,
                container_id: "containerd://abc".into(),
            }
        );
        assert_eq!(pods[1].phase, "Pending");
        assert!(!pods[1].ready);
        assert_eq!(pods[1].restarts, 0);
    }
}
