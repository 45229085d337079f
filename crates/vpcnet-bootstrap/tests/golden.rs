//! Golden-file tests: each case runs vpcnet-bootstrap against one instance in vpcnet-emu
//! (IMDSv2, EC2 and EKS through the real adapters), a fake host and a recording system, into a
//! temporary root, and compares every file with tests/golden/<case>/, together with the
//! command line, stderr, the systemctl steps of a first and a second run, and the kubelet
//! command line systemd builds from those files with the unit installed (`kubelet-argv.txt`)
//! and, for the drop-ins, under the AL2 AMI's unit (`kubelet-argv.eks-ami.txt`), one argument
//! per line. Regenerate with `UPDATE_GOLDEN=1 cargo test
//! -p vpcnet-bootstrap --test golden` and review the diff by eye.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use clap::Parser;
use common::*;
use vpcnet_bootstrap::startup::{RecordingSystem, Step};
use vpcnet_bootstrap::systemd::{kubelet_command_line, Unit};
use vpcnet_bootstrap::BootstrapArgs;
use vpcnet_emu::EksClusterSpec;
use vpcnet_limits::{Hypervisor, InstanceLimits, NetworkCard};

/// The AL2 AMI's containerd kubelet unit (tests/ami/README.md).
const AL2_UNIT: &str = include_str!("ami/al2/kubelet-containerd.service");

const ENDPOINT: &str = "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com";

struct Case {
    name: &'static str,
    args: Vec<String>,
    cloud: CloudSpec,
    vcpus: u32,
    kubelet: &'static str,
    apiserver_ips: Vec<IpAddr>,
    preseed: Vec<(&'static str, &'static str)>,
    /// The node is an EKS AMI: its files (tests/ami/<family>) are preseeded.
    ami: Option<&'static str>,
    config: Option<&'static str>,
    /// A file given to the case's flags as `{containerd}` (a containerd config.toml).
    containerd: Option<&'static str>,
    bpffs_mounted: bool,
}

impl Case {
    fn new(name: &'static str, extra: &[&str]) -> Self {
        let mut args: Vec<String> = vec![
            "my-cluster".into(),
            "--apiserver-endpoint".into(),
            ENDPOINT.into(),
            "--b64-cluster-ca".into(),
            test_ca_b64(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Case {
            name,
            args,
            cloud: CloudSpec::new("m5.large", vec!["192.168.0.0/16"]),
            vcpus: 2,
            kubelet: "Kubernetes v1.31.2-eks-7f9249a",
            apiserver_ips: vec![],
            preseed: vec![],
            ami: None,
            config: None,
            containerd: None,
            bpffs_mounted: false,
        }
    }

    /// A case whose flags are exactly `args` (no endpoint or CA added).
    fn bare(name: &'static str, args: &[&str]) -> Self {
        let mut c = Case::new(name, &[]);
        c.args = args.iter().map(|s| s.to_string()).collect();
        c
    }

    async fn run(self) {
        let root = tempfile::tempdir().unwrap();
        for (p, c) in &self.preseed {
            let f = root.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, c).unwrap();
        }
        let cfg_dir = tempfile::tempdir().unwrap();
        let containerd_path = cfg_dir.path().join("containerd.toml");
        if let Some(text) = self.containerd {
            std::fs::write(&containerd_path, text).unwrap();
        }
        let mut argv = vec!["vpcnet-bootstrap".to_string()];
        argv.extend(
            self.args
                .iter()
                .map(|a| a.replace("{containerd}", &containerd_path.display().to_string())),
        );
        if let Some(yaml) = self.config {
            let p = cfg_dir.path().join("nodeconfig.yaml");
            std::fs::write(&p, yaml).unwrap();
            argv.push("--config".into());
            argv.push(p.display().to_string());
        }
        argv.push("--root".into());
        argv.push(root.path().display().to_string());
        let args = BootstrapArgs::try_parse_from(&argv).unwrap();
        let cloud = Cloud::launch(&self.cloud).await;
        let host = FakeHost {
            vcpus: self.vcpus,
            kubelet_version: self.kubelet.into(),
            apiserver_ips: self.apiserver_ips.clone(),
            bpffs_mounted: self.bpffs_mounted,
            ..FakeHost::new(root.path())
        };

        let system = RecordingSystem::default();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        vpcnet_bootstrap::run(&args, &cloud.adapters(&host, &system), &mut out, &mut err)
            .await
            .unwrap();
        let err_text = String::from_utf8(err.clone()).unwrap();
        assert!(
            err_text.contains("kubelet unit: "),
            "{}: no kubelet unit report in {err_text}",
            self.name
        );
        let first = tree(root.path());
        let argv_of = |unit: Unit| kubelet_command_line(root.path(), unit).unwrap();
        let (installed, ami) = (
            argv_of(Unit::Installed),
            argv_of(Unit::Text(AL2_UNIT.into())),
        );
        if self.cloud.ipv6s.is_empty() {
            // The node IP is the primary ENI's address as EC2 reports it.
            let want = format!("--node-ip={}", cloud.instance.private_ip);
            assert!(
                installed.contains(&want),
                "{}: {installed:?} lacks {want}",
                self.name
            );
        }
        let checked: Vec<&Vec<String>> = if self.ami.is_none() {
            vec![&ami, &installed]
        } else {
            vec![&installed]
        };
        for argv in checked {
            let cp = argv
                .iter()
                .filter(|a| a.starts_with("--cloud-provider"))
                .count();
            assert_eq!(cp, 1, "{}: one --cloud-provider in {argv:?}", self.name);
        }

        // Idempotent: a second run changes nothing and restarts nothing.
        let system2 = RecordingSystem::default();
        let (mut out2, mut err2) = (Vec::new(), Vec::new());
        vpcnet_bootstrap::run(
            &args,
            &cloud.adapters(&host, &system2),
            &mut out2,
            &mut err2,
        )
        .await
        .unwrap();
        let out2 = String::from_utf8(out2).unwrap();
        assert!(
            out2.lines().all(|l| l.starts_with("unchanged")
                || l.starts_with("absent")
                || l.starts_with("ran")),
            "{}: second run changed files:\n{out2}",
            self.name
        );
        assert!(
            !system2
                .steps()
                .iter()
                .any(|s| matches!(s, Step::Restart(_) | Step::DaemonReload)),
            "{}: second run restarted: {:?}",
            self.name,
            system2.steps()
        );
        assert_eq!(
            first,
            tree(root.path()),
            "{}: second run changed the tree",
            self.name
        );

        // Dry run prints exactly what was written and the steps, and writes and runs nothing.
        let empty = tempfile::tempdir().unwrap();
        let mut dry_argv = argv.clone();
        let n = dry_argv.len();
        dry_argv[n - 1] = empty.path().display().to_string();
        dry_argv.push("--dry-run".into());
        let dry_args = BootstrapArgs::try_parse_from(&dry_argv).unwrap();
        let dry_host = FakeHost {
            root: root.path().to_path_buf(),
            ..host
        };
        let dry_system = RecordingSystem::default();
        let mut dry = Vec::new();
        vpcnet_bootstrap::run(
            &dry_args,
            &cloud.adapters(&dry_host, &dry_system),
            &mut dry,
            &mut Vec::new(),
        )
        .await
        .unwrap();
        let dry = String::from_utf8(dry).unwrap();
        assert!(
            dry.starts_with("### kubelet unit: "),
            "{}: dry run does not say which unit:\n{dry}",
            self.name
        );
        let preseeded = |rel: &str, content: &str| {
            self.preseed
                .iter()
                .any(|(p, c)| p.trim_start_matches('/') == rel && *c == content)
        };
        for (rel, content) in &first {
            if preseeded(rel, content) {
                continue; // on the node before, not written
            }
            assert!(
                dry.contains(&format!("### /{rel} (mode 0644)\n{content}")),
                "{}: dry run lacks {rel}:\n{dry}",
                self.name
            );
        }
        for step in system.steps() {
            assert!(
                dry.contains(&format!("### would run: {step}\n")),
                "{}: dry run lacks {step}:\n{dry}",
                self.name
            );
        }
        assert!(
            tree(empty.path()).is_empty() && dry_system.steps().is_empty(),
            "{}: dry run wrote files or ran steps",
            self.name
        );

        let mut golden: BTreeMap<String, String> = first
            .into_iter()
            .filter(|(k, v)| !preseeded(k, v))
            .map(|(k, v)| (format!("root/{k}"), v))
            .collect();
        let ca = test_ca_b64();
        let shown: Vec<String> = self
            .args
            .iter()
            .map(|a| {
                if *a == ca {
                    "<base64 test CA>".to_string()
                } else {
                    shell_word(a)
                }
            })
            .collect();
        let mut cmdline = format!("vpcnet-bootstrap {}", shown.join(" "))
            .trim_end()
            .to_string();
        if self.config.is_some() {
            cmdline.push_str(" --config config.yaml");
        }
        golden.insert(
            "cmdline.txt".into(),
            format!(
                "{cmdline}\n{}# kubelet: {}; CPUs: {}{}\n# cloud (vpcnet-emu): {} in VPC {}{}{}{}{}{}{}\n",
                match self.ami {
                    Some(family) => format!("# node: EKS {family} AMI files (tests/ami/{family}, unchanged files not shown)\n"),
                    None => String::new(),
                },
                self.kubelet,
                self.vcpus,
                if self.bpffs_mounted { "; bpffs mounted" } else { "" },
                self.cloud.instance_type,
                self.cloud.vpc_cidrs.join(" + "),
                if self.cloud.register.is_some() {
                    "; type known to EC2 only"
                } else {
                    ""
                },
                if self.cloud.deny_describe_instance_types {
                    "; DescribeInstanceTypes denied"
                } else {
                    ""
                },
                if self.cloud.second_eni_listed_first {
                    "; second ENI listed first in IMDS"
                } else {
                    ""
                },
                if self.cloud.ipv6s.is_empty() {
                    String::new()
                } else {
                    format!("; IPv6 {}", self.cloud.ipv6s.join(", "))
                },
                match &self.cloud.eks_cluster {
                    Some(c) => format!("; EKS cluster {} ({})", c.name, serde_json::to_string(c).unwrap()),
                    None => String::new(),
                },
                if self.cloud.user_data.is_some() {
                    "; user data in user-data.txt"
                } else {
                    ""
                },
            ),
        );
        golden.insert("stderr.txt".into(), String::from_utf8(err).unwrap());
        let lines = |v: &[String]| v.iter().map(|a| format!("{a}\n")).collect::<String>();
        golden.insert("kubelet-argv.txt".into(), lines(&installed));
        if self.ami.is_none() {
            // The drop-ins also carry everything under the AL2 AMI's unit layout.
            golden.insert("kubelet-argv.eks-ami.txt".into(), lines(&ami));
        }
        let steps = |s: &RecordingSystem| {
            lines(&s.steps().iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        golden.insert(
            "systemctl.txt".into(),
            format!(
                "# first run\n{}# second run\n{}",
                steps(&system),
                steps(&system2)
            ),
        );
        if let Some(c) = self.config {
            golden.insert("config.yaml".into(), c.into());
        }
        if let Some(c) = self.containerd {
            golden.insert("containerd.toml".into(), c.into());
        }
        if let Some(u) = &self.cloud.user_data {
            golden.insert("user-data.txt".into(), u.clone());
        }
        check_golden(self.name, &golden);
    }
}

fn shell_word(a: &str) -> String {
    if a.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:=,".contains(c))
    {
        a.to_string()
    } else {
        format!("'{a}'")
    }
}

#[tokio::test]
async fn regular_cluster() {
    let mut c = Case::new(
        "regular",
        &[
            "--kubelet-extra-args",
            "--node-labels=team=a,env=prod --register-with-taints=dedicated=a:NoSchedule",
        ],
    );
    c.cloud = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    c.run().await;
}

#[tokio::test]
async fn regular_cluster_old_kubelet_uses_aws_provider() {
    let mut c = Case::new("regular-kubelet-1.25", &["--kubelet-version", "1.25.16"]);
    c.kubelet = "(not run: --kubelet-version given)";
    c.vcpus = 32;
    c.cloud = CloudSpec::new("c5.9xlarge", vec!["10.0.0.0/16"]);
    c.run().await;
}

#[tokio::test]
async fn local_cluster_on_outposts() {
    let mut c = Case::new(
        "outpost",
        &[
            "--enable-local-outpost",
            "true",
            "--cluster-id",
            "0123abcd-4567-89ef-0123-456789abcdef",
        ],
    );
    c.apiserver_ips = vec![
        "10.0.1.12".parse().unwrap(),
        "10.0.2.12".parse().unwrap(),
        "10.0.3.12".parse().unwrap(),
    ];
    c.preseed = vec![("/etc/hosts", "127.0.0.1   localhost localhost.localdomain\n::1         localhost6 localhost6.localdomain6\n")];
    c.cloud = CloudSpec::new("m5.xlarge", vec!["10.0.0.0/16"]);
    c.vcpus = 4;
    c.run().await;
}

#[tokio::test]
async fn ipv6_cluster() {
    let mut c = Case::new(
        "ipv6",
        &[
            "--ip-family",
            "ipv6",
            "--service-ipv6-cidr",
            "fd00:c0de:7e57::/108",
        ],
    );
    c.cloud.ipv6s = vec![
        "2600:1f14:abc:de00:1234:5678:9abc:def0",
        "2600:1f14:abc:de00::99",
    ];
    c.run().await;
}

#[tokio::test]
async fn custom_service_cidr() {
    let mut c = Case::new(
        "service-ipv4-cidr",
        &["--service-ipv4-cidr", "172.16.0.0/16"],
    );
    // The VPC heuristic would say 172.20.0.10; the service CIDR wins.
    c.cloud = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    c.run().await;
}

#[tokio::test]
async fn dns_heuristic_any_ten_slash_eight_vpc_cidr() {
    let mut c = Case::new("dns-vpc-10", &[]);
    c.cloud = CloudSpec::new("m5.large", vec!["192.168.0.0/16", "10.0.0.0/16"]);
    c.run().await;
}

#[tokio::test]
async fn dns_heuristic_110_is_not_ten() {
    let mut c = Case::new("dns-vpc-110", &[]);
    c.cloud = CloudSpec::new("m5.large", vec!["110.0.0.0/16"]);
    c.run().await;
}

#[tokio::test]
async fn primary_mac_is_not_first_in_listing() {
    let mut c = Case::new("two-macs", &[]);
    c.cloud.second_eni_listed_first = true;
    c.run().await;
}

#[tokio::test]
async fn max_pods_from_extra_args_drives_kube_reserved() {
    let c = Case::new(
        "use-max-pods-false",
        &[
            "--use-max-pods",
            "false",
            "--kubelet-extra-args",
            "--max-pods=20 --node-labels=a=b",
        ],
    );
    c.run().await;
}

fn unknown_type_limits() -> InstanceLimits {
    InstanceLimits {
        instance_type: "q9z.4xlarge".into(),
        eni_limit: 8,
        ipv4_per_eni: 30,
        default_network_card: 0,
        network_cards: vec![
            NetworkCard {
                index: 0,
                max_enis: 8,
            },
            NetworkCard {
                index: 1,
                max_enis: 8,
            },
        ],
        hypervisor: Hypervisor::Nitro,
        bare_metal: false,
        vcpus: Some(16),
    }
}

#[tokio::test]
async fn unknown_instance_type_answered_by_ec2() {
    let mut c = Case::new("unknown-type-ec2", &[]);
    c.cloud = CloudSpec::new("q9z.4xlarge", vec!["192.168.0.0/16"]);
    c.cloud.register = Some(unknown_type_limits());
    c.vcpus = 16;
    c.run().await;
}

#[tokio::test]
async fn unknown_instance_type_ec2_denied() {
    let mut c = Case::new("unknown-type-ec2-denied", &[]);
    c.cloud = CloudSpec::new("q9z.4xlarge", vec!["192.168.0.0/16"]);
    c.cloud.register = Some(unknown_type_limits());
    c.cloud.deny_describe_instance_types = true;
    c.vcpus = 16;
    c.run().await;
}

#[tokio::test]
async fn node_config_file() {
    let mut c = Case::new("nodeconfig", &[]);
    c.args.clear();
    c.config = Some(
        "apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: cfg-cluster
    apiServerEndpoint: https://0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com
    certificateAuthority: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tClRVbEpRMWxFUTBOQlkybG5RWGRKUWtGblNVbFVaWE4wUTBFSwotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg==
    cidr: 10.96.0.0/12
  kubelet:
    config:
      shutdownGracePeriod: 30s
      featureGates:
        DisableKubeletCloudCredentialProviders: true
    flags:
      - --node-labels=pool=pd
    maxPodsPolicy:
      prefixDelegation: true
",
    );
    c.cloud = CloudSpec::new("m5.large", vec!["10.0.0.0/16"]);
    c.run().await;
}

fn eks_cluster(name: &str) -> EksClusterSpec {
    EksClusterSpec {
        name: name.into(),
        endpoint: ENDPOINT.into(),
        certificate_authority: test_ca_b64(),
        version: Some("1.31".into()),
        ..Default::default()
    }
}

/// The classic minimal user data `bootstrap.sh my-cluster`: EKS DescribeCluster gives the
/// endpoint, CA and service CIDR, and the Outpost ARN makes it a local cluster with the
/// described cluster ID (external cloud provider, bootstrap kubeconfig, /etc/hosts).
#[tokio::test]
async fn minimal_user_data_describes_an_outposts_local_cluster() {
    let mut c = Case::bare("describe-cluster-outpost", &["my-cluster"]);
    c.cloud = CloudSpec::new("m5.xlarge", vec!["10.0.0.0/16"]);
    c.cloud.eks_cluster = Some(EksClusterSpec {
        service_ipv4_cidr: Some("172.16.0.0/16".into()),
        outpost_arns: vec![
            "arn:aws:outposts:us-east-1:123456789012:outpost/op-0123456789abcdef0".into(),
        ],
        id: Some("0123abcd-4567-89ef-0123-456789abcdef".into()),
        ..eks_cluster("my-cluster")
    });
    c.apiserver_ips = vec!["10.0.1.12".parse().unwrap(), "10.0.2.12".parse().unwrap()];
    c.preseed = vec![(
        "/etc/hosts",
        "127.0.0.1   localhost localhost.localdomain\n",
    )];
    c.vcpus = 4;
    c.run().await;
}

/// Endpoint missing, CA given: DescribeCluster fills in the endpoint and the IPv6 family and
/// service CIDR; the given CA wins over the described one.
#[tokio::test]
async fn describe_cluster_fills_the_gaps_of_an_ipv6_cluster() {
    let ca = test_ca_b64();
    let mut c = Case::bare(
        "describe-cluster-ipv6",
        &["my-cluster", "--b64-cluster-ca", &ca],
    );
    c.cloud.eks_cluster = Some(EksClusterSpec {
        ip_family: Some("ipv6".into()),
        service_ipv6_cidr: Some("fd00:c0de:7e57::/108".into()),
        certificate_authority: "bm90IHRoZSBDQSB0aGF0IGlzIHVzZWQ=".into(),
        ..eks_cluster("my-cluster")
    });
    c.cloud.ipv6s = vec!["2600:1f14:abc:de00:1234:5678:9abc:def0"];
    c.run().await;
}

/// nodeadm-style user data (`--config imds`): a MIME multi-part document whose two NodeConfig
/// parts merge in order (a shell script part is skipped), on kubelet 1.34: the node is named
/// by its instance ID (feature gate), max pods from maxPodsExpression, verbosity from the
/// config, nodeadm's 1.33/1.34 defaults.
#[tokio::test]
async fn nodeadm_user_data_on_kubelet_1_34() {
    let mut c = Case::bare("nodeadm-user-data-1.34", &["--config", "imds"]);
    c.kubelet = "Kubernetes v1.34.4";
    c.cloud.user_data = Some(format!(
        "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\r\n\r\n\
--BOUNDARY\r\nContent-Type: application/node.eks.aws\r\n\r\n\
apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: my-cluster\n    apiServerEndpoint: {ENDPOINT}\n    certificateAuthority: {}\n    cidr: 10.100.0.0/16\n  kubelet:\n    flags:\n      - --node-labels=pool=a\r\n\
--BOUNDARY\r\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\r\n\r\n#!/bin/bash\necho ignored\r\n\
--BOUNDARY\r\nContent-Type: application/node.eks.aws\r\n\r\n\
apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  featureGates:\n    InstanceIdNodeName: true\n  kubelet:\n    maxPodsExpression: \"max_pods < 20 ? max_pods : 20\"\n    config:\n      logging:\n        verbosity: 4\n    flags:\n      - --register-with-taints=pool=a:NoSchedule\r\n\
--BOUNDARY--\r\n",
        test_ca_b64()
    ));
    c.run().await;
}

/// Inputs bootstrap.sh accepts that look wrong: accepted, each with a warning (stderr.txt),
/// and a quoted label value reaches kubelet as one argument.
#[tokio::test]
async fn bootstrap_sh_quirks_are_accepted_with_warnings() {
    let c = Case::new(
        "bootstrap-sh-quirks",
        &[
            "--use-max-pods",
            "False",
            "--service-ipv4-cidr",
            "10.100.5.0/16",
            "--kubelet-extra-args",
            "--node-labels='team=a b' --max-pods=17",
            "--pause-container-account",
            "111122223333",
            "--pause-container-version",
            "3.10",
            "--mount-bpf-fs",
            "false",
            "--enable-docker-bridge",
            "true",
        ],
    );
    c.run().await;
}

/// `--containerd-config-file` replaces vpcnet's containerd config (SANDBOX_IMAGE filled in with
/// `--pause-container-image`); bpffs already mounted: no mount unit.
#[tokio::test]
async fn containerd_config_file_and_pause_image() {
    let mut c = Case::new(
        "containerd-config-file",
        &[
            "--containerd-config-file",
            "{containerd}",
            "--pause-container-image",
            "registry.lab:5000/pause",
        ],
    );
    c.containerd = Some(
        "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"SANDBOX_IMAGE\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n",
    );
    c.bpffs_mounted = true;
    c.run().await;
}

/// A fake `ecr-credential-provider` (only its presence matters to bootstrap).
const FAKE_PROVIDER: &str = "#!/bin/sh\n# stands in for ecr-credential-provider\nexit 1\n";

/// An EKS AL2 AMI node: bootstrap copies the AMI's containerd kubelet unit and its
/// sandbox-image unit as bootstrap.sh does, keeps the AMI's credential provider config, and
/// carries its settings in the drop-ins.
#[tokio::test]
async fn eks_al2_ami_keeps_the_amis_unit() {
    let mut c = Case::new("ami-al2", &["--kubelet-extra-args", "--node-labels=team=a"]);
    c.ami = Some("al2");
    c.preseed = vec![
        (
            "/etc/eks/containerd/kubelet-containerd.service",
            include_str!("ami/al2/kubelet-containerd.service"),
        ),
        (
            "/etc/eks/containerd/sandbox-image.service",
            include_str!("ami/al2/sandbox-image.service"),
        ),
        (
            "/etc/systemd/system/kubelet.service",
            include_str!("ami/al2/kubelet.service"),
        ),
        (
            "/etc/eks/image-credential-provider/config.json",
            include_str!("ami/al2/ecr-credential-provider-config.json"),
        ),
        (
            "/etc/eks/image-credential-provider/ecr-credential-provider",
            FAKE_PROVIDER,
        ),
    ];
    c.run().await;
}

/// An EKS AL2023 AMI node: bootstrap keeps the AMI's kubelet unit and writes what nodeadm
/// would: the environment file the unit reads and the credential provider config.
#[tokio::test]
async fn eks_al2023_ami_keeps_the_amis_unit() {
    let mut c = Case::new(
        "ami-al2023",
        &["--kubelet-extra-args", "--node-labels='team=a b'"],
    );
    c.ami = Some("al2023");
    c.kubelet = "Kubernetes v1.33.5-eks-1234567";
    c.preseed = vec![
        (
            "/etc/systemd/system/kubelet.service",
            include_str!("ami/al2023/kubelet.service"),
        ),
        (
            "/etc/eks/image-credential-provider/ecr-credential-provider",
            FAKE_PROVIDER,
        ),
    ];
    c.run().await;
}

/// No AMI unit, but the credential provider and a sandbox-image.service are on the node:
/// vpcnet's unit passes the provider flags and depends on the pause image pull.
#[tokio::test]
async fn vpcnet_unit_with_credential_provider_and_sandbox_image() {
    let mut c = Case::new("vpcnet-unit-provider", &[]);
    c.preseed = vec![
        (
            "/usr/lib/systemd/system/sandbox-image.service",
            include_str!("ami/al2/sandbox-image.service"),
        ),
        (
            "/etc/eks/image-credential-provider/ecr-credential-provider",
            FAKE_PROVIDER,
        ),
    ];
    c.run().await;
}
