//! EC2 calls of an idle node, against the in-process fake cloud on tokio's paused clock: the
//! periodic pass checks the attached ENIs in IMDS and describes them in EC2 only when IMDS
//! disagrees with the pool, or at the safety interval; the leaked-ENI sweep runs hourly.

mod common;

use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, Call, FakeCloud};
use common::*;
use vpcnet_ec2::Action;

fn since(fake: &FakeCloud, mark: usize) -> Vec<Call> {
    fake.calls().split_off(mark)
}

fn describes(calls: &[Call]) -> usize {
    calls
        .iter()
        .filter(|c| c.action == Action::DescribeNetworkInterfaces)
        .count()
}

#[tokio::test(start_paused = true)]
async fn an_idle_node_makes_no_ec2_call_and_imds_drift_costs_one_describe() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    // The shipped defaults: a periodic pass every 30 s, the safety describe and the
    // leaked-ENI sweep hourly.
    let defaults = vpcnet_agent::AgentOptions::default();
    opts.reconcile_interval = defaults.reconcile_interval;
    assert_eq!(opts.reconcile_interval, Duration::from_secs(30));
    assert_eq!(opts.ec2_reconcile_interval, Duration::from_secs(3600));
    assert_eq!(opts.leaked_eni_sweep_interval, Duration::from_secs(3600));
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let mut c = client(&dir.path().join("agent.sock")).await;
    for i in 0..3 {
        add_retry(&mut c, &format!("p{i}"), Duration::from_secs(30))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(60)).await;

    // Ten idle minutes: twenty periodic passes, each reading IMDS, none calling EC2.
    let mark = fake.calls().len();
    let reads = fake.imds_reads();
    tokio::time::sleep(Duration::from_secs(600)).await;
    let idle = since(&fake, mark);
    assert!(idle.is_empty(), "EC2 calls of an idle node: {idle:?}");
    assert!(
        fake.imds_reads() - reads >= 19,
        "the drift check read IMDS {} times in 10 minutes",
        fake.imds_reads() - reads
    );

    // A free address leaves the primary ENI behind the agent's back: IMDS shows it at the
    // next periodic pass, which describes once and adopts EC2's view.
    let assigned: Vec<_> = agent
        .shared
        .pool()
        .assignments()
        .map(|(_, a)| a.ip)
        .collect();
    let (primary, gone) = agent
        .shared
        .pool()
        .enis()
        .find(|e| e.info.primary)
        .map(|e| {
            let free = e.ips.keys().find(|ip| !assigned.contains(ip)).copied();
            (e.info.id.clone(), free.expect("a free address"))
        })
        .unwrap();
    let mark = fake.calls().len();
    fake.with_model(|m| m.unassign(&primary, &[gone], &[]).unwrap());
    eventually(
        "the agent drops the address",
        Duration::from_secs(31),
        || {
            !agent
                .shared
                .pool()
                .eni(&primary)
                .unwrap()
                .ips
                .contains_key(&gone)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    let after = since(&fake, mark);
    assert_eq!(describes(&after), 1, "describes after the drift: {after:?}");
    assert_eq!(agent_enis(&agent), fake.ec2_enis());
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_safety_describe_runs_at_its_interval_while_imds_agrees() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.reconcile_interval = Duration::from_secs(30);
    opts.ec2_reconcile_interval = Duration::from_secs(300);
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let mark = fake.calls().len();
    // Safety describes at about 5, 10 and 15 minutes after start (each on the first periodic
    // pass once due), nothing else.
    tokio::time::sleep(Duration::from_secs(1040)).await;
    let calls = since(&fake, mark);
    assert_eq!(describes(&calls), 3, "{calls:?}");
    assert_eq!(calls.len(), 3, "{calls:?}");
    agent.shutdown().await;
}
