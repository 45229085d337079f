//! Custom networking (issue 9, allocation): an in-process agent with `custom_networking` on,
//! on the paused clock with the fake cloud. Its ENIConfig comes from the mock API server
//! (`common::fake_kube`, handed in as the agent's Kubernetes client): Node annotations and
//! ENIConfig objects, read by the agent's own watch, reported on the Node.

mod common;

use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud};
use common::fake_kube::{self, FakeKube};
use common::*;
use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;
use vpcnet_agent::kubernetes::eniconfig_watch::{
    condition_of, EniConfigTracked, CONDITION_TYPE, REJECTED,
};
use vpcnet_agent::{AgentHandle, AgentOptions};

fn last_error(agent: &AgentHandle) -> String {
    agent.shared.health().last_error().unwrap_or_default()
}

/// Options with custom networking on for Node `n1`, the reconciler woken only by the
/// ENIConfig watch (or a failed pass's retry).
fn options(dir: &std::path::Path) -> AgentOptions {
    let mut o = fake_options(dir);
    o.custom_networking = Some(Default::default());
    o.api.node_name = Some("n1".into());
    o.reconcile_interval = Duration::from_secs(3600);
    o.add_ip_wait = Duration::ZERO;
    o
}

fn node(eniconfig: &str) -> Node {
    fake_kube::node("n1", &[("k8s.amazonaws.com/eniConfig", eniconfig)], None)
}

/// The agent's ENIConfig channel (what its watch publishes, what `/v1/eniconfig` shows).
fn eniconfig_channel(agent: &AgentHandle) -> watch::Sender<EniConfigTracked> {
    agent
        .shared
        .kube()
        .eniconfig()
        .cloned()
        .expect("custom networking on")
}

/// Without an API server, nothing is placed: no ENI, no address on the primary ENI, and the
/// watch says why.
#[tokio::test(start_paused = true)]
async fn without_an_api_server_no_eni_is_placed() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let agent = vpcnet_agent::start(options(dir.path()), fake_deps(&fake))
        .await
        .unwrap();
    let tx = eniconfig_channel(&agent);
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
    let enis = fake.ec2_enis();
    assert_eq!(enis.len(), 1, "{enis:?}");
    assert!(
        enis.values().next().unwrap().is_empty(),
        "the primary ENI got secondary addresses for pods: {enis:?}"
    );
    let mut c = client(&dir.path().join("agent.sock")).await;
    assert!(
        c.add_network(add_req("early")).await.is_err(),
        "no address without an ENIConfig"
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn enis_go_to_the_eniconfig_subnet_only_once_it_is_resolved_and_valid() {
    let fake = FakeCloud::new("m5.large");
    let (pods_a, pods_b, sg) = fake.with_model(|m| {
        let vpc = m.vpcs().next().unwrap().id.clone();
        let a = m
            .create_subnet(&vpc, "10.0.64.0/19".parse().unwrap(), "us-east-1a")
            .unwrap();
        let b = m
            .create_subnet(&vpc, "10.0.96.0/19".parse().unwrap(), "us-east-1b")
            .unwrap();
        let sg = m.create_security_group(&vpc, "pods", "pods").unwrap();
        (a, b, sg)
    });
    let kube = FakeKube::new();
    kube.put_node(&node("pods-a"));
    let dir = tempfile::tempdir().unwrap();
    let agent = vpcnet_agent::start(
        options(dir.path()),
        fake_deps(&fake).with_kube(kube.client()),
    )
    .await
    .unwrap();
    let tx = eniconfig_channel(&agent);

    // The Node names an ENIConfig that does not exist yet: unresolved, said on the Node.
    eventually(
        "ENIConfigNotFound on the Node",
        Duration::from_secs(10),
        || {
            kube.node_condition("n1", CONDITION_TYPE)
                .is_some_and(|(s, r, _)| s == "False" && r == "ENIConfigNotFound")
        },
    )
    .await;
    let mut c = client(&dir.path().join("agent.sock")).await;
    assert!(
        c.add_network(add_req("early")).await.is_err(),
        "no address without an ENIConfig"
    );
    assert_eq!(fake.ec2_enis().len(), 1);

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
        kube.put_eniconfig(&fake_kube::eniconfig(name, subnet, &sgs));
        kube.put_node(&node(name));
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
                    && kube
                        .node_condition("n1", CONDITION_TYPE)
                        .is_some_and(|(s, r, m)| s == "False" && r == REJECTED && m.contains(says))
            },
        )
        .await;
        assert_eq!(fake.ec2_enis().len(), 1, "no ENI for {name}");
        assert!(fake.detached_enis().is_empty(), "nothing leaked for {name}");
    }

    // A valid one: the pool fills in its subnet with its security group.
    kube.put_eniconfig(&fake_kube::eniconfig("pods-a", &pods_a, &[&sg]));
    kube.put_node(&node("pods-a"));
    eventually("a secondary ENI", Duration::from_secs(15), || {
        fake.ec2_enis().len() == 2
    })
    .await;
    let (subnet, groups) = fake.with_model(|m| {
        let new = m
            .enis()
            .find(|e| e.attachment.as_ref().is_some_and(|a| a.device_index > 0))
            .unwrap();
        (new.subnet_id.clone(), new.groups.clone())
    });
    assert_eq!(subnet, pods_a);
    assert_eq!(groups, vec![sg.clone()]);
    assert_eq!(condition_of(&tx.borrow()).0, "True", "no rejection left");
    eventually(
        "the condition True on the Node",
        Duration::from_secs(5),
        || {
            kube.node_condition("n1", CONDITION_TYPE)
                .is_some_and(|(s, _, _)| s == "True")
        },
    )
    .await;
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
    let primary = fake.ec2_enis();
    assert!(
        primary.values().any(|ips| ips.is_empty()),
        "the primary ENI still has no secondary addresses: {primary:?}"
    );
    agent.shutdown().await;
}
