//! Prefix delegation on a fragmented subnet, against the emulator: every aligned /28 of the
//! node's subnet holds one used address, so EC2 refuses prefixes (`InsufficientCidrBlocks`)
//! while most addresses are free. Before the fallback a node with
//! `ENABLE_PREFIX_DELEGATION=true` started no pod there; now the pool grows with secondary
//! IPs, says so (`/v1/enis`, `vpcnet_prefix_fallback`), and returns to prefixes once the
//! subnet has /28 blocks again, handing its /32s back as their pods go.

mod common;

use std::time::Duration;
use vpcnet_agent::AgentDeps;

use common::*;

/// Secondary /32s and /28 prefixes on the instance's ENIs, per EC2.
fn ec2_counts(lab: &Lab) -> (usize, usize) {
    lab.attached_enis()
        .into_iter()
        .fold((0, 0), |(ips, ps), e| {
            (ips + e.secondary_ips.len(), ps + e.prefixes.len())
        })
}

/// The requests EC2 refused for want of a free /28 (only prefix requests get this answer).
fn refusals(lab: &Lab) -> usize {
    lab.emu
        .requests(0)
        .records
        .into_iter()
        .filter(|r| r.error_code.as_deref() == Some("InsufficientCidrBlocks"))
        .count()
}

fn gauge(agent: &vpcnet_agent::AgentHandle) -> String {
    agent
        .shared
        .metrics()
        .encode()
        .lines()
        .find(|l| l.starts_with("vpcnet_prefix_fallback "))
        .unwrap_or("vpcnet_prefix_fallback missing")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fragmented_subnet_gets_pods_secondary_ips_until_prefixes_return() {
    let lab = lab("m5.large").await;
    let taken = lab.emu.fragment_subnet(&lab.instance.subnet_id).unwrap();
    assert!(taken.len() > 200, "a /20 has 256 blocks: {}", taken.len());
    let mut o = lab.options();
    o.targets.prefix_delegation = true;
    o.prefix_retry = Duration::from_secs(1);
    o.cooldown = Duration::from_secs(1);
    o.surplus_hold = Duration::from_secs(1);
    o.reconcile_interval = Duration::from_secs(1);
    let agent = vpcnet_agent::start(o, AgentDeps::default()).await.unwrap();

    // Refused once, then 16 warm addresses as /32s (WARM_PREFIX_TARGET=1 = 16 addresses).
    assert!(refusals(&lab) >= 1);
    assert_eq!(ec2_counts(&lab), (16, 0));
    let fallback = agent.shared.pool().summary(0).prefix_fallback;
    assert!(fallback.is_some_and(|f| f.failures >= 1), "{fallback:?}");
    assert_eq!(gauge(&agent), "vpcnet_prefix_fallback 1");

    // Pods start on the /32s, more are added as they go.
    let mut c = client(&lab.socket()).await;
    for i in 0..20 {
        let r = add_retry(&mut c, &format!("c{i}"), Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| panic!("pod {i}: {e}"));
        let ip: std::net::Ipv4Addr = r.ipv4_addr.parse().unwrap();
        assert!(
            lab.ec2_ips().contains(&ip),
            "{ip} not a secondary IP in EC2"
        );
    }
    assert_eq!(ec2_counts(&lab).1, 0, "no prefix while fragmented");
    // Prefixes are retried with growing waits, not at every pass.
    let tries = refusals(&lab);
    assert!((1..=8).contains(&tries), "{tries} prefix requests refused");

    // The subnet has /28 blocks again: a prefix at the next retry, and the fallback ends.
    lab.emu.defragment_subnet(&lab.instance.subnet_id).unwrap();
    eventually("a prefix assigned", Duration::from_secs(40), || {
        ec2_counts(&lab).1 >= 1 && agent.shared.pool().summary(0).prefix_fallback.is_none()
    })
    .await;
    agent.shared.update_gauges();
    assert_eq!(gauge(&agent), "vpcnet_prefix_fallback 0");

    // As the pods go, their /32s go back: the node ends on prefixes alone.
    for i in 0..20 {
        c.del_network(del_req(&format!("c{i}"))).await.unwrap();
    }
    eventually("every /32 returned", Duration::from_secs(30), || {
        ec2_counts(&lab).0 == 0
    })
    .await;
    assert!(ec2_counts(&lab).1 >= 1);
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_prefix_delegation_a_fragmented_subnet_changes_nothing() {
    let lab = lab("m5.large").await;
    lab.emu.fragment_subnet(&lab.instance.subnet_id).unwrap();
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    assert_eq!(ec2_counts(&lab), (9, 0));
    assert_eq!(refusals(&lab), 0);
    assert_eq!(agent.shared.pool().summary(0).prefix_fallback, None);
    assert_eq!(gauge(&agent), "vpcnet_prefix_fallback 0");
    agent.shutdown().await;
}
