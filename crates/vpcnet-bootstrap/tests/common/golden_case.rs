//! One golden-file case of `tests/golden.rs`: the instance, node and flags of a run, and
//! [`Case::run`], which runs bootstrap twice (and once with `--dry-run`) and compares what it
//! wrote, printed and ran with `tests/golden/<case>/`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use clap::Parser;
use vpcnet_bootstrap::startup::{RecordingSystem, Step};
use vpcnet_bootstrap::systemd::{kubelet_command_line, Unit};
use vpcnet_bootstrap::BootstrapArgs;

use super::*;

/// The AL2 AMI's containerd kubelet unit (tests/ami/README.md).
const AL2_UNIT: &str = include_str!("../ami/al2/kubelet-containerd.service");

pub const ENDPOINT: &str =
    "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com";

pub struct Case {
    pub name: &'static str,
    pub args: Vec<String>,
    pub cloud: CloudSpec,
    pub vcpus: u32,
    pub kubelet: &'static str,
    pub apiserver_ips: Vec<IpAddr>,
    pub preseed: Vec<(&'static str, &'static str)>,
    /// The node is an EKS AMI: its files (tests/ami/<family>) are preseeded.
    pub ami: Option<&'static str>,
    pub config: Option<&'static str>,
    /// A file given to the case's flags as `{containerd}` (a containerd config.toml).
    pub containerd: Option<&'static str>,
    pub bpffs_mounted: bool,
}

impl Case {
    pub fn new(name: &'static str, extra: &[&str]) -> Self {
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
    pub fn bare(name: &'static str, args: &[&str]) -> Self {
        let mut c = Case::new(name, &[]);
        c.args = args.iter().map(|s| s.to_string()).collect();
        c
    }

    pub async fn run(self) {
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
