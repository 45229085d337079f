//! Issue 3 acceptance, the contract test over HTTP: the in-process agent against the emulator
//! over its HTTP API (EC2 Query, IMDSv2), gRPC over a temp Unix socket. Restart and cooldown
//! run on the paused clock with the fake cloud (`tests/restart.rs`).

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use vpcnet_agent::AgentDeps;

use common::*;
use vpcnet_agent::Targets;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m5_large_defaults_fill_27_pods_then_limit() {
    let lab = lab("m5.large").await;
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    // m5.large: 3 ENIs × 10 IPv4 (9 for pods each); WARM_ENI_TARGET=1 keeps one ENI's worth
    // (9) of free IPs. Fresh node: the primary ENI with 9 secondary IPs, nothing else.
    let enis = lab.ec2_enis();
    assert_eq!(enis.len(), 1, "{enis:?}");
    assert_eq!(enis.values().next().unwrap().len(), 9);
    assert_eq!(agent_enis(&agent), enis);
    // Files: socket 0660, checkpoint 0600, conflist written once the pool can serve.
    assert_eq!(
        std::fs::metadata(lab.socket())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o660
    );
    assert_eq!(
        std::fs::metadata(lab.checkpoint())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let conflist =
        std::fs::read_to_string(lab.dir.path().join("net.d/10-vpcnet.conflist")).unwrap();
    assert!(
        conflist.contains(&lab.socket().display().to_string()),
        "{conflist}"
    );

    let mut c = client(&lab.socket()).await;
    let mut ips = BTreeSet::new();
    for i in 0..27 {
        let r = add_retry(&mut c, &format!("c{i}"), Duration::from_secs(20))
            .await
            .unwrap();
        let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
        assert!(ips.insert(ip), "IP {ip} handed out twice");
        assert!(lab.ec2_ips().contains(&ip), "{ip} not listed by EC2");
        // Route table: 0 for the primary ENI (eth0), else device number + 1 (the VPC CNI's).
        let expect_table = if r.device_number == 0 {
            0
        } else {
            r.device_number + 1
        };
        assert_eq!(r.route_table, expect_table);
        assert_eq!(r.vpc_cidrs, vec!["10.0.0.0/16".to_string()]);
        if i == 0 {
            // First pod: 8 free < 9 → a second ENI with 9 IPs.
            eventually(
                "2 ENIs / 18 IPs after the first pod",
                Duration::from_secs(10),
                || {
                    let e = lab.ec2_enis();
                    e.len() == 2 && e.values().map(|s| s.len()).sum::<usize>() == 18
                },
            )
            .await;
        }
        if i == 9 {
            // Tenth pod: 8 free again → the third ENI.
            eventually(
                "3 ENIs / 27 IPs after the tenth pod",
                Duration::from_secs(10),
                || {
                    let e = lab.ec2_enis();
                    e.len() == 3 && e.values().map(|s| s.len()).sum::<usize>() == 27
                },
            )
            .await;
        }
    }
    assert_eq!(ips.len(), 27);
    // ENIs the agent created: description prefix, tags, DeleteOnTermination.
    let created: Vec<_> = lab
        .emu
        .enis()
        .into_iter()
        .filter(|e| e.attachment.as_ref().is_some_and(|a| a.device_index > 0))
        .collect();
    assert_eq!(created.len(), 2);
    for e in &created {
        assert!(
            e.description.starts_with("vpcnet-cni: "),
            "{}",
            e.description
        );
        let tag = |k: &str| {
            e.tags
                .iter()
                .find(|(tk, _)| tk == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            tag("node.k8s.amazonaws.com/instance_id"),
            Some(lab.instance.instance_id.clone())
        );
        assert_eq!(tag("cluster.k8s.amazonaws.com/name"), Some("lab".into()));
        assert!(tag("node.k8s.amazonaws.com/createdAt").is_some());
        assert!(e.attachment.as_ref().unwrap().delete_on_termination);
    }
    let err = c.add_network(add_req("c27")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("ENI/IP limit")
            && err.message().contains("m5.large")
            && err.message().contains("3 ENIs"),
        "{}",
        err.message()
    );
    // Idempotent ADD returns the same IP.
    let again = c.add_network(add_req("c3")).await.unwrap().into_inner();
    assert!(ips.contains(&again.ipv4_addr.parse().unwrap()));
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_ip_target_rolls_cost_at_most_one_call_each() {
    let lab = lab("m5.xlarge").await;
    let mut o = lab.options();
    o.targets = Targets {
        warm_ip_target: Some(5),
        minimum_ip_target: Some(10),
        ..Targets::default()
    };
    o.cooldown = Duration::from_secs(1);
    o.surplus_hold = Duration::from_secs(2);
    o.reconcile_interval = Duration::from_secs(1);
    let agent = vpcnet_agent::start(o, AgentDeps::default()).await.unwrap();
    let mut c = client(&lab.socket()).await;
    for i in 0..10 {
        add_retry(&mut c, &format!("p{i}"), Duration::from_secs(10))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    lab.emu.reset_calls();
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
    let calls = lab.emu.calls();
    let per_roll = calls.mutating as f64 / 100.0;
    println!("WARM_IP_TARGET=5 MINIMUM_IP_TARGET=10, 100 pod rolls: {} mutating EC2 calls = {per_roll:.2} per roll; by action: {:?}", calls.mutating, calls.per_action);
    assert!(per_roll <= 1.0, "{per_roll} mutating calls per roll");
    let s = agent.shared.pool().summary(vpcnet_agent::clock::now_ms());
    assert_eq!(s.assigned_ips, 10);
    assert!(s.available_ips >= 5, "{s:?}");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_and_5xx_50_pods_no_leaks() {
    let mut lab = lab("m5.2xlarge").await;
    let (front, counts) = faulty_front(lab.emu.clone(), 0.30, 0.05, 11).await;
    lab.endpoint = front;
    let mut o = lab.options();
    o.ec2_calls.retry.max_attempts = 8;
    let agent = vpcnet_agent::start(o, AgentDeps::default()).await.unwrap();
    let mut c = client(&lab.socket()).await;
    let mut ips = BTreeSet::new();
    for i in 0..50 {
        let r = add_retry(&mut c, &format!("f{i}"), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(ips.insert(r.ipv4_addr.clone()), "double assignment");
    }
    // Let the reconciler finish (warm ENI), then compare with EC2 exactly.
    eventually("agent and EC2 agree", Duration::from_secs(30), || {
        agent_enis(&agent) == lab.ec2_enis()
            && agent
                .shared
                .pool()
                .plan(vpcnet_agent::clock::now_ms())
                .is_empty()
    })
    .await;
    assert!(
        lab.detached_enis().is_empty(),
        "leaked ENIs: {:?}",
        lab.detached_enis()
    );
    let ec2_ips = lab.ec2_ips();
    for ip in &ips {
        assert!(ec2_ips.contains(&ip.parse().unwrap()));
    }
    use std::sync::atomic::Ordering::Relaxed;
    println!(
        "fault front: {} EC2 requests, {} throttled ({:.0} %), {} InternalError ({:.0} %); {} ENIs, {} IPs",
        counts.total.load(Relaxed),
        counts.throttled.load(Relaxed),
        100.0 * counts.throttled.load(Relaxed) as f64 / counts.total.load(Relaxed) as f64,
        counts.server_errors.load(Relaxed),
        100.0 * counts.server_errors.load(Relaxed) as f64 / counts.total.load(Relaxed) as f64,
        lab.ec2_enis().len(),
        ec2_ips.len()
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imds_lag_never_hands_out_unlisted_ips() {
    let lab = lab("m5.large").await;
    lab.emu
        .set_imds_lag(Some(&lab.instance.instance_id), Duration::from_secs(10));
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    let mut c = client(&lab.socket()).await;
    let mut held = Vec::new();
    for i in 0..20 {
        let r = add_retry(&mut c, &format!("l{i}"), Duration::from_secs(20))
            .await
            .unwrap();
        let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
        assert!(
            lab.ec2_ips().contains(&ip),
            "{ip} handed out but EC2 does not list it"
        );
        held.push(ip);
    }
    // Two periodic passes later, every assigned IP is still on the node in EC2.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ec2 = lab.ec2_ips();
    for ip in &held {
        assert!(ec2.contains(ip), "assigned {ip} was released");
    }
    assert_eq!(agent_enis(&agent), lab.ec2_enis());
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_corrupt_checkpoint() {
    let lab = lab("m5.large").await;
    std::fs::write(lab.checkpoint(), "{ this is not json").unwrap();
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    let aside: Vec<_> = std::fs::read_dir(lab.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("ipam.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "bad checkpoint kept aside");
    assert!(vpcnet_ipam::Checkpoint::from_json(
        &std::fs::read_to_string(lab.checkpoint()).unwrap()
    )
    .is_ok());
    let mut c = client(&lab.socket()).await;
    // Rebuilt from EC2: the 9 IPs found on the node cool down (a running pod may hold one),
    // the pool grows around them, so a pod still gets an IP EC2 lists.
    let r = add_retry(&mut c, "x", Duration::from_secs(20))
        .await
        .unwrap();
    assert!(lab.ec2_ips().contains(&r.ipv4_addr.parse().unwrap()));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn introspection_and_metrics() {
    let lab = lab("m5.large").await;
    let mut o = lab.options();
    o.introspection_addr = Some("127.0.0.1:0".parse().unwrap());
    o.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    o.env_settings = vec![("WARM_ENI_TARGET".into(), "1".into())];
    let agent = vpcnet_agent::start(o, AgentDeps::default()).await.unwrap();
    let mut c = client(&lab.socket()).await;
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
    let m = http_get(agent.metrics_addr.unwrap(), "/metrics").await;
    assert!(m.contains("awscni_assigned_ip_addresses 1"), "{m}");
    assert!(m.contains("awscni_eni_max 3"), "{m}");
    assert!(m.contains("awscni_ec2api_req_count"), "{m}");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_delegation_hands_out_addresses_from_28_prefixes() {
    let lab = lab("m5.large").await;
    let mut o = lab.options();
    o.targets.prefix_delegation = true;
    let agent = vpcnet_agent::start(o, AgentDeps::default()).await.unwrap();
    // WARM_PREFIX_TARGET=1: one /28 on the primary ENI at start.
    let prefixes: Vec<ipnet::Ipv4Net> = lab
        .emu
        .enis()
        .into_iter()
        .flat_map(|e| e.prefixes)
        .collect();
    assert_eq!(prefixes.len(), 1, "{prefixes:?}");
    assert_eq!(prefixes[0].prefix_len(), 28);
    let mut c = client(&lab.socket()).await;
    let r = add_retry(&mut c, "pd0", Duration::from_secs(10))
        .await
        .unwrap();
    let ip: Ipv4Addr = r.ipv4_addr.parse().unwrap();
    assert!(prefixes[0].contains(&ip), "{ip} not in {}", prefixes[0]);
    // One address used → no wholly free prefix → a second /28.
    eventually("second prefix", Duration::from_secs(10), || {
        lab.emu
            .enis()
            .iter()
            .map(|e| e.prefixes.len())
            .sum::<usize>()
            == 2
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attach_deletes_the_new_eni() {
    let lab = lab("m5.large").await;
    let agent = vpcnet_agent::start(lab.options(), AgentDeps::default())
        .await
        .unwrap();
    lab.emu
        .set_action_faults(
            "AttachNetworkInterface",
            Some(vpcnet_emu::ActionFaults::default().error(1.0, "InvalidParameterValue")),
        )
        .unwrap();
    let mut c = client(&lab.socket()).await;
    // The first pod takes the pool below WARM_ENI_TARGET: create succeeds, attach fails.
    add_retry(&mut c, "a0", Duration::from_secs(10))
        .await
        .unwrap();
    eventually(
        "the unattached ENI was deleted",
        Duration::from_secs(10),
        || {
            lab.emu
                .calls()
                .per_action
                .get("DeleteNetworkInterface")
                .copied()
                .unwrap_or(0)
                >= 1
        },
    )
    .await;
    assert!(
        lab.detached_enis().is_empty(),
        "leaked: {:?}",
        lab.detached_enis()
    );
    assert_eq!(agent_enis(&agent), lab.ec2_enis());
    // Once attaching works again the pool grows (the reconciler retries with backoff).
    lab.emu
        .set_action_faults("AttachNetworkInterface", None)
        .unwrap();
    eventually("second ENI attached", Duration::from_secs(20), || {
        lab.ec2_enis().len() == 2
    })
    .await;
    eventually("agent agrees", Duration::from_secs(5), || {
        agent_enis(&agent) == lab.ec2_enis()
    })
    .await;
    assert!(lab.detached_enis().is_empty());
    agent.shutdown().await;
}

/// A burst of ADDs beyond the warm pool while EC2 takes 1 s to attach the next ENI: with
/// `VPCNET_ADD_IP_WAIT` each ADD waits for the pool to grow and succeeds on its first call;
/// with the wait at zero (the VPC CNI's behaviour) the ones beyond the pool fail UNAVAILABLE
/// at once and the runtime would have to retry them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beyond_the_warm_pool_waits_for_the_next_eni() {
    for wait in [Duration::from_secs(5), Duration::ZERO] {
        let lab = lab("m5.large").await;
        let agent = vpcnet_agent::start(
            vpcnet_agent::AgentOptions {
                add_ip_wait: wait,
                ..lab.options()
            },
            AgentDeps::default(),
        )
        .await
        .unwrap();
        lab.emu
            .set_action_faults(
                "AttachNetworkInterface",
                Some(vpcnet_emu::ActionFaults::default().latency(Duration::from_secs(1))),
            )
            .unwrap();
        // m5.large: the primary ENI's 9 secondary IPs are free; 14 pods at once need the
        // second ENI, which attaches 1 s after it is asked for.
        let mut calls = Vec::new();
        for i in 0..14 {
            let mut c = client(&lab.socket()).await;
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
