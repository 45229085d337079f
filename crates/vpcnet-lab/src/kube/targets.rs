//! The target controller (`vpcnet-targets`) on the lab cluster: its CRD, the controller run as
//! a recorded lab process in the VPC namespace (where both the API server and the lab cloud's
//! ELBv2 endpoint are reachable; tests kill and restart it at will; installed by its chart as
//! an in-cluster Deployment instead: [`super::targets_chart`]), and a gated `httpd`
//! Deployment + Service + TargetGroupBinding.
//!
//! Lossless rollouts (the settings [`gated_httpd_manifest`] uses): the pod lists the readiness
//! gate `target-health.elbv2.k8s.aws/<binding>`, so a new pod turns Ready (and the Deployment
//! goes on, `maxUnavailable: 0`) only once the load balancer reports its target healthy; a
//! terminating pod is deregistered as soon as it gets its deletion timestamp, and its `preStop`
//! sleep ([`PRE_STOP_SECONDS`]) keeps it serving while the load balancer stops sending new
//! connections (drain), well within `terminationGracePeriodSeconds`. In the label-selector
//! mode there is no gate: `minReadySeconds` ([`MIN_READY_SECONDS`], longer than a new target
//! takes to turn healthy) holds the rollout instead ([`selected_httpd_manifest`]).

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cloud::aws_env;
use crate::image;
use crate::lab::Lab;
use crate::lbctl::LbSettings;
use crate::procs::ProcRecord;
use crate::spawn::Place;

/// The TargetGroupBinding CRD (`charts/vpcnet-targets/crds/targetgroupbinding.yaml`).
pub const TARGETGROUPBINDING_CRD: &str =
    include_str!("../../../../charts/vpcnet-targets/crds/targetgroupbinding.yaml");
/// Its name, for `kubectl wait`.
pub const TARGETGROUPBINDING_CRD_NAME: &str = "targetgroupbindings.elbv2.k8s.aws";
/// `preStop` sleep of the gated pods: longer than the controller's reaction (deletion
/// timestamp → DeregisterTargets → HAProxy `drain`, well under a second in the lab).
pub const PRE_STOP_SECONDS: u32 = 5;
/// `terminationGracePeriodSeconds` of the gated pods (covers the preStop sleep).
pub const GRACE_SECONDS: u32 = 20;

/// How to run the controller.
#[derive(Debug, Clone)]
pub struct TargetsOptions {
    /// Role name in the lab state (`vpcnet-targets`, or one per replica).
    pub role: String,
    /// `--resync-seconds`.
    pub resync_seconds: u64,
    /// `--http-addr` port (on 127.0.0.1 of the VPC namespace).
    pub http_port: u16,
    /// More arguments.
    pub extra_args: Vec<String>,
    /// Access key ID it signs with (the request log records it, so its calls can be told from
    /// the lab's own); the lab's key when `None`.
    pub access_key: Option<String>,
}

impl Default for TargetsOptions {
    fn default() -> Self {
        TargetsOptions {
            role: "vpcnet-targets".into(),
            resync_seconds: 60,
            http_port: 61779,
            extra_args: vec![],
            access_key: None,
        }
    }
}

/// A Deployment `name` of `replicas` busybox `httpd` pods (page "hello from <pod>",
/// `version` in the pod template so a new value rolls the Deployment) gated by binding `name`,
/// spread over the nodes (`maxSkew` 1), a Service `name` (port 80), and a TargetGroupBinding
/// `name` (type ip) to `target_group_arn`. See the module docs for the rollout settings.
pub fn gated_httpd_manifest(
    name: &str,
    replicas: u32,
    version: u32,
    target_group_arn: &str,
) -> String {
    let deploy = httpd_deployment(name, replicas, version, true);
    let svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 80}]},
    });
    let tgb = serde_json::json!({
        "apiVersion": "elbv2.k8s.aws/v1beta1", "kind": "TargetGroupBinding",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"targetGroupARN": target_group_arn, "targetType": "ip",
                 "serviceRef": {"name": name, "port": 80}},
    });
    format!("{deploy}\n---\n{svc}\n---\n{tgb}\n")
}

/// `minReadySeconds` of [`selected_httpd_manifest`]: longer than a new target takes to turn
/// healthy (health-check interval × healthy threshold + the first check's offset), so the
/// rollout removes an old pod only once its replacement serves.
pub const MIN_READY_SECONDS: u32 = 15;

/// The network load balancer the target-controller tests and `bench-targets` put in front of
/// the `httpd` pods: TCP 80 → 80, health check every 5 s (2 s timeout, 2 passes to turn
/// healthy, 2 failures to turn unhealthy), deregistration delay 5 s — what
/// [`PRE_STOP_SECONDS`] and [`MIN_READY_SECONDS`] are sized for.
pub fn httpd_nlb(name: &str) -> LbSettings {
    LbSettings {
        name: name.into(),
        lb_type: vpcnet_elbv2::LoadBalancerType::Network,
        port: 80,
        target_port: 80,
        health: vpcnet_elbv2::HealthCheck {
            interval_seconds: Some(5),
            timeout_seconds: Some(2),
            healthy_threshold: Some(2),
            unhealthy_threshold: Some(2),
            ..vpcnet_elbv2::HealthCheck::default()
        },
        deregistration_delay: Some(5),
    }
}

/// The Deployment of [`gated_httpd_manifest`] for the label-selector mode: no readiness gate
/// (no binding), `minReadySeconds` [`MIN_READY_SECONDS`] instead; pods labelled `app=<name>`.
pub fn selected_httpd_manifest(name: &str, replicas: u32, version: u32) -> String {
    let mut d = httpd_deployment(name, replicas, version, false);
    d["spec"]["minReadySeconds"] = MIN_READY_SECONDS.into();
    format!("{d}\n")
}

fn httpd_deployment(name: &str, replicas: u32, version: u32, gate: bool) -> serde_json::Value {
    let mut deploy = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "readinessGates": [{"conditionType": format!("target-health.elbv2.k8s.aws/{name}")}],
                    "containers": [{
                        "name": "httpd",
                        "image": image::IMAGE_REF,
                        "imagePullPolicy": "Never",
                        "env": [{"name": "VERSION", "value": version.to_string()}],
                        "command": ["sh", "-c",
                            "mkdir -p /www && echo \"hello from $(hostname) v$VERSION\" > /www/index.html && exec httpd -f -p 80 -h /www"],
                        "ports": [{"containerPort": 80}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 1},
                        "lifecycle": {"preStop": {"exec": {"command": ["sleep", PRE_STOP_SECONDS.to_string()]}}},
                    }],
                    "terminationGracePeriodSeconds": GRACE_SECONDS,
                    "automountServiceAccountToken": false,
                    "topologySpreadConstraints": [{
                        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {"app": name}},
                    }],
                },
            },
        },
    });
    if !gate {
        if let Some(o) = deploy["spec"]["template"]["spec"].as_object_mut() {
            o.remove("readinessGates");
        }
    }
    deploy
}

/// vpcnet-targets, vpcnet's target controller, in the lab ([`Lab::targets_controller`]).
#[derive(Debug, Clone, Copy)]
pub struct TargetsController<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// vpcnet-targets in the lab.
    pub fn targets_controller(&self) -> TargetsController<'_> {
        TargetsController { lab: self }
    }
}

impl TargetsController<'_> {
    /// Installs the TargetGroupBinding CRD and waits until it is established.
    pub fn install_crd(&self) -> Result<()> {
        let k = self.lab.kube().kubectl()?;
        k.apply(TARGETGROUPBINDING_CRD)?;
        k.run(&[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            &format!("crd/{TARGETGROUPBINDING_CRD_NAME}"),
        ])?;
        Ok(())
    }

    /// Starts `vpcnet-targets` as a recorded lab process in the VPC namespace, with the admin
    /// kubeconfig and the lab cloud's ELBv2 endpoint (log: `logs/<role>.log`).
    pub fn start(&self, o: &TargetsOptions) -> Result<ProcRecord> {
        let s = self.lab.state()?;
        let vpc = s
            .namespaces
            .first()
            .cloned()
            .context("the lab has no VPC namespace")?;
        let cp = self.lab.kube().control_plane()?;
        let ep = self.lab.cloud().endpoint()?;
        let mut c = Command::new(self.lab.bin_dir().join("vpcnet-targets"));
        c.args([
            "--resync-seconds",
            &o.resync_seconds.to_string(),
            "--http-addr",
            &format!("127.0.0.1:{}", o.http_port),
            "--identity",
            &o.role,
            "--elbv2-endpoint",
            &ep,
        ]);
        c.args(&o.extra_args);
        c.envs(aws_env(&ep));
        if let Some(key) = &o.access_key {
            c.env("AWS_ACCESS_KEY_ID", key);
        }
        c.env("KUBECONFIG", &cp.admin_kubeconfig);
        c.env("RUST_LOG", "info,kube=warn,vpcnet_targets=debug");
        c.env("RUST_BACKTRACE", "0");
        self.lab.processes().start(&o.role, c, &Place::netns(&vpc))
    }

    /// Waits (`timeout`) until the controller logged that its caches synced.
    pub fn wait_synced(&self, role: &str, timeout: Duration) -> Result<()> {
        let log = self.lab.processes().log(role);
        crate::wait::wait_for(&format!("{role} to sync its caches"), timeout, || {
            Ok(std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("caches synced")
                .then_some(()))
        })
        .with_context(|| format!("{}:\n{}", log.display(), crate::wait::log_tail(&log)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_gates_pods_and_binds_the_service() {
        let m = gated_httpd_manifest("web", 4, 2, "arn:tg");
        let docs: Vec<serde_json::Value> = m
            .split("\n---\n")
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect();
        let pod = &docs[0]["spec"]["template"]["spec"];
        assert_eq!(
            pod["readinessGates"][0]["conditionType"],
            "target-health.elbv2.k8s.aws/web"
        );
        assert_eq!(
            docs[0]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            0
        );
        assert_eq!(docs[2]["kind"], "TargetGroupBinding");
        assert_eq!(docs[2]["spec"]["targetGroupARN"], "arn:tg");
        const { assert!(PRE_STOP_SECONDS < GRACE_SECONDS) };
    }
}
