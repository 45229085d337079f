//! Golden-file tests: each case runs vpcnet-bootstrap against one instance in vpcnet-emu
//! (IMDSv2, EC2 and EKS through the real adapters), a fake host and a recording system, into a
//! temporary root, and compares every file with tests/golden/<case>/, together with the
//! command line, stderr, the systemctl steps of a first and a second run, and the kubelet
//! command line systemd builds from those files with the unit installed (`kubelet-argv.txt`)
//! and, for the drop-ins, under the AL2 AMI's unit (`kubelet-argv.eks-ami.txt`), one argument
//! per line. Regenerate with `UPDATE_GOLDEN=1 cargo test
//! -p vpcnet-bootstrap --test golden` and review the diff by eye.

mod common;

use common::golden_case::{Case, ENDPOINT};
use common::*;
use vpcnet_emu::EksClusterSpec;
use vpcnet_limits::{Hypervisor, InstanceLimits, NetworkCard};

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
