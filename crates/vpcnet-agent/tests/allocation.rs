//! The agent's allocation behaviour on the paused clock: the in-process agent with the fake
//! cloud (`common::fake_cloud`: the emulator's model behind the agent's EC2 and IMDS seams),
//! gRPC over a temp Unix socket. Warm targets, throttling, IMDS lag, bad input, introspection,
//! prefix delegation, failed attachments and a burst beyond the warm pool. The same agent
//! over the emulator's HTTP API (EC2 Query, IMDSv2) is the contract test in `tests/agent.rs`.

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud, Outcome, Rates};
use common::*;
use vpcnet_agent::{AgentHandle, AgentOptions, Targets};
use vpcnet_ec2::Action;

/// An agent on `fake`'s instance with `opts`, and a gRPC client to it.
async fn start(
    fake: &FakeCloud,
    opts: AgentOptions,
) -> (
    AgentHandle,
    vpcnet_proto::cni_backend_client::CniBackendClient<tonic::transport::Channel>,
) {
    let socket = opts.socket_path.clone();
    let agent = vpcnet_agent::start(opts, fake_deps(fake)).await.unwrap();
    (agent, client(&socket).await)
}

#[tokio::test(start_paused = true)]
async fn warm_ip_target_rolls_cost_at_most_one_call_each() {
    let fake = FakeCloud::new("m5.xlarge");
    let dir = tempfile::tempdir().unwrap();
    let mut o = fake_options(dir.path());
    o.targets = Targets {
        warm_ip_target: Some(5),
        minimum_ip_target: Some(10),
        ..Targets::default()
    };
    o.cooldown = Duration::from_secs(1);
    o.surplus_hold = Duration::from_secs(2);
    o.reconcile_interval = Duration::from_secs(1);
    let (agent, mut c) = start(&fake, o).await;
    for i in 0..10 {
        add_retry(&mut c, &format!("p{i}"), Duration::from_secs(10))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mark = fake.calls().len();
    // 100 rolls: delete one pod, create one, every 50 ms.
    for roll in 0..100 {
        let next = roll + 10;
        c.del_network(del_req(&format!("p{roll}"))).await.unwrap();
        add_retry(&mut c, &format!("p{next}"), Duration::from_secs(10))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the surplus (IPs that cooled down meanwhile) go back to EC2 and count that too.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = fake.calls();
    let mutating: Vec<Action> = calls[mark..]
        .iter()
        .map(|c| c.action)
        .filter(|a| a.is_mutating())
        .collect();
    let per_roll = mutating.len() as f64 / 100.0;
    println!(
        "WARM_IP_TARGET=5 MINIMUM_IP_TARGET=10, 100 pod rolls: {} mutating EC2 calls = {per_roll:.2} per roll: {mutating:?}",
        mutating.len()
    );
    assert!(per_roll <= 1.0, "{per_roll} mutating calls per roll");
    let s = agent.shared.pool().summary(vpcnet_agent::clock::now_ms());
    assert_eq!(s.assigned_ips, 10);
    assert!(s.available_ips >= 5, "{s:?}");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn throttling_and_5xx_50_pods_no_leaks() {
    let fake = FakeCloud::new("m5.2xlarge");
    let dir = tempfile::tempdir().unwrap();
    let (agent, mut c) = start(&fake, fake_options(dir.path())).await;
    // From the first pod on (start-up's own retries are the call layer's, over HTTP: the
    // contract test and the adapters' tests cover them).
    fake.set_rates(
        Rates {
            throttle: 0.30,
            unavailable: 0.05,
            lost_reply: 0.0,
        },
        11,
    );
    let mut ips = BTreeSet::new();
    for i in 0..50 {
        let r = add_retry(&mut c, &format!("f{i}"), Duration::from_secs(300))
            .await
            .unwrap();
        assert!(ips.insert(r.ipv4_addr.clone()), "double assignment");
    }
    // Let the reconciler finish (warm ENI), then compare with EC2 exactly.
    eventually("agent and EC2 agree", Duration::from_secs(30), || {
        agent_enis(&agent) == fake.ec2_enis()
            && agent
                .shared
                .pool()
                .plan(vpcnet_agent::clock::now_ms())
                .is_empty()
    })
    .await;
    assert!(
        fake.detached_enis().is_empty(),
        "leaked ENIs: {:?}",
        fake.detached_enis()
    );
    let ec2_ips = fake.ec2_ips();
    for ip in &ips {
        assert!(ec2_ips.contains(&ip.parse().unwrap()));
    }
    let calls = fake.calls();
    let count = |o: Outcome| calls.iter().filter(|c| c.outcome == o).count();
    let (throttled, unavailable) = (count(Outcome::Throttle), count(Outcome::Unavailable));
    assert!(throttled > 0 && unavailable > 0, "faults were injected");
    println!(
        "fake cloud: {} EC2 calls, {throttled} throttled ({:.0} %), {unavailable} unavailable ({:.0} %); {} ENIs, {} IPs",
        calls.len(),
        100.0 * throttled as f64 / calls.len() as f64,
        100.0 * unavailable as f64 / calls.len() as f64,
        fake.ec2_enis().len(),
        ec2_ips.len()
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn imds_lag_never_hands_out_unlisted_ips() {
    let fake = FakeCloud::new("m5.large");
    fake.set_imds_lag(Duration::from_secs(10));
    let dir = tempfile::tempdir().unwrap();
    let (agent, mut c) = start(&fake, fake_options(dir.path())).await;
    let mut held = Vec::new();
    for i in 0..20 {
        let r = add_retry(&mut c, &format!("l{i}"), Duration::from_secs(20))
            .await
            .unwrap();
        let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
        assert!(
            fake.ec2_ips().contains(&ip),
            "{ip} handed out but EC2 does not list it"
        );
        held.push(ip);
    }
    // Two periodic passes later, every assigned IP is still on the node in EC2.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ec2 = fake.ec2_ips();
    for ip in &held {
        assert!(ec2.contains(ip), "assigned {ip} was released");
    }
    assert_eq!(agent_enis(&agent), fake.ec2_enis());
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn bad_input_and_corrupt_checkpoint() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("ipam.json");
    std::fs::write(&checkpoint, "{ this is not json").unwrap();
    let (agent, mut c) = start(&fake, fake_options(dir.path())).await;
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("ipam.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "bad checkpoint kept aside");
    assert!(
        vpcnet_ipam::Checkpoint::from_json(&std::fs::read_to_string(&checkpoint).unwrap()).is_ok()
    );
    // Rebuilt from EC2: the 9 IPs found on the node cool down (a running pod may hold one),
    // the pool grows around them, so a pod still gets an IP EC2 lists.
    let r = add_retry(&mut c, "x", Duration::from_secs(20))
        .await
        .unwrap();
    assert!(fake.ec2_ips().contains(&r.ipv4_addr.parse().unwrap()));
    let e = c.add_network(add_req("")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("container_id is empty"),
        "{}",
        e.message()
    );
    let d = c
        .del_network(del_req("never-seen"))
        .await
        .unwrap()
        .into_inner();
    assert!(!d.released);
    let s = c
        .status(vpcnet_proto::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(s.available_ips > 0 && s.ready, "{s:?}");
    agent.shutdown().await;
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(start_paused = true)]
async fn introspection_and_metrics() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut o = fake_options(dir.path());
    o.introspection_addr = Some("127.0.0.1:0".parse().unwrap());
    o.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    o.env_settings = vec![("WARM_ENI_TARGET".into(), "1".into())];
    let (agent, mut c) = start(&fake, o).await;
    let r = add_retry(&mut c, "i1", Duration::from_secs(10))
        .await
        .unwrap();
    let intro = agent.introspection_addr.unwrap();
    let h = http_get(intro, "/healthz").await;
    assert!(h.starts_with("HTTP/1.0 200") && h.ends_with("ok\n"), "{h}");
    let enis = http_get(intro, "/v1/enis").await;
    let body: serde_json::Value =
        serde_json::from_str(enis.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["instance_type"], "m5.large");
    let assigned: Vec<_> = body["enis"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["addresses"].as_array().unwrap().clone())
        .filter(|a| !a["assigned"].is_null())
        .collect();
    assert_eq!(assigned.len(), 1);
    assert_eq!(assigned[0]["ip"], r.ipv4_addr.as_str());
    assert_eq!(assigned[0]["assigned"]["container_id"], "i1");
    let env = http_get(intro, "/v1/env-settings").await;
    assert!(env.contains("\"WARM_ENI_TARGET\":\"1\""), "{env}");
    // Per-request EC2 counters come from the SDK adapter: the contract test (tests/agent.rs)
    // checks them.
    let m = http_get(agent.metrics_addr.unwrap(), "/metrics").await;
    assert!(m.contains("awscni_assigned_ip_addresses 1"), "{m}");
    assert!(m.contains("awscni_eni_max 3"), "{m}");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn prefix_delegation_hands_out_addresses_from_28_prefixes() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let mut o = fake_options(dir.path());
    o.targets.prefix_delegation = true;
    let (agent, mut c) = start(&fake, o).await;
    let prefixes = || -> Vec<ipnet::Ipv4Net> {
        fake.with_model(|m| m.enis().flat_map(|e| e.prefixes.clone()).collect())
    };
    // WARM_PREFIX_TARGET=1: one /28 on the primary ENI at start.
    let at_start = prefixes();
    assert_eq!(at_start.len(), 1, "{at_start:?}");
    assert_eq!(at_start[0].prefix_len(), 28);
    let r = add_retry(&mut c, "pd0", Duration::from_secs(10))
        .await
        .unwrap();
    let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
    assert!(at_start[0].contains(&ip), "{ip} not in {}", at_start[0]);
    // One address used → no wholly free prefix → a second /28.
    eventually("second prefix", Duration::from_secs(10), || {
        prefixes().len() == 2
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn failed_attach_deletes_the_new_eni() {
    let fake = FakeCloud::new("m5.large");
    let dir = tempfile::tempdir().unwrap();
    let (agent, mut c) = start(&fake, fake_options(dir.path())).await;
    fake.script(
        Action::AttachNetworkInterface,
        [Outcome::Client("InvalidParameterValue"); 100],
    );
    // The first pod takes the pool below WARM_ENI_TARGET: create succeeds, attach fails.
    add_retry(&mut c, "a0", Duration::from_secs(10))
        .await
        .unwrap();
    eventually(
        "the unattached ENI was deleted",
        Duration::from_secs(10),
        || fake.count(Action::DeleteNetworkInterface) >= 1,
    )
    .await;
    assert!(
        fake.detached_enis().is_empty(),
        "leaked: {:?}",
        fake.detached_enis()
    );
    assert_eq!(agent_enis(&agent), fake.ec2_enis());
    // Once attaching works again the pool grows (the reconciler retries with backoff).
    fake.unscript(Action::AttachNetworkInterface);
    eventually("second ENI attached", Duration::from_secs(20), || {
        fake.ec2_enis().len() == 2
    })
    .await;
    eventually("agent agrees", Duration::from_secs(5), || {
        agent_enis(&agent) == fake.ec2_enis()
    })
    .await;
    assert!(fake.detached_enis().is_empty());
    agent.shutdown().await;
}

/// A burst of ADDs beyond the warm pool while EC2 takes 1 s to attach the next ENI: with
/// `VPCNET_ADD_IP_WAIT` each ADD waits for the pool to grow and succeeds on its first call;
/// with the wait at zero (the VPC CNI's behaviour) the ones beyond the pool fail UNAVAILABLE
/// at once and the runtime would have to retry them.
#[tokio::test(start_paused = true)]
async fn a_burst_beyond_the_warm_pool_waits_for_the_next_eni() {
    for wait in [Duration::from_secs(5), Duration::ZERO] {
        let fake = FakeCloud::new("m5.large");
        let dir = tempfile::tempdir().unwrap();
        let (agent, _) = start(
            &fake,
            AgentOptions {
                add_ip_wait: wait,
                ..fake_options(dir.path())
            },
        )
        .await;
        fake.script(
            Action::AttachNetworkInterface,
            [Outcome::Delay(Duration::from_secs(1)); 10],
        );
        // m5.large: the primary ENI's 9 secondary IPs are free; 14 pods at once need the
        // second ENI, which attaches 1 s after it is asked for.
        let mut calls = Vec::new();
        for i in 0..14 {
            let mut c = client(&dir.path().join("agent.sock")).await;
            calls.push(tokio::spawn(async move {
                c.add_network(add_req(&format!("b{i}"))).await
            }));
        }
        let mut ok = BTreeSet::new();
        let mut unavailable = 0;
        for call in calls {
            match call.await.unwrap() {
                Ok(r) => assert!(ok.insert(r.into_inner().ipv4_addr), "IP handed out twice"),
                Err(s) => {
                    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
                    unavailable += 1;
                }
            }
        }
        if wait.is_zero() {
            assert!(
                unavailable >= 5,
                "without the wait, the ADDs beyond the 9 free IPs fail at once ({unavailable} did)"
            );
        } else {
            assert_eq!(
                (ok.len(), unavailable),
                (14, 0),
                "with the wait, every ADD of the burst gets an address on its first call"
            );
        }
        agent.shutdown().await;
    }
}
