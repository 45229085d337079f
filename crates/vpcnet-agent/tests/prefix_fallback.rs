//! Prefix delegation on a fragmented subnet, with the fake cloud on the paused clock: every aligned /28 of the
//! node's subnet holds one used address, so EC2 refuses prefixes (`InsufficientCidrBlocks`)
//! while most addresses are free. Before the fallback a node with
//! `ENABLE_PREFIX_DELEGATION=true` started no pod there; now the pool grows with secondary
//! IPs, says so (`/v1/enis`, `vpcnet_prefix_fallback`), and returns to prefixes once the
//! subnet has /28 blocks again, handing its /32s back as their pods go.

mod common;

use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud};
use common::*;

/// Secondary /32s and /28 prefixes on the instance's ENIs, per EC2.
fn ec2_counts(fake: &FakeCloud) -> (usize, usize) {
    fake.attached_enis()
        .into_iter()
        .fold((0, 0), |(ips, ps), e| {
            (ips + e.secondary_ips.len(), ps + e.prefixes.len())
        })
}

/// The requests EC2 refused for want of a free /28 (only prefix requests get this answer).
fn refusals(fake: &FakeCloud) -> usize {
    fake.refusals("InsufficientCidrBlocks")
}

/// Takes one address in every free aligned /28 of the instance's subnet (or gives them back):
/// EC2 then refuses prefixes there while single addresses are still free.
fn fragment(fake: &FakeCloud, on: bool) -> usize {
    let instance = fake.instance_id().to_string();
    fake.with_model(|m| {
        let id = m.instance(&instance).unwrap().subnet_id.clone();
        let s = m.subnet_mut(&id).unwrap();
        if on {
            s.fragment().len()
        } else {
            s.defragment().len()
        }
    })
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

#[tokio::test(start_paused = true)]
async fn a_fragmented_subnet_gets_pods_secondary_ips_until_prefixes_return() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let taken = fragment(&fake, true);
    assert!(taken > 200, "a /20 has 256 blocks: {taken}");
    let mut o = fake_options(dir.path());
    o.targets.prefix_delegation = true;
    o.prefix_retry = Duration::from_secs(1);
    o.cooldown = Duration::from_secs(1);
    o.surplus_hold = Duration::from_secs(1);
    o.reconcile_interval = Duration::from_secs(1);
    let agent = vpcnet_agent::start(o, fake_deps(&fake)).await.unwrap();

    // Refused once, then 16 warm addresses as /32s (WARM_PREFIX_TARGET=1 = 16 addresses).
    assert!(refusals(&fake) >= 1);
    assert_eq!(ec2_counts(&fake), (16, 0));
    let fallback = agent.shared.pool().summary(0).prefix_fallback;
    assert!(fallback.is_some_and(|f| f.failures >= 1), "{fallback:?}");
    assert_eq!(gauge(&agent), "vpcnet_prefix_fallback 1");

    // Pods start on the /32s, more are added as they go.
    let mut c = client(&dir.path().join("agent.sock")).await;
    for i in 0..20 {
        let r = add_retry(&mut c, &format!("c{i}"), Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| panic!("pod {i}: {e}"));
        let ip: std::net::Ipv4Addr = r.ipv4_addr.parse().unwrap();
        assert!(
            fake.ec2_ips().contains(&ip),
            "{ip} not a secondary IP in EC2"
        );
    }
    assert_eq!(ec2_counts(&fake).1, 0, "no prefix while fragmented");
    // Prefixes are retried with growing waits, not at every pass.
    let tries = refusals(&fake);
    assert!((1..=8).contains(&tries), "{tries} prefix requests refused");

    // The subnet has /28 blocks again: a prefix at the next retry, and the fallback ends.
    fragment(&fake, false);
    eventually("a prefix assigned", Duration::from_secs(40), || {
        ec2_counts(&fake).1 >= 1 && agent.shared.pool().summary(0).prefix_fallback.is_none()
    })
    .await;
    agent.shared.update_gauges();
    assert_eq!(gauge(&agent), "vpcnet_prefix_fallback 0");

    // As the pods go, their /32s go back: the node ends on prefixes alone.
    for i in 0..20 {
        c.del_network(del_req(&format!("c{i}"))).await.unwrap();
    }
    eventually("every /32 returned", Duration::from_secs(30), || {
        ec2_counts(&fake).0 == 0
    })
    .await;
    assert!(ec2_counts(&fake).1 >= 1);
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_prefix_delegation_a_fragmented_subnet_changes_nothing() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    fragment(&fake, true);
    let agent = vpcnet_agent::start(fake_options(dir.path()), fake_deps(&fake))
        .await
        .unwrap();
    assert_eq!(ec2_counts(&fake), (9, 0));
    assert_eq!(refusals(&fake), 0);
    assert_eq!(agent.shared.pool().summary(0).prefix_fallback, None);
    assert_eq!(gauge(&agent), "vpcnet_prefix_fallback 0");
    agent.shutdown().await;
}
