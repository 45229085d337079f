//! The peer: AWS's VPC CNI (v1.23.2, unmodified, built by `scripts/build-k8s.sh`) on a lab
//! node, as its `aws-node` DaemonSet runs it: ipamd (`aws-k8s-agent`) with the manifest's
//! environment pointed at the lab's cloud, and the conflist its entrypoint writes. Used by
//! `--cni vpc-cni`, the in-place swap ([`crate::swap`]) and the benchmarks against the peer.

use std::fs;
use std::process::Command;

use anyhow::Result;

use crate::lab::{progress, UpOptions, CONFLIST};
use crate::nodes::{Node, Probe, Starting};
use crate::state::NodeRecord;

/// The `aws-node` container's environment in the VPC CNI v1.23.2 manifest
/// (`config/master/aws-k8s-cni.yaml`), except its log file (the lab logs ipamd to stdout) and
/// `NETWORK_POLICY_ENFORCING_MODE=standard`: with it set, ipamd tells the plugin to call the
/// network policy agent (another container of the `aws-node` pod, from another project, which
/// the lab does not run) and every ADD fails.
pub const VPC_CNI_MANIFEST_ENV: &[(&str, &str)] = &[
    ("ADDITIONAL_ENI_TAGS", "{}"),
    ("AWS_VPC_CNI_NODE_PORT_SUPPORT", "true"),
    ("AWS_VPC_ENI_MTU", "9001"),
    ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "false"),
    ("AWS_VPC_K8S_CNI_EXTERNALSNAT", "false"),
    ("AWS_VPC_K8S_CNI_LOGLEVEL", "DEBUG"),
    ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "prng"),
    ("AWS_VPC_K8S_CNI_VETHPREFIX", "eni"),
    (
        "AWS_VPC_K8S_PLUGIN_LOG_FILE",
        "/var/log/aws-routed-eni/plugin.log",
    ),
    ("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "DEBUG"),
    ("DISABLE_INTROSPECTION", "false"),
    ("DISABLE_METRICS", "false"),
    ("DISABLE_NETWORK_RESOURCE_PROVISIONING", "false"),
    ("ENABLE_IMDS_ONLY_MODE", "false"),
    ("ENABLE_IPv4", "true"),
    ("ENABLE_IPv6", "false"),
    ("ENABLE_MULTI_NIC", "false"),
    ("ENABLE_POD_ENI", "false"),
    ("ENABLE_PREFIX_DELEGATION", "false"),
    ("ENABLE_SUBNET_DISCOVERY", "true"),
    ("VPC_CNI_VERSION", "v1.23.2"),
    ("WARM_ENI_TARGET", "1"),
    ("WARM_PREFIX_TARGET", "1"),
];

/// File name of the VPC CNI's conflist (what its `aws-node` entrypoint writes).
pub const VPC_CNI_CONFLIST: &str = "10-aws.conflist";

/// The VPC CNI's conflist as its `aws-node` entrypoint (`cmd/aws-vpc-cni`) renders its template
/// with the defaults for an IPv4 cluster: veth prefix `eni`, MTU 9001, IPv6 egress plugin
/// disabled, plugin logs under `/var/log/aws-routed-eni/` (the node's own directory).
pub fn vpc_cni_conflist() -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "aws-cni",
        "disableCheck": true,
        "plugins": [
            {
                "name": "aws-cni", "type": "aws-cni", "vethPrefix": "eni", "mtu": "9001",
                "podSGEnforcingMode": "strict",
                "pluginLogFile": "/var/log/aws-routed-eni/plugin.log",
                "pluginLogLevel": "Debug",
                "capabilities": {"io.kubernetes.cri.pod-annotations": true}
            },
            {
                "name": "egress-cni", "type": "egress-cni", "mtu": "9001", "enabled": "false",
                "randomizeSNAT": "prng", "nodeIP": "",
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "fd00::ac:00/118"}]],
                    "routes": [{"dst": "::/0"}],
                    "dataDir": "/run/cni/v4pd/egress-v6-ipam"
                },
                "pluginLogFile": "/var/log/aws-routed-eni/egress-v6-plugin.log",
                "pluginLogLevel": "Debug"
            },
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
        ]
    })
    .to_string()
}

impl<'a> Node<'a> {
    /// [`Self::start_vpc_cni`] as `lab up` does: with the extra environment of `opts` recorded
    /// first.
    pub(crate) fn start_vpc_cni_with(&self, opts: &UpOptions) -> Result<()> {
        progress(&format!(
            "node {}: starting the VPC CNI's ipamd (aws-k8s-agent)",
            self.name()
        ));
        self.save_agent_env(opts)?;
        self.start_vpc_cni()
    }

    /// The VPC CNI's ipamd environment on `node`, as its DaemonSet (`aws-node`) gives it on
    /// EKS, pointed at the lab's cloud: EC2 through `AWS_ENDPOINT_URL_EC2`, IMDS through
    /// `AWS_EC2_METADATA_SERVICE_ENDPOINT` (the AWS SDK for Go v2 reads both), the node name,
    /// its log on stdout (the lab's process log), and, with Kubernetes, the admin kubeconfig
    /// standing in for the `aws-node` service account (controller-runtime reads `KUBECONFIG`).
    fn vpc_cni_env(
        &self,
        node: &NodeRecord,
        extra: &[(String, String)],
    ) -> Result<Vec<(String, String)>> {
        let s = self.lab().state()?;
        let mut env = self.lab().cloud().env()?;
        for (k, v) in [
            ("MY_NODE_NAME", node.k8s_name.clone()),
            (
                "CLUSTER_NAME",
                crate::kube::control_plane::CLUSTER_NAME.to_string(),
            ),
            ("AWS_VPC_K8S_CNI_LOG_FILE", "stdout".to_string()),
        ] {
            env.insert(k.to_string(), v);
        }
        for (k, v) in VPC_CNI_MANIFEST_ENV {
            env.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
        match &s.control_plane {
            Some(cp) => {
                env.insert(
                    "KUBECONFIG".into(),
                    cp.admin_kubeconfig.display().to_string(),
                );
            }
            // Without an API server ipamd has no Kubernetes client, and its check whether the
            // node is schedulable (before growing the pool) dereferences it (v1.23.2 panics);
            // this setting skips that check.
            None => {
                env.insert("AWS_MANAGE_ENIS_NON_SCHEDULABLE".into(), "true".into());
            }
        }
        for (k, v) in extra {
            env.insert(k.clone(), v.clone());
        }
        Ok(env.into_iter().collect())
    }

    /// Starts the VPC CNI's ipamd (`aws-k8s-agent`, unmodified) on the node, in the node's
    /// network and mount namespaces (so its fixed paths, `/var/run/aws-node/ipam.json` and
    /// `/var/log/aws-routed-eni/`, are the node's own), waits (120 s) until its introspection
    /// (127.0.0.1:61679) lists ENIs, then writes its conflist as the `aws-node` image's
    /// entrypoint does (`10-aws.conflist`: `aws-cni` → `egress-cni` → `portmap`, that image's
    /// defaults for an IPv4 cluster). Errors: ipamd exited (with the end of its log) or timed
    /// out.
    pub fn start_vpc_cni(&self) -> Result<()> {
        self.launch_vpc_cni()?.wait()
    }

    /// [`Self::start_vpc_cni`] without the wait ([`Starting`]).
    pub(crate) fn launch_vpc_cni(&self) -> Result<Starting<'a>> {
        let node = self.record()?;
        let extra = self.saved_agent_env();
        let conflist = node.cni_conf_dir().join(VPC_CNI_CONFLIST);
        let _ = fs::remove_file(&conflist);
        let _ = fs::remove_file(node.cni_conf_dir().join(CONFLIST));
        // Only the DaemonSet's environment: `env -i` with the variables as arguments (the
        // place's nsenter wrapper keeps the environment, not a cleared one).
        let mut c = Command::new("env");
        c.arg("-i")
            .arg("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        for (k, v) in self.vpc_cni_env(&node, &extra)? {
            c.arg(format!("{k}={v}"));
        }
        c.arg(node.dir.join("bin/aws-k8s-agent"));
        let role = format!("agent {}", node.name);
        let log = self.lab().processes().log(&role);
        let p = self.lab().processes().start(&role, c, &node.place())?;
        Ok(Starting::new(
            self.clone(),
            p,
            log,
            Probe::VpcCni { conflist },
        ))
    }
}
