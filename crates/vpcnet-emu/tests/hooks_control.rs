//! The lab's interfaces: fabric hooks (order, content, delayed attach), the JSON control API,
//! and the `vpcnet-emu` binary with a setup file.

mod common;

use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use common::{client, lab};
use serde_json::{json, Value};
use tower::ServiceExt;
use vpcnet_emu::{
    ActionFaults, AddressesChanged, Emulator, EniAttached, EniDetached, FabricEvent, FabricHooks,
    HookFuture,
};

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(Instant, FabricEvent)>>,
    /// Read through the emulator from inside the hook: proves hooks run outside the state lock.
    emu: Mutex<Option<Emulator>>,
}

impl Recorder {
    fn push(&self, ev: FabricEvent) {
        if let Some(emu) = self.emu.lock().unwrap().as_ref() {
            let _ = emu.enis();
        }
        self.events.lock().unwrap().push((Instant::now(), ev));
    }
    fn take(&self) -> Vec<FabricEvent> {
        self.events
            .lock()
            .unwrap()
            .drain(..)
            .map(|(_, e)| e)
            .collect()
    }
}

impl FabricHooks for Recorder {
    fn eni_attached(&self, ev: EniAttached) -> HookFuture<'_> {
        Box::pin(async move { self.push(FabricEvent::EniAttached(ev)) })
    }
    fn eni_detached(&self, ev: EniDetached) -> HookFuture<'_> {
        Box::pin(async move { self.push(FabricEvent::EniDetached(ev)) })
    }
    fn addresses_assigned(&self, ev: AddressesChanged) -> HookFuture<'_> {
        Box::pin(async move { self.push(FabricEvent::AddressesAssigned(ev)) })
    }
    fn addresses_unassigned(&self, ev: AddressesChanged) -> HookFuture<'_> {
        Box::pin(async move { self.push(FabricEvent::AddressesUnassigned(ev)) })
    }
}

fn net(s: &str) -> ipnet::Ipv4Net {
    s.parse().unwrap()
}

#[tokio::test]
async fn hooks_see_every_change_in_order() {
    let lab = lab(50).await;
    let rec = Arc::new(Recorder::default());
    *rec.emu.lock().unwrap() = Some(lab.emu.clone());
    lab.emu.set_hooks(rec.clone());

    let inst = lab.instance("m5.large").await;
    let primary = inst.primary_eni.clone().unwrap();
    let ev = rec.take();
    assert_eq!(
        ev,
        vec![FabricEvent::EniAttached(EniAttached {
            eni_id: primary.eni_id.clone(),
            mac: primary.mac.clone(),
            instance_id: inst.instance_id.clone(),
            device_index: 0,
            network_card: 0,
            subnet_id: lab.subnet.clone(),
            subnet_cidr: net("10.0.0.0/24"),
            gateway: "10.0.0.1".parse().unwrap(),
            primary_ip: inst.private_ip,
            secondary: vec![],
        })]
    );

    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .secondary_private_ip_address_count(2)
        .send()
        .await
        .unwrap();
    let eni_id = r
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    let info = lab.emu.eni(&eni_id).unwrap();
    let secs: Vec<ipnet::Ipv4Net> = info
        .secondary_ips
        .iter()
        .map(|ip| ipnet::Ipv4Net::new(*ip, 32).unwrap())
        .collect();
    assert_eq!(
        rec.take(),
        vec![FabricEvent::AddressesAssigned(AddressesChanged {
            eni_id: eni_id.clone(),
            instance_id: None,
            cidrs: secs.clone()
        })]
    );

    let att = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni_id)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap();
    let ev = rec.take();
    match &ev[..] {
        [FabricEvent::EniAttached(a)] => {
            assert_eq!(
                (a.eni_id.as_str(), a.device_index, a.mac.as_str()),
                (eni_id.as_str(), 1, info.mac.as_str())
            );
            assert_eq!(
                a.secondary, secs,
                "addresses already on the ENI come with the attach"
            );
            assert_eq!(a.primary_ip, info.primary_ip);
        }
        other => panic!("{other:?}"),
    }

    let r = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni_id)
        .ipv4_prefix_count(1)
        .send()
        .await
        .unwrap();
    let prefix = net(r.assigned_ipv4_prefixes()[0].ipv4_prefix().unwrap());
    assert_eq!(
        rec.take(),
        vec![FabricEvent::AddressesAssigned(AddressesChanged {
            eni_id: eni_id.clone(),
            instance_id: Some(inst.instance_id.clone()),
            cidrs: vec![prefix],
        })]
    );

    lab.emu
        .unassign_behind_back(&eni_id, &[info.secondary_ips[0]], &[])
        .await
        .unwrap();
    assert_eq!(
        rec.take(),
        vec![FabricEvent::AddressesUnassigned(AddressesChanged {
            eni_id: eni_id.clone(),
            instance_id: Some(inst.instance_id.clone()),
            cidrs: vec![secs[0]],
        })]
    );

    lab.emu.detach_behind_back(&eni_id).await.unwrap();
    assert_eq!(
        rec.take(),
        vec![FabricEvent::EniDetached(EniDetached {
            eni_id: eni_id.clone(),
            mac: info.mac.clone(),
            instance_id: inst.instance_id.clone(),
            device_index: 1,
            network_card: 0,
        })]
    );
    // the agent's own detach of that attachment now fails: it is gone
    let e = lab
        .ec2
        .detach_network_interface()
        .attachment_id(att.attachment_id().unwrap())
        .send()
        .await
        .unwrap_err();
    assert_eq!(common::code(&e), "InvalidAttachmentID.NotFound");

    lab.ec2
        .delete_network_interface()
        .network_interface_id(&eni_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        rec.take(),
        vec![FabricEvent::AddressesUnassigned(AddressesChanged {
            eni_id: eni_id.clone(),
            instance_id: None,
            cidrs: vec![secs[1], prefix]
        })]
    );

    lab.emu.terminate_instance(&inst.instance_id).await.unwrap();
    match &rec.take()[..] {
        [FabricEvent::EniDetached(d)] => assert_eq!(d.eni_id, primary.eni_id),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn delayed_attach_reports_when_it_completes() {
    let lab = lab(51).await;
    let rec = Arc::new(Recorder::default());
    lab.emu.set_hooks(rec.clone());
    let inst = lab.instance("m5.large").await;
    rec.take();
    lab.emu
        .set_action_faults(
            "AttachNetworkInterface",
            Some(ActionFaults::default().latency(Duration::from_millis(600))),
        )
        .unwrap();
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .send()
        .await
        .unwrap();
    let eni_id = r
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    let t0 = Instant::now();
    lab.ec2
        .attach_network_interface()
        .network_interface_id(&eni_id)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap();
    assert!(rec.take().is_empty(), "not attached yet");
    assert_eq!(
        lab.emu.eni(&eni_id).unwrap().attachment.unwrap().status,
        "attaching"
    );
    tokio::time::sleep(Duration::from_millis(900)).await;
    let events = rec.events.lock().unwrap().clone();
    assert_eq!(events.len(), 1);
    assert!(events[0].0 - t0 >= Duration::from_millis(600));
    assert!(matches!(&events[0].1, FabricEvent::EniAttached(a) if a.eni_id == eni_id));
}

async fn call(app: &axum::Router, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(
            body.map(|b| Body::from(b.to_string()))
                .unwrap_or_else(Body::empty),
        )
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn control_api_mirrors_the_methods() {
    let emu = Emulator::new(52);
    let app = emu.router();
    let (st, vpc) = call(
        &app,
        "POST",
        "/_emu/vpcs",
        Some(json!({"cidr": "10.1.0.0/16", "extra_cidrs": ["100.64.0.0/16"]})),
    )
    .await;
    assert_eq!(st, 200, "{vpc}");
    let vpc_id = vpc["vpc_id"].as_str().unwrap().to_string();
    let (_, sn) = call(
        &app,
        "POST",
        "/_emu/subnets",
        Some(json!({"vpc_id": vpc_id, "cidr": "10.1.0.0/24", "availability_zone": "us-east-1a"})),
    )
    .await;
    let subnet = sn["subnet_id"].as_str().unwrap().to_string();
    let (_, sg) = call(
        &app,
        "POST",
        "/_emu/security-groups",
        Some(json!({"vpc_id": vpc_id, "name": "nodes"})),
    )
    .await;
    let sg = sg["group_id"].as_str().unwrap().to_string();
    let (st, _) = call(
        &app,
        "POST",
        "/_emu/instance-types",
        Some(json!({"instance_type": "new.type", "ipv4_per_eni": 4, "network_cards": [{"index": 0, "max_enis": 2}]})),
    )
    .await;
    assert_eq!(st, 200);
    let (st, inst) = call(
        &app,
        "POST",
        "/_emu/instances",
        Some(json!({"instance_type": "new.type", "subnet_id": subnet, "security_group_ids": [sg]})),
    )
    .await;
    assert_eq!(st, 200, "{inst}");
    let id = inst["instance_id"].as_str().unwrap().to_string();
    let eni = inst["primary_eni"]["eni_id"].as_str().unwrap().to_string();
    assert_eq!(inst["primary_eni"]["attachment"]["device_index"], 0);
    assert_eq!(emu.instance(&id).unwrap().instance_type, "new.type");
    let (_, got) = call(&app, "GET", &format!("/_emu/instances/{id}"), None).await;
    assert_eq!(got["private_ip"], inst["private_ip"]);
    let (st, e) = call(&app, "GET", "/_emu/instances/i-nope", None).await;
    assert_eq!(
        (st, e["code"].as_str()),
        (400, Some("InvalidInstanceID.NotFound"))
    );
    let (_, url) = call(&app, "GET", &format!("/_emu/instances/{id}/imds"), None).await;
    assert!(url["url"]
        .as_str()
        .unwrap()
        .starts_with("http://127.0.0.1:"));

    // faults
    let (st, _) = call(&app, "PUT", "/_emu/faults", Some(json!({"actions": {"DescribeVpcs": {"throttle": {"capacity": 2, "refill_per_sec": 0.5}}}, "imds_lag_ms": 100}))).await;
    assert_eq!(st, 200);
    let (_, f) = call(&app, "GET", "/_emu/faults", None).await;
    assert_eq!(f["actions"]["DescribeVpcs"]["throttle"]["capacity"], 2);
    assert_eq!(emu.faults().imds_lag_ms, 100);
    let (st, e) = call(
        &app,
        "PUT",
        "/_emu/faults",
        Some(json!({"actions": {"X": {"error": {"rate": 2.0, "code": "InternalError"}}}})),
    )
    .await;
    assert_eq!(st, 400);
    assert!(
        e["message"].as_str().unwrap().contains("actions.X.error"),
        "{e}"
    );
    let (st, e) = call(&app, "PUT", "/_emu/faults", Some(json!({"bogus": 1}))).await;
    assert_eq!(st, 400);
    assert!(e["message"].as_str().unwrap().contains("bogus"), "{e}");
    let (st, _) = call(
        &app,
        "PUT",
        "/_emu/faults/actions/DescribeSubnets",
        Some(json!({"latency": {"min_ms": 5, "max_ms": 10}})),
    )
    .await;
    assert_eq!(st, 200);
    assert!(emu.faults().actions.contains_key("DescribeSubnets"));
    call(&app, "DELETE", "/_emu/faults/actions/DescribeSubnets", None).await;
    assert!(!emu.faults().actions.contains_key("DescribeSubnets"));
    call(
        &app,
        "PUT",
        "/_emu/imds-lag",
        Some(json!({"instance_id": id, "ms": 250})),
    )
    .await;
    assert_eq!(emu.faults().imds_lag_ms_per_instance[&id], 250);
    call(
        &app,
        "PUT",
        "/_emu/empty-private-dns-names",
        Some(json!({"calls": 3})),
    )
    .await;
    assert_eq!(emu.faults().empty_private_dns_name_calls, 3);

    // behind the agent's back
    let ip = emu.with_cloud(|c| c.subnet(&subnet).unwrap().cidr.hosts().nth(20).unwrap());
    let server = emu.spawn().await.unwrap();
    let ec2 = client(&server.endpoint, 1);
    ec2.assign_private_ip_addresses()
        .network_interface_id(&eni)
        .private_ip_addresses(ip.to_string())
        .send()
        .await
        .unwrap();
    let (st, _) = call(
        &app,
        "POST",
        &format!("/_emu/enis/{eni}/unassign"),
        Some(json!({"ips": [ip]})),
    )
    .await;
    assert_eq!(st, 200);
    assert!(emu.eni(&eni).unwrap().secondary_ips.is_empty());
    let (st, e) = call(
        &app,
        "POST",
        &format!("/_emu/enis/{eni}/unassign"),
        Some(json!({"ips": [ip]})),
    )
    .await;
    assert_eq!(
        (st, e["code"].as_str()),
        (400, Some("InvalidParameterValue"))
    );
    let (st, _) = call(&app, "POST", &format!("/_emu/enis/{eni}/detach"), None).await;
    assert_eq!(st, 200);
    let (_, e) = call(&app, "GET", &format!("/_emu/enis/{eni}"), None).await;
    assert!(e["attachment"].is_null());
    let (_, all) = call(&app, "GET", "/_emu/enis", None).await;
    assert_eq!(all.as_array().unwrap().len(), 1);

    // counts
    ec2.describe_subnets().send().await.unwrap();
    ec2.describe_subnets().send().await.unwrap();
    let (_, c) = call(&app, "GET", "/_emu/calls", None).await;
    assert_eq!(c["per_action"]["DescribeSubnets"], 2);
    assert_eq!(c["per_action"]["AssignPrivateIpAddresses"], 1);
    assert_eq!(c["mutating"], 1);
    call(&app, "DELETE", "/_emu/calls", None).await;
    assert!(emu.calls().per_action.is_empty());
    let (st, _) = call(&app, "DELETE", &format!("/_emu/instances/{id}"), None).await;
    assert_eq!(st, 200);
    assert_eq!(emu.instance(&id).unwrap().state, "terminated");
    let (st, _) = call(&app, "GET", "/_emu/nope", None).await;
    assert_eq!(st, 400);
}

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn binary_builds_the_config_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lab.json");
    std::fs::write(
        &cfg,
        json!({
            "vpcs": [{
                "name": "lab", "cidr": "10.0.0.0/16",
                "security_groups": ["nodes"],
                "subnets": [{"name": "a", "cidr": "10.0.0.0/24", "availability_zone": "us-east-1a"}],
                "instances": [{"name": "node1", "instance_type": "m5.large", "subnet": "a", "security_groups": ["nodes"]}]
            }],
            "faults": {"empty_private_dns_name_calls": 1}
        })
        .to_string(),
    )
    .unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_vpcnet-emu"))
        .args(["--listen", "127.0.0.1:0", "--seed", "9", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Child(child);
    let stdout = child.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut l = String::new();
        std::io::BufReader::new(stdout).read_line(&mut l).unwrap();
        l
    })
    .await
    .unwrap();
    let out: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    let endpoint = out["endpoint"].as_str().unwrap();
    let node = &out["ids"]["vpcs"]["lab"]["instances"]["node1"];
    let ec2 = client(endpoint, 1);
    let r = ec2
        .describe_instances()
        .instance_ids(node["instance_id"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    let i = &r.reservations()[0].instances()[0];
    assert_eq!(i.private_dns_name(), Some(""), "fault from the config");
    assert_eq!(i.private_ip_address(), node["private_ip"].as_str());
    assert_eq!(i.security_groups()[0].group_name(), Some("nodes"));

    // a bad config fails with a message naming the item
    std::fs::write(&cfg, json!({"vpcs": [{"name": "v", "cidr": "10.0.0.0/16", "instances": [{"name": "n", "instance_type": "m5.large", "subnet": "missing"}]}]}).to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vpcnet-emu"))
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("vpcs[v].instances[n]") && err.contains("missing"),
        "{err}"
    );
}

#[tokio::test]
async fn ec2_calls_from_an_instance_address_are_counted_per_instance() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let emu = Emulator::new(53);
    let vpc = emu
        .create_vpc("127.0.0.0/16".parse().unwrap(), &[])
        .unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "127.0.0.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let inst = emu
        .run_instance(vpcnet_emu::RunInstance {
            instance_type: "m5.large".into(),
            subnet_id: subnet,
            private_ip: Some("127.0.0.20".parse().unwrap()),
            ..Default::default()
        })
        .await
        .unwrap();
    let server = emu.spawn().await.unwrap();
    for _ in 0..2 {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.20:0".parse().unwrap()).unwrap();
        let mut s = sock.connect(server.addr).await.unwrap();
        let body = "Action=DescribeVpcs&Version=2016-11-15";
        let req = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains("<DescribeVpcsResponse"), "{out}");
    }
    // a call from elsewhere is not attributed
    client(&server.endpoint, 1)
        .describe_vpcs()
        .send()
        .await
        .unwrap();
    let calls = emu.calls();
    assert_eq!(calls.per_action["DescribeVpcs"], 3);
    assert_eq!(calls.per_instance[&inst.instance_id].ec2["DescribeVpcs"], 2);
    assert_eq!(calls.per_instance.len(), 1);
}

/// EKS cluster records through the control API, then answered by `GET /clusters/{name}` in
/// EKS's JSON shape (the EC2 Query API still answers everything else).
#[tokio::test]
async fn control_api_eks_clusters() {
    let emu = Emulator::new(53);
    let app = emu.router();
    let (st, c) = call(
        &app,
        "POST",
        "/_emu/eks/clusters",
        Some(json!({
            "name": "lab",
            "endpoint": "https://10.0.0.10:6443",
            "certificate_authority": "Q0E=",
            "service_ipv4_cidr": "10.96.0.0/16",
            "outpost_arns": ["arn:aws:outposts:us-east-1:123456789012:outpost/op-1"],
            "id": "0123abcd-4567-89ef-0123-456789abcdef"
        })),
    )
    .await;
    assert_eq!(st, 200, "{c}");
    assert_eq!(c["arn"], "arn:aws:eks:us-east-1:123456789012:cluster/lab");
    let (st, dup) = call(&app, "POST", "/_emu/eks/clusters", Some(c.clone())).await;
    assert_eq!(
        (st, dup["code"].as_str()),
        (400, Some("InvalidParameterException")),
        "{dup}"
    );
    let (st, dup) = call(
        &app,
        "POST",
        "/_emu/eks/clusters",
        Some(json!({"name": "lab", "endpoint": "https://x", "certificate_authority": "Q0E="})),
    )
    .await;
    assert_eq!(
        (st, dup["code"].as_str()),
        (409, Some("ResourceInUseException"))
    );

    let (st, d) = call(&app, "GET", "/clusters/lab", None).await;
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["cluster"]["endpoint"], "https://10.0.0.10:6443");
    assert_eq!(d["cluster"]["certificateAuthority"]["data"], "Q0E=");
    assert_eq!(
        d["cluster"]["kubernetesNetworkConfig"]["serviceIpv4Cidr"],
        "10.96.0.0/16"
    );
    assert_eq!(d["cluster"]["kubernetesNetworkConfig"]["ipFamily"], "ipv4");
    assert_eq!(d["cluster"]["id"], "0123abcd-4567-89ef-0123-456789abcdef");
    assert_eq!(
        d["cluster"]["outpostConfig"]["outpostArns"][0],
        "arn:aws:outposts:us-east-1:123456789012:outpost/op-1"
    );
    let (st, nf) = call(&app, "GET", "/clusters/other", None).await;
    assert_eq!(
        (st, nf["message"].as_str()),
        (404, Some("No cluster found for name: other."))
    );

    let (_, all) = call(&app, "GET", "/_emu/eks/clusters", None).await;
    assert_eq!(all.as_array().unwrap().len(), 1);
    let (st, _) = call(&app, "DELETE", "/_emu/eks/clusters/lab", None).await;
    assert_eq!(st, 200);
    let (st, _) = call(&app, "GET", "/_emu/eks/clusters/lab", None).await;
    assert_eq!(st, 404);
    assert_eq!(emu.calls().per_action["DescribeCluster"], 2);
}
