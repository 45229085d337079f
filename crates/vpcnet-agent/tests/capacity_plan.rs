//! `vpcnet plan`'s node model against the real agent: the planner settles the IPAM core
//! against a cloud that grants every request at once (`vpcnet_capacity::node::settle`) and
//! counts the EC2 calls it believes the agent makes for each step
//! (`vpcnet_capacity::calls`). Here the agent itself runs, on the fake cloud (the
//! emulator's model) with attachments completing at once and the paused clock, pods added one
//! at a time; the addresses it ends up holding and the calls it made must be the planner's.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud};
use common::*;
use vpcnet_agent::Targets;
use vpcnet_capacity::WarmSettings;

struct Case {
    instance_type: &'static str,
    pods: u32,
    targets: Targets,
    settings: &'static str,
}

async fn check(case: Case) {
    let fake = FakeCloud::new(case.instance_type);
    fake.set_attach_delay(Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let mut opts = fake_options(dir.path());
    opts.targets = case.targets;
    // The chart's default (ENABLE_SUBNET_DISCOVERY=true), as the planner assumes.
    opts.subnet_discovery = true;
    // The planner counts the join's calls; the leaked-ENI sweep's first describe comes at a
    // random time within FIRST_SWEEP_SPREAD of the start, not in the join.
    opts.sweep_leaked_enis = false;
    let socket = opts.socket_path.clone();
    let agent = vpcnet_agent::start(opts, fake_deps(&fake)).await.unwrap();
    let mut c = client(&socket).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for i in 0..case.pods {
        add_retry(&mut c, &format!("p{i}"), Duration::from_secs(30))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;

    let settings: WarmSettings = serde_json::from_str(case.settings).unwrap();
    let limits = vpcnet_limits::lookup(case.instance_type).unwrap();
    let cfg = settings.warm_config(limits, true).unwrap();
    let planned =
        vpcnet_capacity::node::settle(&cfg, case.pods, settings.subnet_discovery()).unwrap();

    let enis = fake.attached_enis();
    let held: u32 = enis
        .iter()
        .map(|e| 1 + e.secondary_ips.len() as u32 + 16 * e.prefixes.len() as u32)
        .sum();
    let mut made: BTreeMap<&str, u64> = BTreeMap::new();
    for call in fake.calls() {
        *made.entry(call.action.as_str()).or_default() += 1;
    }
    let want: BTreeMap<&str, u64> = planned.calls.iter().collect();
    let label = format!(
        "{} with {} pods, {}",
        case.instance_type, case.pods, case.settings
    );
    assert_eq!(
        (enis.len(), held),
        (planned.enis.len(), planned.addresses()),
        "{label}: ENIs and subnet addresses, agent vs planner"
    );
    assert_eq!(made, want, "{label}: EC2 calls by action, agent vs planner");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_default_warm_eni_target() {
    check(Case {
        instance_type: "m5.large",
        pods: 12,
        targets: Targets::default(),
        settings: "{}",
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn warm_and_minimum_ip_targets() {
    check(Case {
        instance_type: "m5.xlarge",
        pods: 7,
        targets: Targets {
            warm_ip_target: Some(3),
            minimum_ip_target: Some(5),
            ..Targets::default()
        },
        settings: r#"{"WARM_IP_TARGET": "3", "MINIMUM_IP_TARGET": "5"}"#,
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn prefix_delegation() {
    check(Case {
        instance_type: "m5.large",
        pods: 20,
        targets: Targets {
            prefix_delegation: true,
            ..Targets::default()
        },
        settings: r#"{"ENABLE_PREFIX_DELEGATION": "true"}"#,
    })
    .await;
}

/// The simulator's model of the agent's rate-limit behaviour (`vpcnet plan --simulate`) uses
/// the agent's defaults: its client-side buckets, its retries on throttling, its throttle
/// pacing and when its first leaked-ENI sweep comes.
#[test]
fn the_simulators_agent_policy_is_the_agents_defaults() {
    let sim = vpcnet_capacity::sim::AgentPolicy::default();
    let agent = vpcnet_agent::config::Config::default().ec2_call_settings();
    let bucket = |b: vpcnet_aws::BucketConfig| (b.capacity, b.refill_per_sec);
    let spec = |b: vpcnet_limits::api_rates::BucketSpec| (b.capacity, b.refill_per_sec);
    assert_eq!(bucket(agent.describe_bucket), spec(sim.describe_bucket));
    assert_eq!(bucket(agent.mutating_bucket), spec(sim.mutating_bucket));
    assert_eq!(agent.retry.max_attempts, sim.max_attempts);
    assert_eq!(
        agent.operation_timeout,
        Duration::from_millis(sim.operation_timeout_ms)
    );
    assert_eq!(
        agent.retry.throttle_base_delay,
        Duration::from_millis(sim.throttle_base_ms)
    );
    assert_eq!(
        agent.retry.max_delay,
        Duration::from_millis(sim.max_delay_ms)
    );
    let pace = sim
        .pace
        .expect("the simulator's agent paces throttles, as the agent");
    assert_eq!(
        agent.pace,
        vpcnet_ec2::PaceConfig {
            base: Duration::from_millis(pace.base_ms),
            max: Duration::from_millis(pace.max_ms),
        }
    );
    let opts = vpcnet_agent::options_from_config(&vpcnet_agent::config::Config::default()).unwrap();
    assert!(!sim.sweep_at_start);
    assert_eq!(
        opts.leaked_eni_first_sweep_spread,
        Duration::from_millis(vpcnet_capacity::sim::FIRST_SWEEP_SPREAD_MS)
    );
}
