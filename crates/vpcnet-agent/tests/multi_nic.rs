//! ENABLE_MULTI_NIC with the fake cloud on the paused clock, on hpc7a.12xlarge (two network cards, two ENIs
//! each): without the setting the agent leaves card 1 alone and refuses a multi-homed pod with
//! a message naming the setting; with it, card 1 gets a warm ENI at device 0, a multi-homed pod
//! gets `mNicIf1` from it (route table 10100, the VPC CNI's numbering), the assignment and the
//! card-1 ENI survive a restart, the runtime's GC keeps the further interface of a listed pod,
//! and DEL releases both addresses.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud};
use common::*;
use vpcnet_emu::model;
use vpcnet_proto::{Attachment, GarbageCollectRequest};

/// ENIs attached on network card `card`, per EC2.
fn on_card(fake: &FakeCloud, card: u32) -> Vec<model::Eni> {
    fake.attached_enis()
        .into_iter()
        .filter(|e| {
            e.attachment
                .as_ref()
                .is_some_and(|a| a.network_card == card)
        })
        .collect()
}

/// Options with ENABLE_MULTI_NIC and WARM_IP_TARGET=1, files in `dir`.
fn multi_nic(dir: &Path) -> vpcnet_agent::AgentOptions {
    let mut o = fake_options(dir);
    o.targets.multi_nic = true;
    o.targets.warm_ip_target = Some(1);
    o
}

/// Waits for the agent's warm ENI on card 1.
async fn card1_warm(fake: &FakeCloud) {
    eventually("a warm ENI on card 1", Duration::from_secs(10), || {
        !on_card(fake, 1).is_empty()
    })
    .await;
}

fn multi_req(id: &str) -> vpcnet_proto::AddNetworkRequest {
    vpcnet_proto::AddNetworkRequest {
        requires_multi_nic_attachment: true,
        ..add_req(id)
    }
}

#[tokio::test(start_paused = true)]
async fn without_the_setting_card_1_is_left_alone_and_a_multi_homed_pod_is_refused() {
    let fake = FakeCloud::new("hpc7a.12xlarge");
    let dir = tempfile::tempdir().unwrap();
    let mut o = fake_options(dir.path());
    o.targets.warm_ip_target = Some(1);
    let agent = vpcnet_agent::start(o, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    let e = c.add_network(multi_req("m1")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("ENABLE_MULTI_NIC=true"),
        "{}",
        e.message()
    );
    assert!(on_card(&fake, 1).is_empty());
    assert_eq!(agent.shared.pool().assignments().count(), 0);
    // A plain pod is unaffected.
    add_retry(&mut c, "p1", Duration::from_secs(10))
        .await
        .unwrap();
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_multi_homed_pod_gets_an_address_of_each_card_across_a_restart() {
    let fake = FakeCloud::new("hpc7a.12xlarge");
    let dir = tempfile::tempdir().unwrap();
    let mut o = multi_nic(dir.path());
    o.reconcile_interval = Duration::from_secs(1);
    let agent = vpcnet_agent::start(o.clone(), fake_deps(&fake))
        .await
        .unwrap();
    card1_warm(&fake).await;
    let card1 = on_card(&fake, 1);
    assert_eq!(card1.len(), 1);
    assert_eq!(card1[0].attachment.as_ref().unwrap().device_index, 0);

    let mut c = client(&dir.path().join("agent.sock")).await;
    let r = add_retry_req(&mut c, multi_req("m1"), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.extra_interfaces.len(), 1, "{r:?}");
    let x = &r.extra_interfaces[0];
    assert_eq!(
        (
            x.if_name.as_str(),
            x.network_card,
            x.device_number,
            x.route_table
        ),
        ("mNicIf1", 1, 0, 10_100)
    );
    let ip1: std::net::Ipv4Addr = x.ipv4_addr.parse().unwrap();
    assert!(on_card(&fake, 1)[0].secondary_ips.contains(&ip1));
    let ip0: std::net::Ipv4Addr = r.ipv4_addr.parse().unwrap();
    assert!(on_card(&fake, 0)
        .iter()
        .any(|e| e.secondary_ips.contains(&ip0)));

    // A restart adopts the card-1 ENI and restores both assignments.
    agent.shutdown().await;
    let agent = vpcnet_agent::start(o, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    let again = c.add_network(multi_req("m1")).await.unwrap().into_inner();
    assert_eq!(again.ipv4_addr, r.ipv4_addr);
    assert_eq!(again.extra_interfaces, r.extra_interfaces);
    assert_eq!(
        on_card(&fake, 1).len(),
        1,
        "the card-1 ENI is kept, not replaced"
    );

    // The runtime's GC lists the pod's attachment (eth0): its mNicIf1 stays.
    let gc = c
        .garbage_collect(GarbageCollectRequest {
            valid_attachments: vec![Attachment {
                container_id: "m1".into(),
                if_name: "eth0".into(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(gc.released.is_empty(), "{gc:?}");

    // DEL releases both.
    let d = c.del_network(del_req("m1")).await.unwrap().into_inner();
    assert_eq!(d.ipv4_addr, r.ipv4_addr);
    assert_eq!(d.extra_interfaces.len(), 1);
    assert_eq!(d.extra_interfaces[0].ipv4_addr, ip1.to_string());
    let left: BTreeSet<_> = agent
        .shared
        .pool()
        .assignments()
        .map(|(k, _)| k.clone())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    agent.shutdown().await;
}

/// A pod whose own address is already assigned (its first ADD came without the annotation)
/// gets its further address on the next ADD, checkpointed before the reply.
#[tokio::test(start_paused = true)]
async fn a_further_address_added_to_an_existing_attachment_is_checkpointed() {
    let fake = FakeCloud::new("hpc7a.12xlarge");
    let dir = tempfile::tempdir().unwrap();
    let agent = vpcnet_agent::start(multi_nic(dir.path()), fake_deps(&fake))
        .await
        .unwrap();
    card1_warm(&fake).await;
    let mut c = client(&dir.path().join("agent.sock")).await;
    let first = add_retry(&mut c, "p1", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(first.extra_interfaces.is_empty());
    let r = add_retry_req(&mut c, multi_req("p1"), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.ipv4_addr, first.ipv4_addr, "its own address is kept");
    let further = &r.extra_interfaces[0];
    let text = std::fs::read_to_string(dir.path().join("ipam.json")).unwrap();
    let cp = vpcnet_ipam::Checkpoint::from_json(&text).unwrap();
    assert!(
        cp.assignments
            .iter()
            .any(|a| a.if_name == "mNicIf1" && a.ip.to_string() == further.ipv4_addr),
        "{text}"
    );
    agent.shutdown().await;
}
