//! Custom networking (issue 9, allocation): an in-process agent against the emulator with
//! `custom_networking` on. The ENIConfig watch has no API server here, so the test publishes
//! the resolved ENIConfig into the agent's channel as the watch would.

mod common;

use std::time::Duration;
use vpcnet_agent::AgentDeps;

use common::*;
use vpcnet_agent::clock::now_ms;
use vpcnet_agent::kubernetes::eniconfig::{EniConfigChoice, SelectedBy};
use vpcnet_agent::kubernetes::eniconfig_watch::{condition_of, publish, EniConfigStatus, REJECTED};

fn last_error(agent: &vpcnet_agent::AgentHandle) -> String {
    agent.shared.health().last_error().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enis_go_to_the_eniconfig_subnet_only_once_it_is_resolved_and_valid() {
    let lab = lab("m5.large").await;
    let vpc = lab.instance.vpc_id.clone();
    let pods_a = lab
        .emu
        .create_subnet(&vpc, "10.0.64.0/19".parse().unwrap(), "us-east-1a")
        .unwrap();
    let pods_b = lab
        .emu
        .create_subnet(&vpc, "10.0.96.0/19".parse().unwrap(), "us-east-1b")
        .unwrap();
    let sg = lab.emu.create_security_group(&vpc, "pods").unwrap();
    let mut o = lab.options();
    o.custom_networking = Some(Default::default());
    o.api.node_name = Some("n1".into());
    // Only the ENIConfig watch's wake (or a failed pass's retry) runs the reconciler.
    o.reconcile_interval = Duration::from_secs(3600);
    o.add_ip_wait = Duration::ZERO;
    let agent = vpcnet_agent::start(o, AgentDeps::default()).await.unwrap();
    let tx = agent
        .shared
        .kube()
        .eniconfig()
        .cloned()
        .expect("custom networking on");
    let metrics = agent.shared.metrics().clone();

    // No API server configured: unresolved, no ENI and no address on the primary ENI.
    eventually(
        "the watch reports no API server",
        Duration::from_secs(5),
        || {
            tx.borrow()
                .doc(None)
                .message
                .unwrap_or_default()
                .contains("no usable Kubernetes API server")
        },
    )
    .await;
    let enis = lab.ec2_enis();
    assert_eq!(enis.len(), 1, "{enis:?}");
    assert!(
        enis.values().next().unwrap().is_empty(),
        "the primary ENI got secondary addresses for pods: {enis:?}"
    );
    let mut c = client(&lab.socket()).await;
    assert!(
        c.add_network(add_req("early")).await.is_err(),
        "no address without an ENIConfig"
    );

    let resolve = |name: &str, subnet: &str, sgs: &[&str]| {
        publish(
            &tx,
            &metrics,
            EniConfigStatus::Resolved(EniConfigChoice {
                name: name.into(),
                by: SelectedBy::Default,
                subnet: subnet.into(),
                security_groups: sgs.iter().map(|s| s.to_string()).collect(),
            }),
            now_ms(),
        )
    };
    // Bad ENIConfigs: each a named error, no ENI.
    for (name, subnet, sgs, says) in [
        ("zone-b", pods_b.as_str(), vec![sg.as_str()], "us-east-1b"),
        (
            "gone",
            "subnet-0000dead",
            vec![sg.as_str()],
            "does not exist",
        ),
        (
            "bad-sg",
            pods_a.as_str(),
            vec!["sg-0000dead"],
            "security group",
        ),
    ] {
        assert!(resolve(name, subnet, &sgs));
        eventually(
            &format!("the error of ENIConfig {name}"),
            Duration::from_secs(15),
            || {
                let e = last_error(&agent);
                e.contains(&format!("ENIConfig {name:?}")) && e.contains(says)
            },
        )
        .await;
        // Where an operator looks: the Node condition and /v1/eniconfig say it too.
        eventually(
            &format!("ENIConfig {name} reported as rejected"),
            Duration::from_secs(5),
            || {
                let d = tx.borrow().doc(None);
                d.reason.as_deref() == Some(REJECTED)
                    && d.message.unwrap_or_default().contains(says)
                    && condition_of(&tx.borrow()).1 == REJECTED
            },
        )
        .await;
        assert_eq!(lab.ec2_enis().len(), 1, "no ENI for {name}");
        assert!(lab.detached_enis().is_empty(), "nothing leaked for {name}");
    }

    // A valid one: the pool fills in its subnet with its security group.
    assert!(resolve("pods-a", &pods_a, &[&sg]));
    eventually("a secondary ENI", Duration::from_secs(15), || {
        lab.ec2_enis().len() == 2
    })
    .await;
    let new = lab
        .emu
        .enis()
        .into_iter()
        .find(|e| e.attachment.as_ref().is_some_and(|a| a.device_index > 0))
        .unwrap();
    assert_eq!(new.subnet_id, pods_a);
    assert_eq!(new.security_group_ids, vec![sg.clone()]);
    assert_eq!(condition_of(&tx.borrow()).0, "True", "no rejection left");
    let pod_net: ipnet::Ipv4Net = "10.0.64.0/19".parse().unwrap();
    for i in 0..4 {
        let r = add_retry(&mut c, &format!("p{i}"), Duration::from_secs(15))
            .await
            .unwrap();
        let ip: std::net::Ipv4Addr = r.ipv4_addr.parse().unwrap();
        assert!(
            pod_net.contains(&ip),
            "pod address {ip} outside the ENIConfig subnet"
        );
        assert_ne!(r.device_number, 0, "pod on the primary ENI");
    }
    let primary = lab.ec2_enis();
    assert!(
        primary.values().any(|ips| ips.is_empty()),
        "the primary ENI still has no secondary addresses: {primary:?}"
    );
    agent.shutdown().await;
}
