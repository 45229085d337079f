//! Cloud faults against the in-process fake cloud (the emulator's model behind the agent's
//! EC2/IMDS seams) on tokio's paused clock: lost replies, throttling, hanging calls and
//! shutdown, with no real sleeping.

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud, Outcome, Rates};
use common::*;
use vpcnet_ec2::Action;

fn pool_ips(agent: &vpcnet_agent::AgentHandle) -> BTreeSet<Ipv4Addr> {
    agent_enis(agent).into_values().flatten().collect()
}

/// ADDs `ids` one by one (each retried while UNAVAILABLE for up to `within`); the addresses.
async fn add_all(
    c: &mut vpcnet_proto::cni_backend_client::CniBackendClient<tonic::transport::Channel>,
    ids: impl IntoIterator<Item = String>,
    within: Duration,
) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    for id in ids {
        let r = add_retry(c, &id, within)
            .await
            .unwrap_or_else(|e| panic!("ADD {id}: {e:?}"));
        out.push(r.ipv4_addr.parse().unwrap());
    }
    out
}

/// ADDs during a window in which the reconciler cannot settle anything: each either gets an
/// address at once or fails UNAVAILABLE after the ADD wait (RESOURCE_EXHAUSTED once the
/// node is at its limit).
async fn adds_in_window(
    c: &mut vpcnet_proto::cni_backend_client::CniBackendClient<tonic::transport::Channel>,
    prefix: &str,
    n: usize,
) -> Vec<Ipv4Addr> {
    let mut got = Vec::new();
    for i in 0..n {
        match c.add_network(add_req(&format!("{prefix}{i}"))).await {
            Ok(r) => got.push(r.into_inner().ipv4_addr.parse().unwrap()),
            Err(s) => assert!(
                matches!(
                    s.code(),
                    tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                ),
                "{s:?}"
            ),
        }
    }
    got
}

#[tokio::test(start_paused = true)]
async fn a_lost_unassign_reply_keeps_the_addresses_out_of_service_until_a_describe() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.targets.warm_ip_target = Some(2);
    opts.add_ip_wait = Duration::from_secs(1);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    let ids: Vec<String> = (0..6).map(|i| format!("p{i}")).collect();
    add_all(&mut c, ids.clone(), Duration::from_secs(30)).await;
    eventually("pool grown", Duration::from_secs(30), || {
        pool_ips(&agent).len() >= 8
    })
    .await;
    for id in &ids {
        c.del_network(del_req(id)).await.unwrap();
    }
    let before = pool_ips(&agent);
    // The surplus release is applied by EC2, its reply lost; the describe that would settle
    // it answers only 20 s later.
    fake.script(Action::UnassignPrivateIpAddresses, [Outcome::LostReply]);
    fake.after(
        Action::UnassignPrivateIpAddresses,
        Action::DescribeNetworkInterfaces,
        vec![Outcome::Delay(Duration::from_secs(20))],
    );
    eventually("surplus released", Duration::from_secs(120), || {
        fake.count(Action::UnassignPrivateIpAddresses) >= 1
    })
    .await;
    let released: BTreeSet<Ipv4Addr> = before.difference(&fake.ec2_ips()).copied().collect();
    assert!(!released.is_empty(), "EC2 applied the release");
    let got = adds_in_window(&mut c, "w", before.len()).await;
    for ip in &got {
        assert!(
            !released.contains(ip),
            "{ip} handed out while EC2 may have unassigned it (no describe yet)"
        );
    }
    // Once the describe has settled them, the pool is EC2's view again.
    eventually("agent and EC2 agree", Duration::from_secs(60), || {
        agent_enis(&agent) == fake.ec2_enis() && !agent.shared.pool().has_unsettled()
    })
    .await;
    assert!(pool_ips(&agent).is_disjoint(&released));
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_delete_eni_reply_keeps_its_addresses_out_of_service_until_a_describe() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.add_ip_wait = Duration::from_secs(1);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    // Enough pods for a third ENI (9 secondary addresses each).
    let ids: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    add_all(&mut c, ids.clone(), Duration::from_secs(60)).await;
    eventually("three ENIs", Duration::from_secs(60), || {
        agent_enis(&agent).len() == 3
    })
    .await;
    for id in &ids {
        c.del_network(del_req(id)).await.unwrap();
    }
    let before = agent_enis(&agent);
    fake.script(Action::DeleteNetworkInterface, [Outcome::LostReply]);
    fake.after(
        Action::DeleteNetworkInterface,
        Action::DescribeNetworkInterfaces,
        vec![Outcome::Delay(Duration::from_secs(20))],
    );
    eventually("surplus ENI deleted", Duration::from_secs(120), || {
        fake.count(Action::DeleteNetworkInterface) >= 1
    })
    .await;
    let now = fake.ec2_enis();
    let gone: Vec<_> = before.keys().filter(|e| !now.contains_key(*e)).collect();
    assert_eq!(gone.len(), 1, "EC2 deleted one ENI: {before:?} → {now:?}");
    let released = before[gone[0]].clone();
    let got = adds_in_window(&mut c, "w", 20).await;
    for ip in &got {
        assert!(
            !released.contains(ip),
            "{ip} of a deleted ENI handed out (no describe yet)"
        );
    }
    eventually("agent and EC2 agree", Duration::from_secs(60), || {
        agent_enis(&agent) == fake.ec2_enis() && !agent.shared.pool().has_unsettled()
    })
    .await;
    assert!(fake.detached_enis().is_empty(), "no ENI leaked");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn throttling_backs_off_with_jitter_and_converges() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let agent = vpcnet_agent::start(fake_options(dir.path()), fake_deps(&fake))
        .await
        .unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    fake.set_rates(
        Rates {
            throttle: 0.25,
            unavailable: 0.05,
            lost_reply: 0.0,
        },
        13,
    );
    let t0 = tokio::time::Instant::now();
    let ids: Vec<String> = (0..25).map(|i| format!("p{i}")).collect();
    let ips = add_all(&mut c, ids, Duration::from_secs(600)).await;
    assert_eq!(
        ips.iter().collect::<BTreeSet<_>>().len(),
        25,
        "no address twice"
    );
    eventually("agent and EC2 agree", Duration::from_secs(120), || {
        agent_enis(&agent) == fake.ec2_enis()
    })
    .await;
    let calls = fake.calls();
    // For every faulted call, the wait until the same action was tried again.
    let failed: Vec<Duration> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.at >= t0 && matches!(c.outcome, Outcome::Throttle | Outcome::Unavailable)
        })
        .filter_map(|(i, c)| {
            calls[i + 1..]
                .iter()
                .find(|n| n.action == c.action)
                .map(|n| n.at - c.at)
        })
        .collect();
    assert!(failed.len() >= 5, "faults injected: {}", failed.len());
    // Every retry after a fault waited (10 ms is the shortest first delay of any loop: the
    // attachment polls), and the waits are spread by jitter rather than all alike.
    assert!(
        failed.iter().all(|d| *d >= Duration::from_millis(10)),
        "a retry without backoff: {failed:?}"
    );
    let distinct: BTreeSet<_> = failed.iter().collect();
    assert!(distinct.len() > failed.len() / 2, "no jitter: {failed:?}");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_create_eni_reply_does_not_leak_the_eni() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.leaked_eni_sweep_interval = Duration::from_secs(300);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    fake.script(Action::CreateNetworkInterface, [Outcome::LostReply]);
    let ids: Vec<String> = (0..15).map(|i| format!("p{i}")).collect();
    add_all(&mut c, ids, Duration::from_secs(60)).await;
    eventually("third ENI attached", Duration::from_secs(60), || {
        fake.ec2_enis().len() == 3
    })
    .await;
    let leaked = fake.detached_enis();
    assert_eq!(leaked.len(), 1, "the ENI behind the lost reply exists");
    // Younger than 5 minutes at the next sweep; deleted by a later one.
    tokio::time::sleep(Duration::from_secs(240)).await;
    assert_eq!(fake.detached_enis(), leaked, "swept before the age guard");
    eventually("leaked ENI swept", Duration::from_secs(420), || {
        fake.detached_enis().is_empty()
    })
    .await;
    assert_eq!(agent_enis(&agent), fake.ec2_enis());
    agent.shutdown().await;
}

/// The sweep never races creation: an ENI whose attachment takes longer than the sweep's age
/// guard (created, still detached, older than 5 minutes) is not deleted by a sweep that runs
/// meanwhile, because create→attach and the sweep hold the same ENI lifecycle lock.
#[tokio::test(start_paused = true)]
async fn the_sweep_waits_for_an_eni_being_attached() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.leaked_eni_sweep_interval = Duration::from_secs(60);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    // The second ENI attaches at once; the third's attachment takes 7 minutes.
    fake.script(
        Action::AttachNetworkInterface,
        [Outcome::Ok, Outcome::Delay(Duration::from_secs(420))],
    );
    fill_to_third_eni(&fake, &mut c).await;
    // Six sweeps run while the third ENI is detached, the last ones past its age guard.
    tokio::time::sleep(Duration::from_secs(400)).await;
    assert_eq!(
        fake.count(Action::DeleteNetworkInterface),
        0,
        "the sweep deleted the ENI being attached"
    );
    eventually("third ENI attached", Duration::from_secs(120), || {
        fake.ec2_enis().len() == 3
    })
    .await;
    assert!(fake.detached_enis().is_empty());
    eventually("agent and EC2 agree", Duration::from_secs(60), || {
        agent_enis(&agent) == fake.ec2_enis()
    })
    .await;
    agent.shutdown().await;
}

/// Pods on the primary ENI and one on a second, so that the next fill creates a third ENI
/// (the second create call of the agent: the pool starts with the primary ENI's 9 addresses).
async fn fill_to_third_eni(
    fake: &FakeCloud,
    c: &mut vpcnet_proto::cni_backend_client::CniBackendClient<tonic::transport::Channel>,
) -> Vec<String> {
    let ids: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    add_all(c, ids.clone(), Duration::from_secs(30)).await;
    eventually("third ENI asked for", Duration::from_secs(30), || {
        fake.count(Action::CreateNetworkInterface) >= 2
    })
    .await;
    ids
}

fn checkpointed_pods(dir: &std::path::Path) -> BTreeSet<String> {
    match vpcnet_agent::checkpoint_file::load(&dir.join("ipam.json"), vpcnet_agent::clock::now_ms())
    {
        vpcnet_agent::checkpoint_file::Loaded::Valid(cp) => cp
            .assignments
            .iter()
            .map(|a| a.container_id.clone())
            .collect(),
        other => panic!("checkpoint not valid: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn sigterm_during_a_hanging_create_stops_within_the_bound() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.shutdown_timeout = Duration::from_secs(5);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    fake.script(Action::CreateNetworkInterface, [Outcome::Ok, Outcome::Hang]);
    let ids = fill_to_third_eni(&fake, &mut c).await;
    drop(c);
    let t0 = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), agent.shutdown())
        .await
        .expect("shutdown bounded");
    let took = t0.elapsed();
    assert!(
        took <= Duration::from_secs(6),
        "shutdown took {took:?} with a 5 s bound"
    );
    // The checkpoint holds exactly the pods that got addresses.
    assert_eq!(checkpointed_pods(dir.path()), ids.into_iter().collect());
    assert!(
        fake.detached_enis().is_empty(),
        "the hung create made nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn an_eni_created_but_not_attached_at_shutdown_is_left_for_the_sweep() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.shutdown_timeout = Duration::from_secs(5);
    let agent = vpcnet_agent::start(opts.clone(), fake_deps(&fake))
        .await
        .unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    // EC2 creates the ENI at once but answers after a minute: the agent is stopped first.
    fake.script(
        Action::CreateNetworkInterface,
        [Outcome::Ok, Outcome::SlowReply(Duration::from_secs(60))],
    );
    let ids = fill_to_third_eni(&fake, &mut c).await;
    drop(c);
    let t0 = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), agent.shutdown())
        .await
        .expect("shutdown bounded");
    assert!(t0.elapsed() <= Duration::from_secs(6), "{:?}", t0.elapsed());
    assert_eq!(checkpointed_pods(dir.path()), ids.iter().cloned().collect());
    let leaked = fake.detached_enis();
    assert_eq!(leaked.len(), 1, "created, never attached");
    let tags = fake.with_model(|m| m.eni(&leaked[0]).unwrap().tags.clone());
    assert!(
        tags.get("node.k8s.amazonaws.com/createdAt").is_some()
            && tags.get("node.k8s.amazonaws.com/instance_id") == Some(fake.instance_id()),
        "tagged for the sweep: {tags:?}"
    );
    // The next agent keeps the pods and sweeps the ENI once it is 5 minutes old.
    opts.leaked_eni_sweep_interval = Duration::from_secs(60);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    assert_eq!(agent.shared.pool().assignments().count(), ids.len());
    eventually("leaked ENI swept", Duration::from_secs(420), || {
        !fake.detached_enis().contains(&leaked[0])
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_ec2_errors_cause_reaches_the_reported_error() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.targets.warm_ip_target = Some(2);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    fake.script(
        Action::AssignPrivateIpAddresses,
        [Outcome::Transport("connection reset by peer (injected)"); 5],
    );
    c.add_network(add_req("p0")).await.unwrap();
    let reported = || agent.shared.health().last_error();
    eventually(
        "the failed pass reports the cause",
        Duration::from_secs(10),
        || {
            reported().is_some_and(|e| {
                e.contains("AssignPrivateIpAddresses")
                    && e.contains("connection reset by peer (injected)")
            })
        },
    )
    .await;
    agent.shutdown().await;
}
