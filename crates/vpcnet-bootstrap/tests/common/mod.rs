//! In-process fakes of IMDS, EC2 and the host for bootstrap tests, and the golden-file check.
#![allow(dead_code)]

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use vpcnet_bootstrap::cloud::{CloudError, Ec2, Imds};
use vpcnet_bootstrap::facts::{under_root, Host};
use vpcnet_bootstrap::BootstrapError;
use vpcnet_limits::InstanceLimits;

/// One ENI as IMDS shows it under `network/interfaces/macs/<mac>/`.
#[derive(Clone)]
pub struct Eni {
    pub mac: &'static str,
    pub local_ipv4s: Vec<&'static str>,
    pub ipv6s: Vec<&'static str>,
    pub vpc_ipv4_cidrs: Vec<&'static str>,
}

/// An instance as IMDS shows it. `enis` is in the order of the MAC listing; `primary` picks
/// the one `meta-data/mac` names.
#[derive(Clone)]
pub struct Instance {
    pub instance_type: &'static str,
    pub id: &'static str,
    pub az: &'static str,
    pub enis: Vec<Eni>,
    pub primary: usize,
}

impl Instance {
    pub fn simple(instance_type: &'static str, vpc: Vec<&'static str>) -> Self {
        Instance {
            instance_type,
            id: "i-0123456789abcdef0",
            az: "us-west-2a",
            enis: vec![Eni {
                mac: "0a:00:00:00:00:01",
                local_ipv4s: vec!["192.168.12.34", "192.168.12.35"],
                ipv6s: vec![],
                vpc_ipv4_cidrs: vpc,
            }],
            primary: 0,
        }
    }

    pub fn imds(&self) -> FakeImds {
        let mut m = HashMap::new();
        let md = |k: &str| k.to_string();
        m.insert(md("instance-type"), self.instance_type.to_string());
        m.insert(md("instance-id"), self.id.to_string());
        m.insert(md("placement/availability-zone"), self.az.to_string());
        m.insert(
            md("placement/region"),
            self.az[..self.az.len() - 1].to_string(),
        );
        let p = &self.enis[self.primary];
        m.insert(md("mac"), p.mac.to_string());
        m.insert(md("local-ipv4"), p.local_ipv4s[0].to_string());
        m.insert(
            md("network/interfaces/macs/"),
            self.enis
                .iter()
                .map(|e| format!("{}/", e.mac))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        for e in &self.enis {
            let base = format!("network/interfaces/macs/{}", e.mac);
            m.insert(format!("{base}/local-ipv4s"), e.local_ipv4s.join("\n"));
            if !e.ipv6s.is_empty() {
                m.insert(format!("{base}/ipv6s"), e.ipv6s.join("\n"));
            }
            m.insert(
                format!("{base}/vpc-ipv4-cidr-blocks"),
                e.vpc_ipv4_cidrs.join("\n"),
            );
        }
        FakeImds(m)
    }
}

pub struct FakeImds(pub HashMap<String, String>);

impl Imds for FakeImds {
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        Ok(self.0.get(path).cloned())
    }
}

/// EC2: extra instance types, an optional denial of DescribeInstanceTypes, and a
/// PrivateDnsName that is empty for the first `empty_dns_calls` calls.
pub struct FakeEc2 {
    pub types: HashMap<String, InstanceLimits>,
    pub deny_describe_instance_types: bool,
    pub private_dns_name: String,
    pub empty_dns_calls: u32,
    pub deny_describe_instances: bool,
    pub dns_calls: Cell<u32>,
    pub type_calls: Cell<u32>,
}

impl Default for FakeEc2 {
    fn default() -> Self {
        FakeEc2 {
            types: HashMap::new(),
            deny_describe_instance_types: false,
            private_dns_name: "ip-192-168-12-34.us-west-2.compute.internal".into(),
            empty_dns_calls: 0,
            deny_describe_instances: false,
            dns_calls: Cell::new(0),
            type_calls: Cell::new(0),
        }
    }
}

impl Ec2 for FakeEc2 {
    async fn describe_instance_type(&self, t: &str) -> Result<InstanceLimits, CloudError> {
        self.type_calls.set(self.type_calls.get() + 1);
        if self.deny_describe_instance_types {
            return Err(CloudError {
                action: "DescribeInstanceTypes".into(),
                code: Some("UnauthorizedOperation".into()),
                message: "You are not authorized to perform this operation.".into(),
            });
        }
        self.types.get(t).cloned().ok_or(CloudError {
            action: "DescribeInstanceTypes".into(),
            code: Some("InvalidInstanceType".into()),
            message: format!("The following supplied instance types do not exist: [{t}]"),
        })
    }

    async fn private_dns_name(&self, _id: &str) -> Result<String, CloudError> {
        let n = self.dns_calls.get() + 1;
        self.dns_calls.set(n);
        if self.deny_describe_instances {
            return Err(CloudError {
                action: "DescribeInstances".into(),
                code: Some("UnauthorizedOperation".into()),
                message: "You are not authorized to perform this operation.".into(),
            });
        }
        Ok(if n <= self.empty_dns_calls {
            String::new()
        } else {
            self.private_dns_name.clone()
        })
    }
}

pub struct FakeHost {
    pub root: PathBuf,
    pub vcpus: u32,
    pub kubelet_version: String,
    pub apiserver_ips: Vec<IpAddr>,
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
        assert_eq!(
            content, &expected[rel],
            "{case}: {rel} differs from the golden file (UPDATE_GOLDEN=1 to accept)"
        );
    }
}
