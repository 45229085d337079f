//! `ENABLE_IMDS_ONLY_MODE` and `DISABLE_NETWORK_RESOURCE_PROVISIONING` with the real
//! `vpcnet-agent` binary against the emulator. Addresses are attached to the instance before
//! the agent starts (through the emulator's EC2, as whoever provisions them would); the agent
//! must serve pods from exactly those, fail an ADD on an exhausted pool saying that
//! provisioning is disabled, pick up an address attached later at its next reconcile (1 s
//! here), and never create, attach, assign, tag or free anything. IMDS-only, it must make no
//! EC2 request at all (the emulator's request log, which records the agent's HTTP requests
//! and not this test's direct calls). Both settings were refused at start before they were
//! implemented, so every test here failed then.

mod common;

use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vpcnet_emu::query::params::Params;
use vpcnet_emu::Api;

/// One EC2 call from the test (not in the request log); panics unless it succeeds.
async fn ec2(lab: &Lab, body: &str) -> String {
    let (status, xml) = lab.emu.ec2_call(Params::parse(body.as_bytes()), None).await;
    assert_eq!(status, 200, "{body}: {xml}");
    xml
}

fn primary_eni(lab: &Lab) -> String {
    lab.instance.primary_eni.as_ref().unwrap().eni_id.clone()
}

/// Attaches what the agent will find: 2 secondary IPs on the primary ENI, and a second ENI
/// (device 1) with 2 secondary IPs. Returns the second ENI's ID.
async fn pre_attach(lab: &Lab) -> String {
    let primary = primary_eni(lab);
    ec2(
        lab,
        &format!(
            "Action=AssignPrivateIpAddresses&NetworkInterfaceId={primary}&SecondaryPrivateIpAddressCount=2"
        ),
    )
    .await;
    let before: Vec<String> = lab.emu.enis().into_iter().map(|e| e.eni_id).collect();
    ec2(
        lab,
        &format!(
            "Action=CreateNetworkInterface&SubnetId={}&SecondaryPrivateIpAddressCount=2&Description=attached-by-operator",
            lab.instance.subnet_id
        ),
    )
    .await;
    let eni = lab
        .emu
        .enis()
        .into_iter()
        .map(|e| e.eni_id)
        .find(|id| !before.contains(id))
        .unwrap();
    ec2(
        lab,
        &format!(
            "Action=AttachNetworkInterface&NetworkInterfaceId={eni}&InstanceId={}&DeviceIndex=1",
            lab.instance.instance_id
        ),
    )
    .await;
    eni
}

/// A free local TCP port for the agent's introspection, whose successor is free too (its
/// metrics).
fn free_port() -> u16 {
    loop {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

/// Starts the agent with `extra` and waits for its conflist (the pool can serve).
async fn start_agent(lab: &Lab, port: u16, extra: &[(&str, &str)]) -> tokio::process::Child {
    let mut cmd = lab.bare_agent_command();
    cmd.env("DISABLE_INTROSPECTION", "false")
        .env("DISABLE_METRICS", "false")
        .env("INTROSPECTION_BIND_ADDRESS", format!("127.0.0.1:{port}"))
        .env(
            "VPCNET_METRICS_BIND_ADDRESS",
            format!("127.0.0.1:{}", port + 1),
        )
        .env("VPCNET_RECONCILE_INTERVAL", "1")
        .env("IP_COOLDOWN_PERIOD", "0")
        // The warm targets ask for far more than is attached: they must have no effect.
        .env("WARM_IP_TARGET", "10")
        .env("MINIMUM_IP_TARGET", "20")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let serving = while_agent_runs(&mut child, Duration::from_secs(30), || {
        lab.conflist().exists()
    })
    .await
    .unwrap_or_else(|out| panic!("{out}"));
    assert!(serving, "no conflist after 30 s");
    child
}

/// `GET path` on `127.0.0.1:port`: the body.
async fn http_get(port: u16, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// `GET path` on the agent's introspection: the JSON body.
async fn introspect(port: u16, path: &str) -> serde_json::Value {
    let body = http_get(port, path).await;
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The EC2 requests the agent made (the request log holds only HTTP requests).
fn agent_ec2_requests(lab: &Lab) -> Vec<vpcnet_emu::RequestRecord> {
    lab.emu
        .requests(0)
        .records
        .into_iter()
        .filter(|r| r.api == Api::Ec2)
        .collect()
}

/// The instance's attached ENIs: id → secondary IPs (sorted).
fn attached(lab: &Lab) -> Vec<(String, Vec<Ipv4Addr>)> {
    let mut v: Vec<(String, Vec<Ipv4Addr>)> = lab
        .ec2_enis()
        .into_iter()
        .map(|(id, ips)| (id, ips.into_iter().collect()))
        .collect();
    v.sort();
    v
}

/// ADDs pods `first..` until one fails: the addresses handed out and the failure.
async fn add_until_exhausted(
    c: &mut vpcnet_proto::cni_backend_client::CniBackendClient<tonic::transport::Channel>,
    first: usize,
) -> (Vec<Ipv4Addr>, tonic::Status) {
    let mut ips = Vec::new();
    for i in first..first + 50 {
        match c.add_network(add_req(&format!("pod{i}"))).await {
            Ok(r) => ips.push(r.into_inner().ipv4_addr.parse().unwrap()),
            Err(s) => return (ips, s),
        }
    }
    panic!("50 ADDs succeeded on 4 pre-attached addresses: {ips:?}");
}

/// Retries the ADD of `id` until it succeeds (within 10 s: the next reconcile is 1 s away).
async fn add_eventually(
    c: &mut vpcnet_proto::cni_backend_client::CniBackendClient<tonic::transport::Channel>,
    id: &str,
) -> Ipv4Addr {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match c.add_network(add_req(id)).await {
            Ok(r) => return r.into_inner().ipv4_addr.parse().unwrap(),
            Err(s) => assert!(
                tokio::time::Instant::now() < deadline,
                "the address attached later never served a pod: {s}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn assert_exhausted_error(s: &tonic::Status) {
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s}");
    // The plugin tells this apart from the node's limit by the reason.
    assert_eq!(
        s.metadata()
            .get(vpcnet_proto::REASON_HEADER)
            .and_then(|v| v.to_str().ok()),
        Some(vpcnet_proto::REASON_PROVISIONING_DISABLED),
        "{s:?}"
    );
    for part in [
        "network resource provisioning is disabled",
        "DISABLE_NETWORK_RESOURCE_PROVISIONING or ENABLE_IMDS_ONLY_MODE",
        "attach more",
    ] {
        assert!(s.message().contains(part), "{part}: {}", s.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imds_only_serves_pre_attached_addresses_without_a_single_ec2_request() {
    let lab = lab("m5.large").await;
    pre_attach(&lab).await;
    let before = attached(&lab);
    let preattached: Vec<Ipv4Addr> = before.iter().flat_map(|(_, ips)| ips.clone()).collect();
    assert_eq!(preattached.len(), 4);
    lab.emu.clear_requests();

    let port = free_port();
    let child = start_agent(&lab, port, &[("ENABLE_IMDS_ONLY_MODE", "true")]).await;
    let mut c = client(&lab.socket()).await;

    let (mut got, err) = add_until_exhausted(&mut c, 0).await;
    got.sort();
    let mut want = preattached.clone();
    want.sort();
    assert_eq!(
        got, want,
        "the pods got exactly the pre-attached addresses; then: {err}"
    );
    assert_exhausted_error(&err);

    // Someone attaches one more address: the next reconcile (IMDS) picks it up.
    let primary = primary_eni(&lab);
    ec2(
        &lab,
        &format!(
            "Action=AssignPrivateIpAddresses&NetworkInterfaceId={primary}&SecondaryPrivateIpAddressCount=1"
        ),
    )
    .await;
    let new_ip = add_eventually(&mut c, "late").await;
    assert!(!preattached.contains(&new_ip), "{new_ip}");
    assert!(lab.ec2_ips().contains(&new_ip));

    // DEL gives the address back to the pool, not to EC2.
    c.del_network(del_req("pod0")).await.unwrap();
    let again = add_eventually(&mut c, "again").await;
    assert!(lab.ec2_ips().contains(&again));

    let doc = introspect(port, "/v1/enis").await;
    assert_eq!(doc["provisioning"], "imds-only", "{doc}");
    assert_eq!(doc["plan"], serde_json::json!([]), "{doc}");
    let env = introspect(port, "/v1/env-settings").await;
    assert_eq!(env["ENABLE_IMDS_ONLY_MODE"], "true", "{env}");
    let metrics = http_get(port + 1, "/metrics").await;
    assert!(
        metrics.contains("vpcnet_provisioning_mode{mode=\"imds-only\"} 1"),
        "{metrics}"
    );

    drop(c);
    drop(child);
    let ec2_requests = agent_ec2_requests(&lab);
    assert!(
        ec2_requests.is_empty(),
        "IMDS-only: no EC2 request at all, got {:?}",
        ec2_requests.iter().map(|r| &r.action).collect::<Vec<_>>()
    );
    assert!(
        lab.emu
            .requests(0)
            .records
            .iter()
            .any(|r| r.api == Api::Imds && r.action.contains("network/interfaces/macs")),
        "the ENIs were read from IMDS"
    );
    // Nothing was created or freed: the same ENIs, the pre-attached addresses plus the late one.
    let after = attached(&lab);
    assert_eq!(
        after.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        before.iter().map(|(id, _)| id).collect::<Vec<_>>()
    );
    assert_eq!(lab.ec2_ips().len(), 5);
    assert!(lab.detached_enis().is_empty(), "{:?}", lab.detached_enis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_provisioning_adopts_what_others_attach_and_never_mutates() {
    let lab = lab("m5.large").await;
    let second = pre_attach(&lab).await;
    let before = attached(&lab);
    lab.emu.clear_requests();

    let port = free_port();
    let child = start_agent(
        &lab,
        port,
        &[("DISABLE_NETWORK_RESOURCE_PROVISIONING", "true")],
    )
    .await;
    let mut c = client(&lab.socket()).await;

    let (got, err) = add_until_exhausted(&mut c, 0).await;
    assert_eq!(got.len(), 4, "{got:?}: {err}");
    assert_exhausted_error(&err);

    // Two addresses attached later through EC2 by someone else serve pods after the next
    // reconcile (IMDS shows the difference, EC2 is described, its view adopted).
    ec2(
        &lab,
        &format!(
            "Action=AssignPrivateIpAddresses&NetworkInterfaceId={second}&SecondaryPrivateIpAddressCount=2"
        ),
    )
    .await;
    let late = add_eventually(&mut c, "late1").await;
    assert!(!got.contains(&late));
    let doc = introspect(port, "/v1/enis").await;
    assert_eq!(doc["provisioning"], "disabled", "{doc}");
    let metrics = http_get(port + 1, "/metrics").await;
    assert!(
        metrics.contains("vpcnet_provisioning_mode{mode=\"disabled\"} 1"),
        "{metrics}"
    );
    assert_eq!(doc["summary"]["total_ips"], 6, "{doc}");

    // One of those taken away while free leaves the pool at the next reconcile.
    let free_ip = lab
        .ec2_enis()
        .get(&second)
        .unwrap()
        .iter()
        .copied()
        .find(|ip| !got.contains(ip) && *ip != late)
        .unwrap();
    lab.emu
        .unassign_behind_back(&second, &[free_ip], &[])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let doc = introspect(port, "/v1/enis").await;
        if doc["summary"]["total_ips"] == 5 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the removed address never left the pool: {doc}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (more, err) = add_until_exhausted(&mut c, 100).await;
    assert!(more.is_empty(), "{more:?}");
    assert_exhausted_error(&err);

    drop(c);
    drop(child);
    let requests = agent_ec2_requests(&lab);
    let mutating: Vec<&String> = requests
        .iter()
        .filter(|r| r.mutating)
        .map(|r| &r.action)
        .collect();
    assert!(mutating.is_empty(), "mutating EC2 calls: {mutating:?}");
    assert!(
        requests
            .iter()
            .any(|r| r.action == "DescribeNetworkInterfaces"),
        "EC2 is still described (the truth behind IMDS's hint)"
    );
    let after = attached(&lab);
    assert_eq!(
        after.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        before.iter().map(|(id, _)| id).collect::<Vec<_>>()
    );
    assert!(lab.detached_enis().is_empty(), "{:?}", lab.detached_enis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_that_only_shape_created_enis_are_refused_without_provisioning() {
    let lab = lab("m5.large").await;
    for off in [
        "DISABLE_NETWORK_RESOURCE_PROVISIONING",
        "ENABLE_IMDS_ONLY_MODE",
    ] {
        lab.emu.clear_requests();
        let mut cmd = lab.bare_agent_command();
        cmd.env(off, "true")
            .env("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true");
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .expect("a refused agent exits on its own")
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "refused AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=\"true\": with {off}=true the agent \
                 creates no ENI"
            )),
            "{err}"
        );
        assert!(!lab.conflist().exists());
        assert!(agent_ec2_requests(&lab).is_empty());
    }
}
