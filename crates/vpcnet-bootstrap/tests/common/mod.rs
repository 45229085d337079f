//! Test cloud for bootstrap tests: one instance in vpcnet-emu, reached through the real
//! adapters (`vpcnet_imds::Imds` on the instance's IMDSv2 endpoint, `AwsEc2` and `AwsEks` on the
//! emulator's endpoint); a fake host (CPUs, kubelet version, DNS, bpffs, files under the root);
//! a recording system (systemctl); and the golden-file check.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vpcnet_bootstrap::cloud::{AwsEc2, AwsEks, CloudError, Imds};
use vpcnet_bootstrap::facts::Host;
use vpcnet_bootstrap::node_files::under_root;
use vpcnet_bootstrap::startup::RecordingSystem;
use vpcnet_bootstrap::{Adapters, BootstrapError};
use vpcnet_ec2::{CreateEni, Ec2Options, StaticCredentials};
use vpcnet_emu::{ActionFaults, EksClusterSpec, EmuServer, Emulator, InstanceInfo, RunInstance};
use vpcnet_limits::InstanceLimits;

pub mod golden_case;

/// Seed of every test cloud, so IDs, MACs and addresses (and the golden files) are stable.
pub const SEED: u64 = 20_240_601;
pub const AZ: &str = "us-east-1a";

/// What the test cloud looks like.
pub struct CloudSpec {
    pub instance_type: &'static str,
    /// VPC CIDRs, the first one primary; the instance's subnet is the first /24 of it.
    pub vpc_cidrs: Vec<&'static str>,
    /// An instance type unknown to the compiled table, registered with EC2 only.
    pub register: Option<InstanceLimits>,
    /// DescribeInstanceTypes answers UnauthorizedOperation.
    pub deny_describe_instance_types: bool,
    /// DescribeInstances answers UnauthorizedOperation.
    pub deny_describe_instances: bool,
    /// DescribeInstances answers this EC2 error code every time (e.g. InternalError).
    pub fail_describe_instances: Option<&'static str>,
    /// The first N DescribeInstances answers carry an empty PrivateDnsName.
    pub empty_private_dns_calls: u32,
    /// Attach a second ENI and make IMDS list its MAC first.
    pub second_eni_listed_first: bool,
    /// IPv6 addresses of the primary ENI (the emulator has no IPv6: served by an overlay).
    pub ipv6s: Vec<&'static str>,
    /// An EKS cluster record for DescribeCluster.
    pub eks_cluster: Option<EksClusterSpec>,
    /// The instance's user data.
    pub user_data: Option<String>,
}

impl CloudSpec {
    pub fn new(instance_type: &'static str, vpc_cidrs: Vec<&'static str>) -> Self {
        CloudSpec {
            instance_type,
            vpc_cidrs,
            register: None,
            deny_describe_instance_types: false,
            deny_describe_instances: false,
            fail_describe_instances: None,
            empty_private_dns_calls: 0,
            second_eni_listed_first: false,
            ipv6s: vec![],
            eks_cluster: None,
            user_data: None,
        }
    }
}

/// Test credentials for the emulator.
pub fn test_credentials() -> StaticCredentials {
    StaticCredentials {
        access_key_id: "AKIDTEST".into(),
        secret_access_key: "secret".into(),
        session_token: None,
    }
}

/// A launched test cloud. Dropping it stops the emulator's EC2 server.
pub struct Cloud {
    pub emu: Emulator,
    _server: EmuServer,
    /// The emulator's EC2 endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    pub ec2: AwsEc2,
    pub eks: AwsEks,
    pub imds: OverlayImds,
    pub instance: InstanceInfo,
}

impl Cloud {
    pub async fn launch(spec: &CloudSpec) -> Cloud {
        let emu = Emulator::new(SEED);
        let server = emu.spawn().await.unwrap();
        let cidrs: Vec<ipnet::Ipv4Net> =
            spec.vpc_cidrs.iter().map(|c| c.parse().unwrap()).collect();
        let vpc = emu.create_vpc(cidrs[0], &cidrs[1..]).unwrap();
        let subnet_cidr = ipnet::Ipv4Net::new(cidrs[0].network(), 24).unwrap();
        let subnet = emu.create_subnet(&vpc.vpc_id, subnet_cidr, AZ).unwrap();
        if let Some(l) = &spec.register {
            emu.register_instance_type(l.clone());
        }
        let instance = emu
            .run_instance(RunInstance {
                instance_type: spec.instance_type.into(),
                subnet_id: subnet.clone(),
                user_data: spec.user_data.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        if let Some(c) = &spec.eks_cluster {
            emu.create_eks_cluster(c.clone()).unwrap();
        }
        let client = vpcnet_ec2::Ec2::connect_unobserved(Ec2Options {
            region: Some(emu.region()),
            endpoint_url: Some(server.endpoint.clone()),
            imds_endpoint: None,
            credentials: Some(test_credentials()),
            calls: vpcnet_bootstrap::cloud::bootstrap_call_settings(),
        })
        .await
        .unwrap();
        let eks = AwsEks::new(vpcnet_eks::EksOptions {
            region: Some(emu.region()),
            endpoint_url: Some(server.endpoint.clone()),
            credentials: Some(test_credentials()),
            ..Default::default()
        });

        let mut extra = HashMap::new();
        let primary_mac = instance.primary_eni.as_ref().unwrap().mac.clone();
        if spec.second_eni_listed_first {
            let eni = client
                .create_network_interface(&CreateEni {
                    subnet_id: subnet.clone(),
                    security_group_ids: vec![],
                    description: "second".into(),
                    tags: Default::default(),
                    addresses: None,
                    client_token: None,
                })
                .await
                .unwrap();
            client
                .attach_network_interface(&eni.eni_id, &instance.instance_id, 1, 0)
                .await
                .unwrap();
            // Real IMDS lists MACs in no particular order; here the secondary comes first.
            extra.insert(
                "network/interfaces/macs".to_string(),
                format!("{}/\n{primary_mac}/", eni.mac),
            );
        }
        if !spec.ipv6s.is_empty() {
            extra.insert(
                format!("network/interfaces/macs/{primary_mac}/ipv6s"),
                spec.ipv6s.join("\n"),
            );
        }
        let endpoint = emu.imds_endpoint(&instance.instance_id).await.unwrap();
        let base = vpcnet_imds::Imds::with_endpoint(&endpoint, None).unwrap();

        if spec.deny_describe_instance_types {
            emu.set_action_faults(
                "DescribeInstanceTypes",
                Some(ActionFaults::default().error(1.0, "UnauthorizedOperation")),
            )
            .unwrap();
        }
        let describe_instances_error = spec.fail_describe_instances.or(spec
            .deny_describe_instances
            .then_some("UnauthorizedOperation"));
        if let Some(code) = describe_instances_error {
            emu.set_action_faults(
                "DescribeInstances",
                Some(ActionFaults::default().error(1.0, code)),
            )
            .unwrap();
        }
        emu.set_empty_private_dns_names(spec.empty_private_dns_calls);
        emu.reset_calls();
        Cloud {
            emu,
            endpoint: server.endpoint.clone(),
            _server: server,
            ec2: AwsEc2::from_client(client),
            eks,
            imds: OverlayImds { base, extra },
            instance,
        }
    }

    /// The adapters of this cloud with `host` and `system`.
    pub fn adapters<'a>(
        &'a self,
        host: &'a FakeHost,
        system: &'a RecordingSystem,
    ) -> Adapters<'a, OverlayImds, AwsEc2, AwsEks, FakeHost, RecordingSystem> {
        Adapters {
            imds: &self.imds,
            ec2: &self.ec2,
            eks: &self.eks,
            host,
            system,
        }
    }

    /// The instance's own IMDS endpoint (`http://127.0.0.1:PORT`).
    pub async fn imds_url(&self) -> String {
        self.emu
            .imds_endpoint(&self.instance.instance_id)
            .await
            .unwrap()
    }

    /// EC2 calls of `action` since launch.
    pub fn calls(&self, action: &str) -> u64 {
        self.emu
            .calls()
            .per_action
            .get(action)
            .copied()
            .unwrap_or(0)
    }
}

/// The emulator's IMDS with a few paths answered differently (what the emulator does not model).
pub struct OverlayImds {
    pub base: vpcnet_imds::Imds,
    pub extra: HashMap<String, String>,
}

impl Imds for OverlayImds {
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        match self.extra.get(path.trim_end_matches('/')) {
            Some(v) => Ok(Some(v.clone())),
            None => Imds::get(&self.base, path).await,
        }
    }

    async fn user_data(&self) -> Result<Option<String>, CloudError> {
        Imds::user_data(&self.base).await
    }
}

pub struct FakeHost {
    pub root: PathBuf,
    pub vcpus: u32,
    pub kubelet_version: String,
    pub apiserver_ips: Vec<IpAddr>,
    pub bpffs_mounted: bool,
}

impl FakeHost {
    /// 2 CPUs, kubelet 1.31.2, no API server addresses, bpffs not mounted.
    pub fn new(root: &Path) -> Self {
        FakeHost {
            root: root.to_path_buf(),
            vcpus: 2,
            kubelet_version: "Kubernetes v1.31.2-eks-7f9249a".into(),
            apiserver_ips: vec![],
            bpffs_mounted: false,
        }
    }
}

impl Host for FakeHost {
    fn cpu_count(&self) -> Result<u32, BootstrapError> {
        Ok(self.vcpus)
    }
    fn kubelet_version_output(&self) -> Result<String, BootstrapError> {
        Ok(self.kubelet_version.clone())
    }
    async fn lookup_host(&self, _host: &str) -> Result<Vec<IpAddr>, BootstrapError> {
        Ok(self.apiserver_ips.clone())
    }
    fn read_file(&self, path: &str) -> Result<Option<String>, BootstrapError> {
        Ok(std::fs::read_to_string(under_root(&self.root, path)).ok())
    }
    fn bpffs_mounted(&self) -> Result<bool, BootstrapError> {
        Ok(self.bpffs_mounted)
    }
    fn is_file(&self, path: &str) -> Result<bool, BootstrapError> {
        Ok(under_root(&self.root, path).is_file())
    }
}

/// Runs the vpcnet-bootstrap binary for `my-cluster` with IMDS at `imds` and EC2 at `ec2`,
/// files under `root` and `--files-only` (the machine's systemctl is never called), kubelet
/// 1.31.0 and 2 CPUs, then `args`; endpoint and CA are added unless `args` has them.
pub fn run_binary(imds: &str, ec2: &str, root: &Path, args: &[&str]) -> Output {
    let has = |f: &str| args.contains(&f);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vpcnet-bootstrap"));
    cmd.arg("my-cluster");
    if !has("--apiserver-endpoint") {
        cmd.args(["--apiserver-endpoint", "https://api.example.com"]);
    }
    if !has("--b64-cluster-ca") {
        cmd.args(["--b64-cluster-ca", &test_ca_b64()]);
    }
    cmd.args([
        "--kubelet-version",
        "1.31.0",
        "--vcpus",
        "2",
        "--files-only",
    ])
    .args(["--root", root.to_str().unwrap()])
    .args(args)
    .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds)
    .env("AWS_ENDPOINT_URL", ec2)
    .env("AWS_ACCESS_KEY_ID", "AKIDTEST")
    .env("AWS_SECRET_ACCESS_KEY", "secret")
    .env_remove("AWS_REGION")
    .output()
    .unwrap()
}

/// A PEM-shaped test CA, base64-encoded as `--b64-cluster-ca` takes it.
pub fn test_ca_b64() -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .encode("-----BEGIN CERTIFICATE-----\nTUlJQ1lEQ0NBY2lnQXdJQkFnSUlUZXN0Q0EK\n-----END CERTIFICATE-----\n")
}

/// Every file under `dir`, by relative path.
pub fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, d: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Compares `actual` (relative path → content) with tests/golden/<case>/; with
/// UPDATE_GOLDEN=1 rewrites the golden directory instead.
pub fn check_golden(case: &str, actual: &BTreeMap<String, String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(case);
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        let _ = std::fs::remove_dir_all(&dir);
        for (rel, content) in actual {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        return;
    }
    let expected = tree(&dir);
    assert!(
        !expected.is_empty(),
        "no golden files for {case}; run with UPDATE_GOLDEN=1 and review them"
    );
    let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(actual), names(&expected), "{case}: file lists differ");
    for (rel, content) in actual {
        let want = &expected[rel];
        if content != want {
            let (a, w): (Vec<&str>, Vec<&str>) =
                (content.lines().collect(), want.lines().collect());
            let diff: Vec<String> = (0..a.len().max(w.len()))
                .filter(|i| a.get(*i) != w.get(*i))
                .take(10)
                .map(|i| {
                    format!(
                        "  line {}: golden {:?}\n          actual {:?}",
                        i + 1,
                        w.get(i),
                        a.get(i)
                    )
                })
                .collect();
            panic!(
                "{case}: {rel} differs from the golden file (UPDATE_GOLDEN=1 to accept):\n{}",
                diff.join("\n")
            );
        }
    }
}
