//! `vpcnet max-pods`: the published eni-max-pods.txt for every type, the calculator's
//! examples, and the output forms. Runs the real binary.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

use vpcnet_limits::MaxPodsOptions;

/// The VPC CNI's published table (`misc/eni-max-pods.txt` of aws/amazon-vpc-cni-k8s v1.23.1,
/// Apache-2.0, kept with its header in `crates/vpcnet-limits/data/`).
fn reference() -> BTreeMap<String, u32> {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../vpcnet-limits/data/eni-max-pods.txt");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (t, n) = l.split_once(char::is_whitespace).unwrap();
            (t.to_string(), n.trim().parse().unwrap())
        })
        .collect()
}

fn vpcnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vpcnet"))
        .arg("max-pods")
        .args(args)
        // Never reach a real AWS endpoint from tests.
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "AKIDTEST")
        .env("AWS_SECRET_ACCESS_KEY", "secret")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// eni-max-pods.txt holds the uncapped secondary-IP values, i.e. the calculator with
/// `--show-max-allowed` and no other flag.
#[test]
fn equals_eni_max_pods_txt_for_every_type() {
    let want = reference();
    assert_eq!(want.len(), 1391);

    // The shared library function.
    let opts = MaxPodsOptions {
        show_max_allowed: true,
        ..Default::default()
    };
    for (t, n) in &want {
        let l = vpcnet_limits::lookup(t).unwrap_or_else(|| panic!("{t} missing from the table"));
        assert_eq!(vpcnet_limits::max_pods(l, opts).max_pods, *n, "{t}");
    }

    // The CLI: one run, every type, JSON.
    let mut args: Vec<&str> = vec!["--show-max-allowed", "--output", "json"];
    args.extend(want.keys().map(String::as_str));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&vpcnet(&args))).unwrap();
    let got: BTreeMap<String, u32> = rows
        .iter()
        .map(|r| {
            (
                r["instanceType"].as_str().unwrap().to_string(),
                r["maxPods"].as_u64().unwrap() as u32,
            )
        })
        .collect();
    assert_eq!(got, want);
    assert!(rows.iter().all(|r| r["source"] == "table"));
}

#[test]
fn calculator_examples() {
    let n = |args: &[&str]| stdout(&vpcnet(args)).trim().to_string();
    let pd = "--cni-prefix-delegation-enabled";
    let cn = "--cni-custom-networking-enabled";
    let all = "--show-max-allowed";
    assert_eq!(
        [
            n(&["t3.medium"]),
            n(&["t3.medium", cn]),
            n(&["t3.medium", pd]),
            n(&["t3.medium", pd, all])
        ],
        ["17", "12", "110", "242"]
    );
    assert_eq!(
        [
            n(&["m5.large"]),
            n(&["m5.large", cn]),
            n(&["m5.large", pd]),
            n(&["m5.large", pd, all])
        ],
        ["29", "20", "110", "434"]
    );
    assert_eq!(
        n(&["--instance-type", "m4.xlarge", pd]),
        "58",
        "Xen: prefix delegation does not apply"
    );
    assert_eq!(
        [n(&["c5.18xlarge"]), n(&["c5.18xlarge", all])],
        ["250", "737"]
    );
    assert_eq!(
        n(&["c6in.32xlarge", all]),
        "394",
        "default network card only"
    );
    assert_eq!(n(&["m5.metal", pd, all]), "737");
    // MAX_ENI caps before the custom-networking subtraction: min(3, 2) − 1 = 1 ENI × 9 + 2.
    assert_eq!(n(&["m5.large", cn, "--cni-max-eni", "2"]), "11");
    // A CNI older than 1.9 has no prefix delegation.
    let o = vpcnet(&["m5.large", pd, all, "--cni-version", "1.8.0"]);
    assert_eq!(stdout(&o).trim(), "29");
    assert!(String::from_utf8_lossy(&o.stderr).contains("predates prefix delegation"));
}

#[test]
fn output_forms() {
    // One type: a bare number.
    assert_eq!(stdout(&vpcnet(&["m5.large"])), "29\n");
    // Several: a table, one row per type in the order given.
    let t = stdout(&vpcnet(&["m5.large", "--instance-type", "t3.medium"]));
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert!(
        lines[0].starts_with("INSTANCE TYPE") && lines[0].contains("MAX PODS"),
        "{t}"
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["t3.medium", "17", "3", "6", "no", "table"]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["m5.large", "29", "3", "10", "no", "table"]
    );
    // JSON for several, and the explicit number form for several.
    let j: serde_json::Value =
        serde_json::from_str(&stdout(&vpcnet(&["m5.large", "c5.18xlarge", "-o", "json"]))).unwrap();
    assert_eq!(j[0]["maxPods"], 29);
    assert_eq!(
        (j[1]["maxPods"].as_u64(), j[1]["uncapped"].as_u64()),
        (Some(250), Some(737))
    );
    assert_eq!(
        stdout(&vpcnet(&["m5.large", "c5.18xlarge", "-o", "number"])),
        "29\n250\n"
    );
    // Table and JSON also for a single type when asked.
    assert_eq!(
        stdout(&vpcnet(&["m5.large", "-o", "table"]))
            .lines()
            .count(),
        2
    );
    // --all lists every known type.
    let all: Vec<serde_json::Value> =
        serde_json::from_str(&stdout(&vpcnet(&["--all", "-o", "json"]))).unwrap();
    assert_eq!(all.len(), vpcnet_limits::all().len());
}

#[test]
fn bad_input() {
    let o = vpcnet(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--instance-type"));
    let o = vpcnet(&["m5.large", "--cni-max-eni", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--cni-max-eni"));
    let o = vpcnet(&["m5.large", "--cni-version", "new"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--cni-version"));
    let o = vpcnet(&["m5.large", "-o", "yaml"]);
    assert_eq!(o.status.code(), Some(2));
}

/// Unknown types go to EC2 DescribeInstanceTypes (here vpcnet-emu); if EC2 fails too, 110
/// with a warning saying how to fix it.
mod unknown_types {
    use super::*;
    use vpcnet_emu::{ActionFaults, Emulator};
    use vpcnet_limits::{Hypervisor, InstanceLimits, NetworkCard};

    fn vpcnet_at(
        endpoint: String,
        args: &'static [&'static str],
    ) -> tokio::task::JoinHandle<Output> {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_vpcnet"))
                .arg("max-pods")
                .args(args)
                .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9")
                .env("AWS_ENDPOINT_URL", endpoint)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "AKIDTEST")
                .env("AWS_SECRET_ACCESS_KEY", "secret")
                .output()
                .unwrap()
        })
    }

    fn future_type() -> InstanceLimits {
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answered_by_ec2() {
        let emu = Emulator::new(1);
        emu.register_instance_type(future_type());
        let server = emu.spawn().await.unwrap();
        let o = vpcnet_at(
            server.endpoint.clone(),
            &[
                "q9z.4xlarge",
                "m5.large",
                "--show-max-allowed",
                "-o",
                "json",
            ],
        )
        .await
        .unwrap();
        let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).unwrap();
        // 8 ENIs of the default card × 29 + 2; 16 vCPUs would cap at 110 without --show-max-allowed.
        assert_eq!(
            (rows[0]["maxPods"].as_u64(), rows[0]["source"].as_str()),
            (Some(234), Some("ec2"))
        );
        assert_eq!(
            (rows[1]["maxPods"].as_u64(), rows[1]["source"].as_str()),
            (Some(29), Some("table"))
        );
        assert_eq!(
            emu.calls().per_action.get("DescribeInstanceTypes"),
            Some(&1),
            "only the unknown type is asked"
        );
        let o = vpcnet_at(server.endpoint.clone(), &["q9z.4xlarge"])
            .await
            .unwrap();
        assert_eq!(stdout(&o), "110\n");
        assert!(
            o.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ec2_denied_gives_110_with_a_fix() {
        let emu = Emulator::new(1);
        emu.register_instance_type(future_type());
        emu.set_action_faults(
            "DescribeInstanceTypes",
            Some(ActionFaults::default().error(1.0, "UnauthorizedOperation")),
        )
        .unwrap();
        let server = emu.spawn().await.unwrap();
        let o = vpcnet_at(
            server.endpoint.clone(),
            &["q9z.4xlarge", "--show-max-allowed"],
        )
        .await
        .unwrap();
        assert_eq!(stdout(&o), "110\n");
        let err = String::from_utf8_lossy(&o.stderr);
        for n in [
            "warning:",
            "q9z.4xlarge",
            "UnauthorizedOperation",
            "ec2:DescribeInstanceTypes",
            "upgrade vpcnet",
            "--max-pods",
        ] {
            assert!(err.contains(n), "stderr lacks {n:?}: {err}");
        }
        let o = vpcnet_at(server.endpoint.clone(), &["q9z.4xlarge", "-o", "json"])
            .await
            .unwrap();
        let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(rows[0]["source"], "fallback");
        assert!(rows[0]["warning"]
            .as_str()
            .unwrap()
            .contains("ec2:DescribeInstanceTypes"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn instance_type_from_imds() {
        let emu = Emulator::new(1);
        let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
        let subnet = emu
            .create_subnet(&vpc.vpc_id, "10.0.0.0/24".parse().unwrap(), "us-east-1a")
            .unwrap();
        let inst = emu
            .run_instance(vpcnet_emu::RunInstance {
                instance_type: "c5.18xlarge".into(),
                subnet_id: subnet,
                ..Default::default()
            })
            .await
            .unwrap();
        let imds = emu.imds_endpoint(&inst.instance_id).await.unwrap();
        let o = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_vpcnet"))
                .args([
                    "max-pods",
                    "--instance-type-from-imds",
                    "--show-max-allowed",
                ])
                .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds)
                .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert_eq!(stdout(&o), "737\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_to_ec2_too() {
        let emu = Emulator::new(1);
        let server = emu.spawn().await.unwrap();
        let o = vpcnet_at(server.endpoint.clone(), &["zz1.nano"])
            .await
            .unwrap();
        assert_eq!(stdout(&o), "110\n");
        assert!(String::from_utf8_lossy(&o.stderr).contains("zz1.nano"));
    }
}
