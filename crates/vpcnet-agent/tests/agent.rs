//! The contract test over HTTP (issue 3's acceptance): the in-process agent against the
//! emulator over its HTTP API (EC2 Query, IMDSv2) through the real SDK adapters, gRPC over a
//! temp Unix socket. The agent's other behaviours run on the paused clock with the fake cloud
//! (`tests/allocation.rs`, `tests/restart.rs`, `tests/recovery.rs`, ...).

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use vpcnet_agent::AgentDeps;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m5_large_defaults_fill_27_pods_then_limit() {
    let lab = lab("m5.large").await;
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    // m5.large: 3 ENIs × 10 IPv4 (9 for pods each); WARM_ENI_TARGET=1 keeps one ENI's worth
    // (9) of free IPs. Fresh node: the primary ENI with 9 secondary IPs, nothing else.
    let enis = lab.ec2_enis();
    assert_eq!(enis.len(), 1, "{enis:?}");
    assert_eq!(enis.values().next().unwrap().len(), 9);
    assert_eq!(agent_enis(&agent), enis);
    // Files: socket 0660, checkpoint 0600, conflist written once the pool can serve.
    assert_eq!(
        std::fs::metadata(lab.socket())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o660
    );
    assert_eq!(
        std::fs::metadata(lab.checkpoint())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let conflist =
        std::fs::read_to_string(lab.dir.path().join("net.d/10-vpcnet.conflist")).unwrap();
    assert!(
        conflist.contains(&lab.socket().display().to_string()),
        "{conflist}"
    );

    let mut c = client(&lab.socket()).await;
    let mut ips = BTreeSet::new();
    for i in 0..27 {
        let r = add_retry(&mut c, &format!("c{i}"), Duration::from_secs(20))
            .await
            .unwrap();
        let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
        assert!(ips.insert(ip), "IP {ip} handed out twice");
        assert!(lab.ec2_ips().contains(&ip), "{ip} not listed by EC2");
        // Route table: 0 for the primary ENI (eth0), else device number + 1 (the VPC CNI's).
        let expect_table = if r.device_number == 0 {
            0
        } else {
            r.device_number + 1
        };
        assert_eq!(r.route_table, expect_table);
        assert_eq!(r.vpc_cidrs, vec!["10.0.0.0/16".to_string()]);
        if i == 0 {
            // First pod: 8 free < 9 → a second ENI with 9 IPs.
            eventually(
                "2 ENIs / 18 IPs after the first pod",
                Duration::from_secs(10),
                || {
                    let e = lab.ec2_enis();
                    e.len() == 2 && e.values().map(|s| s.len()).sum::<usize>() == 18
                },
            )
            .await;
        }
        if i == 9 {
            // Tenth pod: 8 free again → the third ENI.
            eventually(
                "3 ENIs / 27 IPs after the tenth pod",
                Duration::from_secs(10),
                || {
                    let e = lab.ec2_enis();
                    e.len() == 3 && e.values().map(|s| s.len()).sum::<usize>() == 27
                },
            )
            .await;
        }
    }
    assert_eq!(ips.len(), 27);
    // ENIs the agent created: description prefix, tags, DeleteOnTermination.
    let created: Vec<_> = lab
        .emu
        .enis()
        .into_iter()
        .filter(|e| e.attachment.as_ref().is_some_and(|a| a.device_index > 0))
        .collect();
    assert_eq!(created.len(), 2);
    for e in &created {
        assert!(
            e.description.starts_with("vpcnet-cni: "),
            "{}",
            e.description
        );
        let tag = |k: &str| {
            e.tags
                .iter()
                .find(|(tk, _)| tk == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            tag("node.k8s.amazonaws.com/instance_id"),
            Some(lab.instance.instance_id.clone())
        );
        assert_eq!(tag("cluster.k8s.amazonaws.com/name"), Some("lab".into()));
        assert!(tag("node.k8s.amazonaws.com/createdAt").is_some());
        assert!(e.attachment.as_ref().unwrap().delete_on_termination);
    }
    let err = c.add_network(add_req("c27")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("ENI/IP limit")
            && err.message().contains("m5.large")
            && err.message().contains("3 ENIs"),
        "{}",
        err.message()
    );
    // Idempotent ADD returns the same IP.
    let again = c.add_network(add_req("c3")).await.unwrap().into_inner();
    assert!(ips.contains(&again.ipv4_addr.parse().unwrap()));
    // The SDK adapter counts every HTTP request it made, per action.
    let m = agent.shared.metrics().encode();
    for action in [
        "DescribeNetworkInterfaces",
        "CreateNetworkInterface",
        "AttachNetworkInterface",
        "AssignPrivateIpAddresses",
    ] {
        assert!(
            m.contains(&format!("awscni_ec2api_req_count{{fn=\"{action}\"}}")),
            "{action}: {m}"
        );
    }
    agent.shutdown().await;
}
