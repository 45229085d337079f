//! vpcnet-targets installed on the lab cluster as an operator installs it on EKS
//! ([`Lab::targets_chart`]): the `vpcnet-targets` image (`vpcnet-image`, from the lab's
//! binaries) imported into every node's containerd, and `charts/vpcnet-targets` installed with
//! the pinned Helm. The controller then runs as the chart's Deployment: pods networked by
//! vpcnet, under the chart's service account and RBAC, electing a leader through their Lease,
//! reaching the API server through the `kubernetes` Service (in-cluster configuration, no
//! kubeconfig) and the lab cloud's ELBv2 endpoint from their VPC addresses.
//!
//! The chart's values the lab sets: the image (imported, so `pullPolicy: Never`), `region`,
//! `elbv2Endpoint` (the lab cloud's endpoint), and in `extraEnv` what only the lab knows: the
//! lab's static credentials (an operator would use IRSA) and the log filter. Everything else is
//! the chart's default. The process mode ([`super::targets`]) stays for tests that kill and
//! restart the controller at will.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use vpcnet_charts::Chart;

use crate::cloud::aws_env;
use crate::containerd;
use crate::daemon;
use crate::kube::vpcnet_chart::helm_upgrade_install;
use crate::kube::workload::{parse_pods, PodInfo};
use crate::lab::{progress, Lab};
use crate::state::NodeRecord;
use crate::wait::wait_for;

/// The Helm release name (the chart's name, so the objects are named `vpcnet-targets`).
pub const RELEASE: &str = "vpcnet-targets";
/// The namespace the chart is installed in (aws-load-balancer-controller's).
pub const NAMESPACE: &str = "kube-system";
/// The pods' label selector (the chart's selector labels for [`RELEASE`]).
pub const SELECTOR: &str =
    "app.kubernetes.io/name=vpcnet-targets,app.kubernetes.io/instance=vpcnet-targets";
/// The Lease the replicas elect their leader with (the chart's `leaderElection.id`).
pub const LEASE: &str = "vpcnet-targets";

/// What the lab chooses of the chart's values.
#[derive(Debug, Clone)]
pub struct TargetsChartOptions {
    /// `replicaCount`.
    pub replicas: u32,
    /// `resyncSeconds`.
    pub resync_seconds: u64,
    /// `leaderElection.leaseDurationSeconds`.
    pub lease_duration_seconds: u64,
}

impl Default for TargetsChartOptions {
    fn default() -> Self {
        TargetsChartOptions {
            replicas: 2,
            resync_seconds: 60,
            lease_duration_seconds: 15,
        }
    }
}

/// The values file the lab installs the chart with: the imported image `reference`, the lab
/// cloud's ELBv2 `endpoint` and region, its credentials (`extraEnv`), and `o`.
pub fn values(reference: &str, endpoint: &str, o: &TargetsChartOptions) -> Value {
    let mut env: Vec<Value> = aws_env(endpoint)
        .into_iter()
        .filter(|(k, _)| k.starts_with("AWS_") && !k.contains("EC2"))
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    env.push(json!({"name": "RUST_LOG", "value": "info,kube=warn,vpcnet_targets=debug"}));
    json!({
        "image": {"override": reference, "pullPolicy": "Never"},
        "replicaCount": o.replicas,
        "leaderElection": {"leaseDurationSeconds": o.lease_duration_seconds},
        "region": daemon::REGION,
        "elbv2Endpoint": endpoint,
        "resyncSeconds": o.resync_seconds,
        "extraEnv": env,
    })
}

/// vpcnet-targets installed by its chart on one lab ([`Lab::targets_chart`]).
#[derive(Debug, Clone, Copy)]
pub struct TargetsChart<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// vpcnet-targets installed with its chart ([`TargetsChart`]).
    pub fn targets_chart(&self) -> TargetsChart<'_> {
        TargetsChart { lab: self }
    }
}

impl TargetsChart<'_> {
    /// The image's archive in the lab directory.
    fn archive(&self) -> PathBuf {
        self.lab.dir.join("vpcnet-targets.oci.tar")
    }

    /// Builds the `vpcnet-targets` image from the lab's binaries ([`Lab::bin_dir`]) into the
    /// lab directory and returns its reference and digest.
    pub fn build_image(&self) -> Result<(String, String)> {
        super::vpcnet_chart::build_lab_image(
            self.lab,
            vpcnet_image::images::targets,
            &self.archive(),
            "the vpcnet-targets image (cargo build --workspace builds vpcnet-targets)",
        )
    }

    /// Imports the image built by [`Self::build_image`] into `node`'s containerd (the CRI
    /// namespace kubelet uses).
    pub fn import_image(&self, node: &NodeRecord) -> Result<()> {
        containerd::import(node, containerd::CRI_NAMESPACE, &self.archive())
    }

    /// `helm upgrade --install` of `charts/vpcnet-targets` as [`RELEASE`] in [`NAMESPACE`]
    /// (its `crds/` bring the TargetGroupBinding CRD) with [`values`].
    pub fn install(&self, reference: &str, o: &TargetsChartOptions) -> Result<()> {
        let endpoint = self.lab.cloud().endpoint()?;
        helm_upgrade_install(
            self.lab,
            RELEASE,
            Chart::Targets,
            NAMESPACE,
            &values(reference, &endpoint, o),
        )
    }

    /// Builds the image, imports it on every node, and installs the chart.
    pub fn install_on_nodes(&self, o: &TargetsChartOptions) -> Result<()> {
        progress("building the vpcnet-targets image (vpcnet-image) from the lab's binaries");
        let (reference, digest) = self.build_image()?;
        for n in &self.lab.state()?.nodes {
            progress(&format!(
                "node {}: importing {reference} ({digest})",
                n.name
            ));
            self.import_image(n)?;
        }
        progress(&format!(
            "helm install {RELEASE} charts/vpcnet-targets into {NAMESPACE} ({} replicas)",
            o.replicas
        ));
        self.install(&reference, o)
    }

    /// The controller's pods.
    pub fn pods(&self) -> Result<Vec<PodInfo>> {
        let k = self.lab.kube().kubectl()?;
        Ok(parse_pods(
            &k.json(&["get", "pods", "-n", NAMESPACE, "-l", SELECTOR])?,
        ))
    }

    /// The holder of the leader Lease ([`LEASE`]), if any.
    pub fn leader(&self) -> Result<Option<String>> {
        let k = self.lab.kube().kubectl()?;
        let out = k.output(
            &["get", "lease", "-n", NAMESPACE, LEASE, "-o", "json"],
            None,
        )?;
        if !out.status.success() {
            return Ok(None);
        }
        let v: Value = serde_json::from_slice(&out.stdout)?;
        Ok(v["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_string))
    }

    /// Waits until `replicas` pods are Running and Ready (caches synced) and one of them holds
    /// the Lease; returns the pods and the leader's name.
    pub fn wait_ready(&self, replicas: usize, timeout: Duration) -> Result<(Vec<PodInfo>, String)> {
        let mut last = Vec::new();
        wait_for(
            &format!("{replicas} vpcnet-targets pods Ready, one the leader"),
            timeout,
            || {
                last = self.pods()?;
                let ready = last
                    .iter()
                    .filter(|p| p.phase == "Running" && p.ready)
                    .count();
                if ready != replicas || last.len() != replicas {
                    return Ok(None);
                }
                Ok(self
                    .leader()?
                    .filter(|l| last.iter().any(|p| &p.name == l))
                    .map(|l| (last.clone(), l)))
            },
        )
        .with_context(|| {
            let states: Vec<String> = last
                .iter()
                .map(|p| format!("{} {} ready={} node={}", p.name, p.phase, p.ready, p.node))
                .collect();
            format!("vpcnet-targets pods now: {}", states.join("; "))
        })
    }

    /// `kubectl logs` of pod `name`.
    pub fn logs(&self, name: &str) -> Result<String> {
        let k = self.lab.kube().kubectl()?;
        let out = k.output(&["logs", "-n", NAMESPACE, name], None)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_set_the_image_the_endpoint_and_the_credentials() {
        let v = values(
            "localhost/vpcnet/vpcnet-targets:0.1.0",
            "http://10.0.1.1:8080",
            &TargetsChartOptions::default(),
        );
        assert_eq!(
            v["image"]["override"],
            "localhost/vpcnet/vpcnet-targets:0.1.0"
        );
        assert_eq!(v["image"]["pullPolicy"], "Never");
        assert_eq!(v["elbv2Endpoint"], "http://10.0.1.1:8080");
        assert_eq!(v["region"], daemon::REGION);
        let env = v["extraEnv"].as_array().unwrap();
        let get = |k: &str| {
            env.iter()
                .find(|e| e["name"] == k)
                .map(|e| e["value"].clone())
        };
        assert!(get("AWS_ACCESS_KEY_ID").is_some());
        assert!(get("AWS_SECRET_ACCESS_KEY").is_some());
        assert!(get("AWS_EC2_ENDPOINT").is_none());
    }
}
