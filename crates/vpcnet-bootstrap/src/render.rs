//! The pure core: settings + cluster + instance facts → the files to write. No I/O.

use serde_json::{json, Value};

use crate::cluster::{uses_external_provider, Cluster};
use crate::cluster_dns::cluster_dns;
use crate::containerd;
use crate::credential_provider::{self, Provider};
use crate::hosts::with_apiserver_entries;
use crate::instance_facts::InstanceFacts;
use crate::kubelet_config::{base_kubelet_config, kubeconfig, merge, to_json};
use crate::kubelet_unit::{self, Layout, UnitChoice, VpcnetUnitOptions};
use crate::max_pods::LimitsSource;
use crate::max_pods_expr::Vars;
use crate::node_files::{
    NodeFile, BOOTSTRAP_KUBECONFIG_PATH, CA_PATH, CONTAINERD_SOCKET, DROPIN_DIR, HOSTS_PATH,
    KUBECONFIG_PATH, KUBELET_CONFIG_PATH,
};
use crate::reserved;
use crate::settings::Settings;
use crate::startup;
use crate::systemd;
use crate::version::KubeletVersion;

/// Kubelet's own default when nobody sets max pods.
const KUBELET_DEFAULT_MAX_PODS: u32 = 110;

/// Where the max pods in effect comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxPodsOrigin {
    /// `--max-pods` in the extra kubelet flags (flags beat the config file).
    ExtraArgs,
    /// `maxPods` in NodeConfig `kubelet.config`.
    NodeConfig,
    /// NodeConfig `kubelet.maxPodsExpression` over the instance type's limits.
    Expression,
    /// Computed from the instance type's ENI limits.
    InstanceType(LimitsSource),
    /// Nothing set: kubelet's default.
    KubeletDefault,
}

impl std::fmt::Display for MaxPodsOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MaxPodsOrigin::ExtraArgs => "--max-pods in the extra kubelet flags",
            MaxPodsOrigin::NodeConfig => "maxPods in NodeConfig kubelet.config",
            MaxPodsOrigin::Expression => "NodeConfig kubelet.maxPodsExpression",
            MaxPodsOrigin::InstanceType(LimitsSource::Table) => "instance type, vpcnet's table",
            MaxPodsOrigin::InstanceType(LimitsSource::Ec2) => {
                "instance type, EC2 DescribeInstanceTypes"
            }
            MaxPodsOrigin::InstanceType(LimitsSource::Fallback) => {
                "instance type unknown, fallback"
            }
            MaxPodsOrigin::KubeletDefault => "kubelet default",
        })
    }
}

/// The result of [`render`]: files in write order, what start-up needs, and warnings.
#[derive(Debug, Clone)]
pub struct Plan {
    pub files: Vec<NodeFile>,
    pub warnings: Vec<String>,
    /// Max pods kubelet will run with, and where it comes from.
    pub max_pods: u32,
    pub max_pods_origin: MaxPodsOrigin,
    /// `external` or `aws`.
    pub cloud_provider: &'static str,
    /// The pause image containerd and kubelet use.
    pub sandbox_image: String,
    /// The bpffs mount unit is part of the plan (start it after writing).
    pub mount_bpffs: bool,
    /// The kubelet unit installed or kept, and why (its `Display` says).
    pub kubelet_unit: UnitChoice,
    /// What is done about the ECR credential provider.
    pub credential_provider: Provider,
    /// A `sandbox-image.service` runs on the node (restarted with containerd).
    pub sandbox_image_service: bool,
}

/// Renders every file bootstrap writes. Deterministic: the same inputs give the same bytes.
///
/// Files: kubelet config JSON, CA, kubeconfig (or the bootstrap kubeconfig on Outposts),
/// vpcnet's kubelet unit, drop-ins 10-kubelet-args.conf (`KUBELET_ARGS`, the cloud provider
/// included), 20-kubelet-cloud-provider.conf (`KUBELET_CLOUD_PROVIDER`, for units that read
/// it) and 30-kubelet-extra-args.conf (present only with extra args; otherwise a stale one is
/// removed), containerd's config, the bpffs mount unit (when bpffs is to be mounted), and
/// /etc/hosts on Outposts. `warnings` (from resolving the cluster) lead the plan's warnings.
pub fn render(s: &Settings, c: &Cluster, f: &InstanceFacts, warnings: Vec<String>) -> Plan {
    let mut warnings = [s.warnings.clone(), warnings].concat();
    let external = uses_external_provider(c, f.kubelet_version);
    let cloud_provider = if external { "external" } else { "aws" };
    let v = f.kubelet_version;

    // Max pods actually in effect: kubelet flags beat its config file.
    let instance_type = (
        f.max_pods.max_pods,
        MaxPodsOrigin::InstanceType(f.max_pods.source),
    );
    // NodeConfig maxPodsExpression, evaluated as nodeadm does whatever overrides it: nodeadm
    // computes kube-reserved memory from it. `(value, evaluated)`; a failure falls back to the
    // instance type's value, with a warning.
    let expression = s.max_pods.expression.as_ref().map(|expr| {
        let evaluated = match &f.max_pods.limits {
            Some(l) => expr.eval(Vars {
                default_enis: i64::from(l.eni_limit),
                ips_per_eni: i64::from(l.ipv4_per_eni),
                max_pods: i64::from(f.max_pods.max_pods),
            }),
            None => Err("the instance type's limits are unknown".to_string()),
        };
        evaluated.map(|n| (n, true)).unwrap_or_else(|e| {
            warnings.push(format!(
                "NodeConfig kubelet.maxPodsExpression {:?}: {e}; using {} max pods from the instance type instead (as nodeadm does)",
                expr.text(),
                instance_type.0
            ));
            (instance_type.0, false)
        })
    });
    let (max_pods, max_pods_origin) = if let Some(n) = s.max_pods_flag {
        (n, MaxPodsOrigin::ExtraArgs)
    } else if let Some(n) = s.max_pods_config {
        (n, MaxPodsOrigin::NodeConfig)
    } else if !s.use_max_pods {
        (KUBELET_DEFAULT_MAX_PODS, MaxPodsOrigin::KubeletDefault)
    } else {
        match expression {
            Some((n, true)) => (n, MaxPodsOrigin::Expression),
            _ => instance_type,
        }
    };
    // kube-reserved memory: for the max pods in effect, except under maxPodsExpression,
    // where nodeadm takes the expression's value even when kubelet.config.maxPods (or a flag)
    // overrides it; vpcnet does the same, and says so when the two differ.
    let reserved_for = match expression {
        Some((n, _)) => {
            if n != max_pods {
                warnings.push(format!(
                    "kube-reserved memory is computed for {n} pods from NodeConfig kubelet.maxPodsExpression (as nodeadm does), while kubelet runs with max pods {max_pods} from {max_pods_origin}"
                ));
            }
            n
        }
        None => max_pods,
    };
    if let (MaxPodsOrigin::InstanceType(LimitsSource::Fallback), Some(w)) =
        (max_pods_origin, &f.max_pods.warning)
    {
        warnings.push(w.clone());
    }
    let sandbox_image = containerd::sandbox_image(
        s.pause.image.as_deref(),
        s.pause.account.as_deref(),
        &s.pause.version,
        &f.region,
        &f.services_domain,
    );

    let mut files = Vec::new();

    // Kubelet config.
    let mut cfg = base_kubelet_config(v);
    let dns: Vec<String> = cluster_dns(s.dns_cluster_ips.as_deref(), c, &f.vpc_ipv4_cidrs)
        .iter()
        .map(|ip| ip.to_string())
        .collect();
    cfg.insert("clusterDNS".into(), json!(dns));
    cfg.insert(
        "kubeReserved".into(),
        json!({
            "cpu": format!("{}m", reserved::cpu_millicores_to_reserve(f.vcpus)),
            "ephemeral-storage": reserved::EPHEMERAL_STORAGE_TO_RESERVE,
            "memory": format!("{}Mi", reserved::memory_mebibytes_to_reserve(reserved_for)),
        }),
    );
    cfg.insert(
        "evictionHard".into(),
        Value::Object(
            reserved::EVICTION_HARD
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect(),
        ),
    );
    if !s.reserved_cpus_flag {
        cfg.insert("kubeReservedCgroup".into(), json!("/runtime"));
        cfg.insert("systemReservedCgroup".into(), json!("/system"));
    }
    if s.use_max_pods {
        cfg.insert("maxPods".into(), json!(max_pods));
    }
    if external {
        cfg.insert(
            "providerID".into(),
            json!(format!("aws:///{}/{}", f.availability_zone, f.instance_id)),
        );
    }
    let mut cfg = Value::Object(cfg);
    merge(&mut cfg, &Value::Object(s.kubelet_config_overrides.clone()));
    files.push(NodeFile {
        path: KUBELET_CONFIG_PATH.into(),
        content: Some(to_json(&cfg)),
        mode: 0o644,
    });

    // CA and kubeconfig.
    files.push(NodeFile {
        path: CA_PATH.into(),
        content: Some(c.ca_pem.clone()),
        mode: 0o644,
    });
    let (kubeconfig_path, kubeconfig_cluster) = match &c.outpost_cluster_id {
        Some(id) => (BOOTSTRAP_KUBECONFIG_PATH, id.as_str()),
        None => (KUBECONFIG_PATH, s.cluster_name.as_str()),
    };
    files.push(NodeFile {
        path: kubeconfig_path.into(),
        content: Some(kubeconfig(&c.endpoint, kubeconfig_cluster, &f.region)),
        mode: 0o644,
    });

    // The kubelet unit and how vpcnet's settings reach kubelet through it.
    let provider = Provider::new(
        f.credential_provider_binary,
        f.credential_provider_config.as_deref(),
        v,
    );
    if provider == Provider::Absent && v >= KubeletVersion::new(1, 27, 0) {
        warnings.push(format!(
            "no ecr-credential-provider at {}: kubelet (>= 1.27 has no built-in ECR credentials) cannot pull images from private ECR repositories. Fix: install ecr-credential-provider (kubernetes/cloud-provider-aws) there and rerun",
            credential_provider::BIN_PATH
        ));
    }
    if let Provider::WriteConfig(text) = &provider {
        files.push(NodeFile {
            path: credential_provider::CONFIG_PATH.into(),
            content: Some(text.clone()),
            mode: 0o644,
        });
    }
    let unit = &f.kubelet_unit;
    match unit {
        UnitChoice::AmiCopied {
            text,
            sandbox_image,
            ..
        } => {
            files.push(NodeFile {
                path: systemd::KUBELET_UNIT_PATH.into(),
                content: Some(text.clone()),
                mode: 0o644,
            });
            if let Some(t) = sandbox_image {
                files.push(NodeFile {
                    path: kubelet_unit::SANDBOX_IMAGE_UNIT_PATH.into(),
                    content: Some(t.clone()),
                    mode: 0o644,
                });
            }
        }
        UnitChoice::AmiKept { .. } => {}
        UnitChoice::Vpcnet { .. } => files.push(NodeFile {
            path: systemd::KUBELET_UNIT_PATH.into(),
            content: Some(kubelet_unit::vpcnet_unit(VpcnetUnitOptions {
                credential_provider: provider != Provider::Absent,
                sandbox_image: f.sandbox_image_service,
            })),
            mode: 0o644,
        }),
    }
    // Flags an AMI unit does not pass itself (vpcnet's unit passes all of them).
    let mut args: Vec<String> = Vec::new();
    if !matches!(unit, UnitChoice::Vpcnet { .. }) {
        let mut fixed = vec![
            format!("--config={KUBELET_CONFIG_PATH}"),
            format!("--kubeconfig={KUBECONFIG_PATH}"),
            format!("--container-runtime-endpoint={CONTAINERD_SOCKET}"),
        ];
        fixed.extend(provider.flags());
        for flag in fixed {
            let name = flag.split('=').next().unwrap_or_default();
            if !unit.unit_passes(name) {
                args.push(flag);
            }
        }
    }
    args.push(format!("--node-ip={}", f.node_ip));
    if v < KubeletVersion::new(1, 35, 0) {
        // Kubelet 1.35 removed the flag (the runtime's sandbox image is what counts).
        args.push(format!("--pod-infra-container-image={sandbox_image}"));
    }
    if external {
        let name = if s.instance_id_node_name {
            Some(&f.instance_id)
        } else {
            f.private_dns_name.as_ref()
        };
        if let Some(name) = name {
            args.push(format!("--hostname-override={name}"));
        }
    }
    args.push(format!("--cloud-provider={cloud_provider}"));
    if v < KubeletVersion::new(1, 27, 0) {
        args.push("--container-runtime=remote".into());
    }
    let mut extra = Vec::new();
    if c.outpost_cluster_id.is_some() {
        extra.push(format!(
            "--bootstrap-kubeconfig {BOOTSTRAP_KUBECONFIG_PATH}"
        ));
    }
    if !s.kubelet_extra_args.is_empty() {
        extra.push(s.kubelet_extra_args.clone());
    }
    let absent = |name: &str| NodeFile {
        path: format!("{DROPIN_DIR}/{name}"),
        content: None,
        mode: 0o644,
    };
    match unit.layout() {
        Layout::KubeletArgs => {
            files.push(dropin(
                "10-kubelet-args.conf",
                "KUBELET_ARGS",
                &args.join(" "),
            ));
            files.push(dropin(
                "20-kubelet-cloud-provider.conf",
                "KUBELET_CLOUD_PROVIDER",
                cloud_provider,
            ));
            files.push(if extra.is_empty() {
                absent("30-kubelet-extra-args.conf")
            } else {
                dropin(
                    "30-kubelet-extra-args.conf",
                    "KUBELET_EXTRA_ARGS",
                    &extra.join(" "),
                )
            });
        }
        Layout::NodeadmEnvironment => {
            // The unit reads no drop-in variable: everything goes to its environment file,
            // the extra flags last so that they win (as nodeadm orders them). nodeadm also
            // points cAdvisor at containerd, which the AL2023 AMI runs in runtime.slice.
            args.push("--runtime-cgroups=/runtime.slice/containerd.service".into());
            args.extend(extra);
            files.push(NodeFile {
                path: kubelet_unit::NODEADM_ENVIRONMENT_PATH.into(),
                content: Some(kubelet_unit::nodeadm_environment(&args.join(" "))),
                mode: 0o644,
            });
            for name in [
                "10-kubelet-args.conf",
                "20-kubelet-cloud-provider.conf",
                "30-kubelet-extra-args.conf",
            ] {
                files.push(absent(name));
            }
        }
    }

    // containerd.
    let containerd_config = match &s.containerd_file {
        Some(file) => file
            .text
            .replace(containerd::SANDBOX_PLACEHOLDER, &sandbox_image),
        None => containerd::default_config(&sandbox_image),
    };
    files.push(NodeFile {
        path: containerd::CONFIG_PATH.into(),
        content: Some(containerd_config),
        mode: 0o644,
    });

    // bpffs.
    let mount_bpffs = s.mount_bpf_fs && !f.bpffs_mounted;
    if mount_bpffs {
        files.push(NodeFile {
            path: startup::BPF_MOUNT_UNIT_PATH.into(),
            content: Some(startup::BPF_MOUNT_UNIT_TEXT.into()),
            mode: 0o644,
        });
    }

    // /etc/hosts on Outposts.
    if c.outpost_cluster_id.is_some() {
        let existing = f.existing_hosts.clone().unwrap_or_default();
        files.push(NodeFile {
            path: HOSTS_PATH.into(),
            content: Some(with_apiserver_entries(
                &existing,
                &c.apiserver_host,
                &f.apiserver_ips,
                &f.instance_id,
            )),
            mode: 0o644,
        });
    }

    Plan {
        files,
        warnings,
        max_pods,
        max_pods_origin,
        cloud_provider,
        sandbox_image,
        mount_bpffs,
        kubelet_unit: f.kubelet_unit.clone(),
        credential_provider: provider,
        sandbox_image_service: f.sandbox_image_service,
    }
}

/// A kubelet drop-in setting one environment variable to exactly `value` (quoted and escaped
/// for systemd by [`systemd::environment_assignment`]; line breaks were replaced by
/// [`Settings::new`]).
fn dropin(name: &str, var: &str, value: &str) -> NodeFile {
    NodeFile {
        path: format!("{DROPIN_DIR}/{name}"),
        content: Some(format!(
            "# Written by vpcnet-bootstrap; rerunning it rewrites this file.\n[Service]\nEnvironment={}\n",
            systemd::environment_assignment(var, value)
        )),
        mode: 0o644,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropin_escapes_systemd_specifiers() {
        let f = dropin("30-x.conf", "V", "--a=50% --b=c\\d");
        assert!(f
            .content
            .unwrap()
            .contains("Environment='V=--a=50%% --b=c\\\\d'"));
        let f = dropin("30-x.conf", "V", "--a=50% --b=c\\d --l='x y'");
        assert!(f
            .content
            .unwrap()
            .contains("Environment=\"V=--a=50%% --b=c\\\\d --l='x y'\""));
    }
}

#[cfg(test)]
#[path = "render_plan_tests.rs"]
mod plan_tests;
