//! An agent restart on tokio's paused clock with the in-process fake cloud: assignments survive
//! it, and a released address stays cooled down across it, to the virtual second, with no
//! real waiting.

mod common;

use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud};
use common::*;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn restart_keeps_assignments_and_cooldown() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut o = fake_options(dir.path());
    // One ENI (9 pod IPs) so the only free IP is the released one; 8 s cooldown.
    o.targets.max_eni = Some(1);
    o.cooldown = Duration::from_secs(8);
    let socket = dir.path().join("agent.sock");
    let agent = vpcnet_agent::start(o.clone(), fake_deps(&fake))
        .await
        .unwrap();
    let mut c = client(&socket).await;
    let mut held = Vec::new();
    for i in 0..9 {
        held.push(
            add_retry(&mut c, &format!("k{i}"), Duration::from_secs(10))
                .await
                .unwrap()
                .ipv4_addr,
        );
    }
    let released = c.del_network(del_req("k8")).await.unwrap().into_inner();
    assert!(released.released);
    let released_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    agent.shutdown().await;
    drop(c);

    let agent = vpcnet_agent::start(o, fake_deps(&fake)).await.unwrap();
    let mut c = client(&socket).await;
    for (i, ip) in held.iter().enumerate().take(8) {
        let r = c
            .add_network(add_req(&format!("k{i}")))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            &r.ipv4_addr, ip,
            "assignment of k{i} changed across restart"
        );
    }
    assert_eq!(agent.shared.pool().assignments().count(), 8);
    // The released IP cools down until 8 s after its release, across the restart.
    let mut first_ok = None;
    while released_at.elapsed() < Duration::from_secs(12) {
        match c.add_network(add_req("new")).await {
            Ok(r) => {
                first_ok = Some((released_at.elapsed(), r.into_inner().ipv4_addr));
                break;
            }
            Err(s) => assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (after, ip) = first_ok.expect("the cooled-down IP is handed out after its cooldown");
    assert_eq!(ip, released.ipv4_addr);
    assert!(
        after >= Duration::from_secs(8) && after < Duration::from_secs(9),
        "handed out {after:?} after release, cooldown is 8 s"
    );
    agent.shutdown().await;
}
