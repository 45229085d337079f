//! Tests of [`super::render`] over whole plans: max pods, kube-reserved, kubelet defaults,
//! and kubelet's command line from the files written.

use super::*;
use crate::args::BootstrapArgs;
use crate::instance_facts::InstanceFacts;
use crate::max_pods::ResolvedMaxPods;
use crate::node_config::NodeConfig;
use crate::systemd::{kubelet_command_line, Unit};
use clap::Parser;

fn facts(computed: u32, kubelet: KubeletVersion) -> InstanceFacts {
    InstanceFacts {
        instance_type: "m5.large".into(),
        instance_id: "i-1".into(),
        availability_zone: "us-east-1a".into(),
        region: "us-east-1".into(),
        mac: "0a:00:00:00:00:01".into(),
        node_ip: "10.0.0.5".parse().unwrap(),
        vpc_ipv4_cidrs: vec!["10.0.0.0/16".into()],
        private_dns_name: Some("ip-10-0-0-5.ec2.internal".into()),
        services_domain: "amazonaws.com".into(),
        bpffs_mounted: false,
        max_pods: ResolvedMaxPods {
            instance_type: "m5.large".into(),
            max_pods: computed,
            source: LimitsSource::Table,
            limits: vpcnet_limits::lookup("m5.large").cloned(),
            report: None,
            warning: None,
        },
        vcpus: 2,
        kubelet_version: kubelet,
        apiserver_ips: vec![],
        existing_hosts: None,
        kubelet_unit: UnitChoice::Vpcnet { replaces: None },
        sandbox_image_service: false,
        credential_provider_binary: false,
        credential_provider_config: None,
    }
}

fn plan_for(extra: &[&str], config: Option<&str>, kubelet: KubeletVersion) -> (Plan, Value) {
    let mut argv = vec![
        "b",
        "c",
        "--apiserver-endpoint",
        "https://x.example",
        "--b64-cluster-ca",
    ];
    let ca = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";
    argv.push(ca);
    argv.extend_from_slice(extra);
    let args = BootstrapArgs::try_parse_from(argv).unwrap();
    let nc = config.map(|c| NodeConfig::parse("t", c).unwrap());
    let s = Settings::new(&args, nc.as_ref(), None).unwrap();
    let (cluster, w) = s.cluster.resolve(None).unwrap();
    let p = render(&s, &cluster, &facts(29, kubelet), w);
    let cfg = serde_json::from_str(p.files[0].content.as_ref().unwrap()).unwrap();
    (p, cfg)
}

fn plan(extra: &[&str], config: Option<&str>) -> (Plan, Value) {
    plan_for(extra, config, KubeletVersion::new(1, 31, 0))
}

/// Writes the plan's files under a fresh root.
fn written(p: &Plan) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    crate::output::apply(root.path(), &p.files).unwrap();
    root
}

const NC_MAX_PODS_40: &str =
    "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 40\n";

#[test]
fn max_pods_in_effect() {
    let (p, cfg) = plan(&[], None);
    assert_eq!(
        (
            p.max_pods,
            cfg["maxPods"].as_u64(),
            cfg["kubeReserved"]["memory"].as_str()
        ),
        (29, Some(29), Some("574Mi"))
    );

    // NodeConfig kubelet.config beats the computed value.
    let (p, cfg) = plan(&[], Some(NC_MAX_PODS_40));
    assert_eq!(
        (
            p.max_pods_origin,
            cfg["maxPods"].as_u64(),
            cfg["kubeReserved"]["memory"].as_str()
        ),
        (MaxPodsOrigin::NodeConfig, Some(40), Some("695Mi"))
    );

    // A kubelet flag beats both (kubelet flags override its config file).
    let (p, cfg) = plan(
        &["--kubelet-extra-args", "--max-pods 50"],
        Some(NC_MAX_PODS_40),
    );
    assert_eq!(
        (
            p.max_pods_origin,
            p.max_pods,
            cfg["kubeReserved"]["memory"].as_str()
        ),
        (MaxPodsOrigin::ExtraArgs, 50, Some("805Mi"))
    );

    // --use-max-pods false and nothing set: kubelet's default 110, no maxPods written.
    let (p, cfg) = plan(&["--use-max-pods", "false"], None);
    assert_eq!(
        (
            p.max_pods_origin,
            cfg.get("maxPods"),
            cfg["kubeReserved"]["memory"].as_str()
        ),
        (MaxPodsOrigin::KubeletDefault, None, Some("1465Mi"))
    );
}

#[test]
fn max_pods_expression_like_nodeadm_and_kube_reserved_from_the_expression() {
    let nc = |body: &str| {
        format!("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n{body}")
    };
    // m5.large: 3 ENIs × (10 − 1) + 2 = 29; with one ENI reserved 20.
    let (p, cfg) = plan(
        &[],
        Some(&nc(
            "    maxPodsExpression: ((default_enis - 1) * (ips_per_eni - 1)) + 2\n",
        )),
    );
    assert_eq!(
        (
            p.max_pods_origin,
            cfg["maxPods"].as_u64(),
            cfg["kubeReserved"]["memory"].as_str()
        ),
        (MaxPodsOrigin::Expression, Some(20), Some("475Mi"))
    );
    // kubelet.config.maxPods wins over the expression, but kube-reserved memory is the
    // expression's (29 + 2 = 31 pods: 596Mi), as nodeadm computes it (its e2e case
    // custom-max-pods-expression/kubelet-config-max-pods), with a warning.
    let (p, cfg) = plan(
        &[],
        Some(&nc(
            "    maxPodsExpression: max_pods + 2\n    config:\n      maxPods: 1\n",
        )),
    );
    assert_eq!(
        (
            p.max_pods_origin,
            cfg["maxPods"].as_u64(),
            cfg["kubeReserved"]["memory"].as_str()
        ),
        (MaxPodsOrigin::NodeConfig, Some(1), Some("596Mi"))
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("computed for 31 pods") && w.contains("max pods 1")),
        "{:?}",
        p.warnings
    );
    // The same under a --max-pods flag (which the config file follows, as kubelet would).
    let (_, cfg) = plan(
        &["--kubelet-extra-args", "--max-pods=7"],
        Some(&nc("    maxPodsExpression: max_pods + 2\n")),
    );
    assert_eq!(
        (
            cfg["maxPods"].as_u64(),
            cfg["kubeReserved"]["memory"].as_str()
        ),
        (Some(7), Some("596Mi"))
    );
    // An expression that does not evaluate falls back to the instance type, with a warning.
    let (p, cfg) = plan(&[], Some(&nc("    maxPodsExpression: max_pods - 1000\n")));
    assert_eq!(cfg["maxPods"].as_u64(), Some(29));
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("not a positive number")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn reserved_cpus_flag_drops_reserved_cgroups() {
    let (_, cfg) = plan(&["--kubelet-extra-args", "--reserved-cpus=0-1"], None);
    assert!(cfg.get("kubeReservedCgroup").is_none() && cfg.get("systemReservedCgroup").is_none());
    let (_, cfg) = plan(&[], None);
    assert_eq!(cfg["kubeReservedCgroup"], "/runtime");
}

#[test]
fn ami_cipher_suites_verbosity_and_version_defaults() {
    let (_, cfg) = plan(&[], None);
    assert_eq!(cfg["tlsCipherSuites"].as_array().unwrap().len(), 8);
    assert!(cfg["tlsCipherSuites"]
        .as_array()
        .unwrap()
        .contains(&json!("TLS_RSA_WITH_AES_256_GCM_SHA384")));
    assert_eq!(cfg["logging"]["verbosity"], 2);
    assert!(cfg.get("shutdownGracePeriod").is_none());
    assert!(cfg["featureGates"]
        .get("DynamicResourceAllocation")
        .is_none());

    let (_, cfg) = plan_for(&[], None, KubeletVersion::new(1, 33, 1));
    assert_eq!(cfg["featureGates"]["DynamicResourceAllocation"], true);
    assert!(cfg["featureGates"]
        .get("MutableCSINodeAllocatableCount")
        .is_none());

    let (_, cfg) = plan_for(&[], None, KubeletVersion::new(1, 34, 0));
    assert_eq!(cfg["featureGates"]["MutableCSINodeAllocatableCount"], true);
    assert_eq!(
        (
            cfg["shutdownGracePeriod"].as_str(),
            cfg["shutdownGracePeriodCriticalPods"].as_str()
        ),
        (Some("2m30s"), Some("30s"))
    );

    // NodeConfig's verbosity wins, and no --v flag overrides it on the command line.
    let nc = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      logging: {verbosity: 5}\n";
    let (p, cfg) = plan(&[], Some(nc));
    assert_eq!(cfg["logging"]["verbosity"], 5);
    let root = written(&p);
    let argv = kubelet_command_line(root.path(), Unit::Installed).unwrap();
    assert!(
        !argv.iter().any(|a| a.starts_with("--v=") || a == "-v"),
        "{argv:?}"
    );
}

/// The AL2 AMI's containerd unit (test data, see tests/ami/README.md).
const AL2_UNIT: &str = include_str!("../tests/ami/al2/kubelet-containerd.service");

/// The cloud provider reaches kubelet exactly once whichever unit runs it: vpcnet's, or
/// the AL2 AMI's (reads only `$KUBELET_ARGS $KUBELET_EXTRA_ARGS`), and every flag of the
/// drop-ins arrives as the intended argument (quotes in extra args included).
#[test]
fn cloud_provider_reaches_kubelet_on_every_unit_layout() {
    let (p, _) = plan(
        &[
            "--kubelet-extra-args",
            "--node-labels='team=a b' --register-with-taints=x=y:NoSchedule",
        ],
        None,
    );
    let root = written(&p);
    for unit in [Unit::Text(AL2_UNIT.into()), Unit::Installed] {
        let argv = kubelet_command_line(root.path(), unit.clone()).unwrap();
        let cp: Vec<&String> = argv
            .iter()
            .filter(|a| a.starts_with("--cloud-provider"))
            .collect();
        assert_eq!(cp, ["--cloud-provider=external"], "{unit:?}: {argv:?}");
        for want in [
            "--node-ip=10.0.0.5",
            "--hostname-override=ip-10-0-0-5.ec2.internal",
            "--pod-infra-container-image=602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/pause:3.5",
            "--node-labels=team=a b",
            "--register-with-taints=x=y:NoSchedule",
        ] {
            assert!(argv.iter().any(|a| a == want), "{unit:?} lacks {want}: {argv:?}");
        }
    }
    // The installed unit is vpcnet's (no AMI unit on this node).
    let unit =
        std::fs::read_to_string(root.path().join("etc/systemd/system/kubelet.service")).unwrap();
    assert!(unit.starts_with(kubelet_unit::VPCNET_MARKER), "{unit}");
    // A unit of late-2022 AMIs reads KUBELET_CLOUD_PROVIDER: both mentions agree.
    let old = "[Service]\nExecStart=/usr/bin/kubelet --cloud-provider $KUBELET_CLOUD_PROVIDER --config /etc/kubernetes/kubelet/kubelet-config.json $KUBELET_ARGS $KUBELET_EXTRA_ARGS\n";
    let argv = kubelet_command_line(root.path(), Unit::Text(old.into())).unwrap();
    let i = argv.iter().position(|a| a == "--cloud-provider").unwrap();
    assert_eq!(argv[i + 1], "external");
    assert!(argv.contains(&"--cloud-provider=external".to_string()));
}

#[test]
fn pod_infra_flag_stops_at_kubelet_1_35_and_instance_id_names_the_node() {
    let nc = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  featureGates:\n    InstanceIdNodeName: true\n";
    let (p, _) = plan_for(&[], Some(nc), KubeletVersion::new(1, 35, 0));
    let root = written(&p);
    let argv = kubelet_command_line(root.path(), Unit::Installed).unwrap();
    assert!(
        !argv
            .iter()
            .any(|a| a.starts_with("--pod-infra-container-image")),
        "{argv:?}"
    );
    assert!(
        argv.contains(&"--hostname-override=i-1".to_string()),
        "{argv:?}"
    );
}
