//! Subnet discovery (`ENABLE_SUBNET_DISCOVERY`, the VPC CNI's default `true`) with the real
//! `vpcnet-agent` binary against the emulator: a zone with subnets tagged
//! `kubernetes.io/role/cni` (for this cluster, for another, `0`), untagged, and one in
//! another zone. The node's subnet runs out of room; the pool grows in the tagged subnet of
//! the node's zone with the most free addresses that can take the ENI, and nowhere else. Each
//! case has its negative control with `ENABLE_SUBNET_DISCOVERY=false`, where the pool cannot
//! grow at all.

mod common;

use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use vpcnet_emu::query::params::Params;

const ROLE: &str = "kubernetes.io/role/cni";

/// The subnets of the test VPC besides the node's.
struct Zone {
    /// 10.0.1.0/26, role 1: the one the ENI should land in.
    tagged: String,
    /// 10.0.2.0/24, role 1 but reserved to another cluster.
    other_cluster: String,
    /// 10.0.3.0/24, role 0.
    excluded: String,
    /// 10.0.4.0/24, no tag.
    untagged: String,
    /// 10.0.5.0/24, role 1, in us-east-1b.
    other_zone: String,
}

fn tag(lab: &Lab, subnet: &str, tags: &[(&str, &str)]) {
    let tags: Vec<(String, String)> = tags
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    lab.emu
        .create_tags(std::slice::from_ref(&subnet.to_string()), &tags)
        .unwrap();
}

fn subnets(lab: &Lab) -> Zone {
    let vpc = &lab.instance.vpc_id;
    let make = |cidr: &str, zone: &str, tags: &[(&str, &str)]| {
        let id = lab
            .emu
            .create_subnet(vpc, cidr.parse().unwrap(), zone)
            .unwrap();
        tag(lab, &id, tags);
        id
    };
    let a = "us-east-1a";
    Zone {
        tagged: make("10.0.1.0/26", a, &[(ROLE, "1")]),
        other_cluster: make(
            "10.0.2.0/24",
            a,
            &[(ROLE, "1"), ("kubernetes.io/cluster/other", "shared")],
        ),
        excluded: make("10.0.3.0/24", a, &[(ROLE, "0")]),
        untagged: make("10.0.4.0/24", a, &[("Name", "untagged")]),
        other_zone: make("10.0.5.0/24", "us-east-1b", &[(ROLE, "1")]),
    }
}

/// Creates an unattached ENI in `subnet` holding `ips` (the first its primary address).
async fn occupy(lab: &Lab, subnet: &str, ips: &[Ipv4Addr]) {
    let mut body = format!("Action=CreateNetworkInterface&SubnetId={subnet}");
    for (i, ip) in ips.iter().enumerate() {
        body.push_str(&format!(
            "&PrivateIpAddresses.{n}.PrivateIpAddress={ip}&PrivateIpAddresses.{n}.Primary={}",
            i == 0,
            n = i + 1
        ));
    }
    let (status, xml) = lab.emu.ec2_call(Params::parse(body.as_bytes()), None).await;
    assert_eq!(status, 200, "{xml}");
}

/// Takes all but `leave` free addresses of `subnet` (base `net`, from offset 4 up).
async fn fill(lab: &Lab, subnet: &str, net: [u8; 3], leave: u32) {
    let free = lab.emu.subnet_available(subnet).unwrap();
    let ips: Vec<Ipv4Addr> = (4..=254u8)
        .map(|o| Ipv4Addr::new(net[0], net[1], net[2], o))
        .filter(|ip| *ip != lab.instance.private_ip)
        .take((free - leave) as usize)
        .collect();
    occupy(lab, subnet, &ips).await;
    assert_eq!(lab.emu.subnet_available(subnet), Some(leave));
}

/// Uses one address in each /28 of the /`len` subnet `net.0/len`: no /28 prefix fits anymore.
async fn fragment(lab: &Lab, subnet: &str, net: [u8; 3], len: u8) {
    let blocks = 1u32 << (28 - len);
    let ips: Vec<Ipv4Addr> = (0..blocks)
        .map(|b| Ipv4Addr::new(net[0], net[1], net[2], (b * 16 + 7) as u8))
        .filter(|ip| *ip != lab.instance.private_ip)
        .collect();
    occupy(lab, subnet, &ips).await;
}

/// The instance's attached ENIs other than the primary: (subnet, secondary IPs, prefixes).
fn secondary_enis(lab: &Lab) -> Vec<(String, usize, usize)> {
    lab.attached_enis()
        .into_iter()
        .filter(|e| e.attachment.as_ref().is_some_and(|a| a.device_index > 0))
        .map(|e| (e.subnet_id, e.secondary_ips.len(), e.prefixes.len()))
        .collect()
}

/// Runs the agent (no datapath) until `done` holds or `wait` passes; returns its output.
async fn run_agent(
    lab: &Lab,
    extra: &[(&str, &str)],
    wait: Duration,
    done: impl Fn() -> bool,
) -> String {
    let mut cmd = lab.bare_agent_command();
    cmd.env("CLUSTER_NAME", "lab")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    if let Err(out) = while_agent_runs(&mut child, wait, done).await {
        panic!("{out}");
    }
    child.kill().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The error codes of the `CreateNetworkInterface` calls in the emulator's log (`None`:
/// the call succeeded).
fn creates(lab: &Lab) -> Vec<Option<String>> {
    calls(lab, "CreateNetworkInterface")
        .into_iter()
        .map(|r| r.error_code)
        .collect()
}

fn calls(lab: &Lab, action: &str) -> Vec<vpcnet_emu::RequestRecord> {
    lab.emu
        .requests(0)
        .records
        .into_iter()
        .filter(|r| r.action == action)
        .collect()
}

/// ENIs (attached or not) in `subnet`.
fn enis_in(lab: &Lab, subnet: &str) -> usize {
    lab.emu
        .enis()
        .into_iter()
        .filter(|e| e.subnet_id == subnet)
        .count()
}

/// The subnets the agent's log says it moved on from.
fn moved_on_from(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["msg"]
                .as_str()
                .is_some_and(|m| m.contains("trying the next discovered subnet"))
        })
        .map(|v| v["subnet"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_subnet_sends_the_next_eni_to_the_tagged_subnet_of_the_zone() {
    // Secondary IPs (WARM_ENI_TARGET=1: 9 addresses). The node's /28 keeps 3 free addresses,
    // too few for the primary ENI's 9.
    let lab = lab_in_subnet("m5.large", "10.0.0.0/28").await;
    let zone = subnets(&lab);
    let node = lab.instance.subnet_id.clone();
    fill(&lab, &node, [10, 0, 0], 3).await;
    // A smaller tagged subnet that EC2 lists before the /26 (EC2 lists by ID): the ENI must
    // still go to the one with the most free addresses.
    let smaller = (0..8u8)
        .map(|i| {
            let id = lab
                .emu
                .create_subnet(
                    &lab.instance.vpc_id,
                    format!("10.0.7.{}/27", i * 32).parse().unwrap(),
                    "us-east-1a",
                )
                .unwrap();
            tag(&lab, &id, &[(ROLE, "1")]);
            id
        })
        .find(|id| *id < zone.tagged)
        .expect("one of 8 random subnet IDs sorts before the /26's");
    let grown = || secondary_enis(&lab).iter().any(|e| e.1 > 0);

    // Control: without discovery the pool cannot grow (the ENI goes to the full subnet).
    let out = run_agent(
        &lab,
        &[("ENABLE_SUBNET_DISCOVERY", "false")],
        Duration::from_secs(8),
        || !creates(&lab).is_empty(),
    )
    .await;
    assert!(
        !grown(),
        "grew without discovery: {:?}\n{out}",
        secondary_enis(&lab)
    );
    let tried = creates(&lab);
    assert!(
        !tried.is_empty()
            && tried
                .iter()
                .all(|c| c.as_deref() == Some("InsufficientFreeAddressesInSubnet")),
        "{tried:?}\n{out}"
    );
    assert!(out.contains("its subnet has no room"), "{out}");
    lab.emu.clear_requests();

    let out = run_agent(&lab, &[], Duration::from_secs(30), grown).await;
    let enis = secondary_enis(&lab);
    assert_eq!(enis, vec![(zone.tagged.clone(), 9, 0)], "{out}");
    for s in [
        &smaller,
        &zone.other_cluster,
        &zone.excluded,
        &zone.untagged,
        &zone.other_zone,
    ] {
        assert_eq!(enis_in(&lab, s), 0, "{s}");
    }
    assert_eq!(
        creates(&lab),
        vec![None],
        "one CreateNetworkInterface, taken\n{out}"
    );
    assert_eq!(
        lab.emu.subnet_available(&node),
        Some(3),
        "nothing taken there"
    );
    // One at start (is the node's subnet tagged 0?), one for the new ENI.
    assert_eq!(calls(&lab, "DescribeSubnets").len(), 2, "{out}");
}

/// Prefix delegation's zone: every /28 of the node's /24 and of the tagged /26 has one address
/// used, so EC2 answers InsufficientCidrBlocks there although addresses are free; a third
/// subnet, tagged for this cluster, has fewer free addresses but whole blocks. Returns the
/// lab, its subnets and the whole-block subnet.
async fn fragmented_zone() -> (Lab, Zone, String) {
    let lab = lab_in_subnet("m5.large", "10.0.0.0/24").await;
    let zone = subnets(&lab);
    let node = lab.instance.subnet_id.clone();
    fragment(&lab, &node, [10, 0, 0], 24).await;
    fragment(&lab, &zone.tagged, [10, 0, 1], 26).await;
    let whole = lab
        .emu
        .create_subnet(
            &lab.instance.vpc_id,
            "10.0.6.0/26".parse().unwrap(),
            "us-east-1a",
        )
        .unwrap();
    tag(
        &lab,
        &whole,
        &[(ROLE, "1"), ("kubernetes.io/cluster/lab", "owned")],
    );
    // 53 free (fewer than the tagged /26's 55), blocks .16/28 and .32/28 whole.
    occupy(
        &lab,
        &whole,
        &(4..10)
            .map(|o| Ipv4Addr::new(10, 0, 6, o))
            .collect::<Vec<_>>(),
    )
    .await;
    (lab, zone, whole)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_skip_fragmented_subnets_to_the_next_that_has_a_free_block() {
    let pd = [
        ("ENABLE_PREFIX_DELEGATION", "true"),
        ("WARM_PREFIX_TARGET", "1"),
    ];

    // Control: without discovery the new ENI's prefixes are refused in the node's subnet
    // too, and the node falls back to secondary IPs there (no prefix anywhere).
    {
        let (lab, _, _) = fragmented_zone().await;
        let node = lab.instance.subnet_id.clone();
        let mut control = vec![("ENABLE_SUBNET_DISCOVERY", "false")];
        control.extend(pd);
        let fell_back = || secondary_enis(&lab).iter().any(|e| e.1 > 0);
        let out = run_agent(&lab, &control, Duration::from_secs(20), fell_back).await;
        let enis = secondary_enis(&lab);
        assert!(
            !enis.is_empty() && enis.iter().all(|e| e.0 == node && e.2 == 0),
            "{enis:?}\n{out}"
        );
        assert_eq!(
            creates(&lab)
                .into_iter()
                .filter(|c| c.as_deref() == Some("InsufficientCidrBlocks"))
                .count(),
            1,
            "{out}"
        );
        assert!(out.contains("pods get secondary IPs instead"), "{out}");
    }

    let (lab, zone, whole) = fragmented_zone().await;
    let node = lab.instance.subnet_id.clone();
    let grown = || secondary_enis(&lab).iter().any(|e| e.2 > 0);
    let out = run_agent(&lab, &pd, Duration::from_secs(30), grown).await;
    assert_eq!(secondary_enis(&lab), vec![(whole.clone(), 0, 1)], "{out}");
    // Most free first: the node's /24, the tagged /26, then the whole /26.
    assert_eq!(
        moved_on_from(&out),
        vec![node, zone.tagged.clone()],
        "{out}"
    );
    assert_eq!(
        creates(&lab),
        vec![
            Some("InsufficientCidrBlocks".to_string()),
            Some("InsufficientCidrBlocks".to_string()),
            None
        ],
        "{out}"
    );
    assert_eq!(enis_in(&lab, &zone.other_cluster), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_subnet_tagged_0_gets_no_eni_and_with_discovery_serves_no_pod() {
    // WARM_IP_TARGET=12: more than the primary ENI's 9, so an ENI is asked for.
    let warm = ("WARM_IP_TARGET", "12");
    let primary_ips = |lab: &Lab| {
        lab.emu
            .eni(&lab.instance.primary_eni.as_ref().unwrap().eni_id)
            .unwrap()
            .secondary_ips
            .len()
    };

    // Discovery off: the primary ENI's addresses serve pods, but no ENI is created in the
    // excluded subnet (nor anywhere), as in the VPC CNI.
    let lab = lab_in_subnet("m5.large", "10.0.0.0/24").await;
    let _zone = subnets(&lab);
    tag(&lab, &lab.instance.subnet_id, &[(ROLE, "0")]);
    let out = run_agent(
        &lab,
        &[("ENABLE_SUBNET_DISCOVERY", "false"), warm],
        Duration::from_secs(20),
        || out_has_refusal(&lab),
    )
    .await;
    assert_eq!(primary_ips(&lab), 9, "{out}");
    assert!(creates(&lab).is_empty(), "{out}");
    assert!(
        out.contains("is tagged kubernetes.io/role/cni=0 and ENABLE_SUBNET_DISCOVERY is false: no ENI is created"),
        "{out}"
    );

    // Discovery on: the primary ENI is not grown; the pool is on a tagged subnet's ENI.
    let lab = lab_in_subnet("m5.large", "10.0.0.0/24").await;
    let zone = subnets(&lab);
    tag(&lab, &lab.instance.subnet_id, &[(ROLE, "0")]);
    let out = run_agent(&lab, &[warm], Duration::from_secs(30), || {
        secondary_enis(&lab).iter().any(|e| e.1 >= 9)
    })
    .await;
    let enis = secondary_enis(&lab);
    assert!(
        !enis.is_empty() && enis.iter().all(|e| e.0 == zone.tagged),
        "{enis:?}\n{out}"
    );
    assert_eq!(primary_ips(&lab), 0, "{out}");
}

/// Whether the agent has been refused an ENI for the excluded node subnet: a describe of it
/// happened after the primary ENI was grown (the refusal needs no EC2 call of its own).
fn out_has_refusal(lab: &Lab) -> bool {
    calls(lab, "AssignPrivateIpAddresses")
        .iter()
        .any(|r| r.error_code.is_none())
        && calls(lab, "DescribeSubnets").len() >= 2
}
