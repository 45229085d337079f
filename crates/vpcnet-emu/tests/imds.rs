//! IMDSv2: token flow, every path through aws-config's IMDS client, lag, attach latency, and the
//! shared listener that knows callers by source address.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use aws_config::imds::Client as Imds;
use common::lab;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vpcnet_emu::{ActionFaults, Emulator, RunInstance};

/// One raw HTTP/1.1 exchange from `from` (or any local address): (status, headers, body).
async fn raw(
    to: &str,
    from: Option<&str>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let addr: SocketAddr = to.trim_start_matches("http://").parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(f) = from {
        sock.bind(format!("{f}:0").parse().unwrap()).unwrap();
    }
    let mut s = sock.connect(addr).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_lowercase(), body.to_string())
}

async fn imds_client(url: &str) -> Imds {
    Imds::builder().endpoint(url).unwrap().build()
}

async fn get(c: &Imds, path: &str) -> String {
    c.get(path)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .as_ref()
        .to_string()
}

#[tokio::test]
async fn token_flow_and_401() {
    let lab = lab(30).await;
    let a = lab.instance("m5.large").await;
    let b = lab.instance("m5.large").await;
    let url = lab.emu.imds_endpoint(&a.instance_id).await.unwrap();
    assert_eq!(
        lab.emu.imds_endpoint(&a.instance_id).await.unwrap(),
        url,
        "one endpoint per instance"
    );
    let url_b = lab.emu.imds_endpoint(&b.instance_id).await.unwrap();

    let (st, _, _) = raw(&url, None, "GET", "/latest/meta-data/instance-id", &[]).await;
    assert_eq!(st, 401, "IMDSv1-style GET without token");
    let (st, _, _) = raw(
        &url,
        None,
        "GET",
        "/latest/meta-data/instance-id",
        &[("X-aws-ec2-metadata-token", "forged")],
    )
    .await;
    assert_eq!(st, 401);
    let (st, _, _) = raw(&url, None, "PUT", "/latest/api/token", &[]).await;
    assert_eq!(st, 400, "PUT without TTL");
    let (st, _, _) = raw(
        &url,
        None,
        "PUT",
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "21601")],
    )
    .await;
    assert_eq!(st, 400, "TTL above 6 hours");
    let (st, head, token) = raw(
        &url,
        None,
        "PUT",
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
    )
    .await;
    assert_eq!(st, 200);
    assert!(
        head.contains("x-aws-ec2-metadata-token-ttl-seconds: 60"),
        "{head}"
    );
    let (st, _, body) = raw(
        &url,
        None,
        "GET",
        "/latest/meta-data/instance-id",
        &[("X-aws-ec2-metadata-token", &token)],
    )
    .await;
    assert_eq!((st, body.as_str()), (200, a.instance_id.as_str()));
    let (st, _, _) = raw(
        &url_b,
        None,
        "GET",
        "/latest/meta-data/instance-id",
        &[("X-aws-ec2-metadata-token", &token)],
    )
    .await;
    assert_eq!(st, 401, "a token is only good on the instance that got it");
    let (st, _, _) = raw(
        &url,
        None,
        "GET",
        "/latest/meta-data/no-such-thing",
        &[("X-aws-ec2-metadata-token", &token)],
    )
    .await;
    assert_eq!(st, 404);
    // a 1-second token expires
    let (_, _, short) = raw(
        &url,
        None,
        "PUT",
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "1")],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (st, _, _) = raw(
        &url,
        None,
        "GET",
        "/latest/meta-data/instance-id",
        &[("X-aws-ec2-metadata-token", &short)],
    )
    .await;
    assert_eq!(st, 401);
    assert!(lab.emu.calls().per_instance[&a.instance_id].imds >= 8);
}

#[tokio::test]
async fn every_path_through_aws_config() {
    let lab = lab(31).await;
    let sg = lab
        .emu
        .create_security_group(&lab.vpc.vpc_id, "nodes")
        .unwrap();
    let inst = lab
        .emu
        .run_instance(RunInstance {
            instance_type: "m5.large".into(),
            subnet_id: lab.subnet.clone(),
            security_group_ids: vec![sg.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    let primary = inst.primary_eni.clone().unwrap();
    // a second ENI with a prefix
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .groups(&sg)
        .send()
        .await
        .unwrap();
    let eni2 = r.network_interface().unwrap();
    let (eni2_id, eni2_mac) = (
        eni2.network_interface_id().unwrap().to_string(),
        eni2.mac_address().unwrap().to_string(),
    );
    lab.ec2
        .attach_network_interface()
        .network_interface_id(&eni2_id)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap();
    let p = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni2_id)
        .ipv4_prefix_count(1)
        .send()
        .await
        .unwrap();
    let prefix = p.assigned_ipv4_prefixes()[0]
        .ipv4_prefix()
        .unwrap()
        .to_string();
    let s = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&primary.eni_id)
        .secondary_private_ip_address_count(2)
        .send()
        .await
        .unwrap();
    let secondaries: Vec<String> = s
        .assigned_private_ip_addresses()
        .iter()
        .map(|a| a.private_ip_address().unwrap().to_string())
        .collect();

    let c = imds_client(&lab.emu.imds_endpoint(&inst.instance_id).await.unwrap()).await;
    let md = "/latest/meta-data";
    assert_eq!(
        get(&c, &format!("{md}/instance-id")).await,
        inst.instance_id
    );
    assert_eq!(get(&c, &format!("{md}/instance-type")).await, "m5.large");
    assert_eq!(get(&c, &format!("{md}/mac")).await, primary.mac);
    assert_eq!(
        get(&c, &format!("{md}/local-ipv4")).await,
        inst.private_ip.to_string()
    );
    assert_eq!(
        get(&c, &format!("{md}/placement/availability-zone")).await,
        "us-east-1a"
    );
    assert_eq!(
        get(&c, &format!("{md}/placement/region")).await,
        "us-east-1"
    );
    assert_eq!(
        get(&c, &format!("{md}/local-hostname")).await,
        inst.private_dns_name
    );
    let macs = get(&c, &format!("{md}/network/interfaces/macs/")).await;
    assert_eq!(macs, format!("{}/\n{}/", primary.mac, eni2_mac));

    let m1 = format!("{md}/network/interfaces/macs/{}", primary.mac);
    assert_eq!(get(&c, &format!("{m1}/device-number")).await, "0");
    assert_eq!(get(&c, &format!("{m1}/network-card")).await, "0");
    assert_eq!(get(&c, &format!("{m1}/interface-id")).await, primary.eni_id);
    assert_eq!(get(&c, &format!("{m1}/subnet-id")).await, lab.subnet);
    assert_eq!(
        get(&c, &format!("{m1}/subnet-ipv4-cidr-block")).await,
        "10.0.0.0/24"
    );
    assert_eq!(get(&c, &format!("{m1}/vpc-id")).await, lab.vpc.vpc_id);
    assert_eq!(
        get(&c, &format!("{m1}/vpc-ipv4-cidr-block")).await,
        "10.0.0.0/16"
    );
    assert_eq!(
        get(&c, &format!("{m1}/vpc-ipv4-cidr-blocks")).await,
        "10.0.0.0/16\n100.64.0.0/16"
    );
    assert_eq!(get(&c, &format!("{m1}/security-group-ids")).await, sg);
    assert_eq!(get(&c, &format!("{m1}/security-groups")).await, "nodes");
    let ips = get(&c, &format!("{m1}/local-ipv4s")).await;
    assert_eq!(
        ips,
        format!("{}\n{}", inst.private_ip, secondaries.join("\n"))
    );
    assert!(
        c.get(format!("{m1}/ipv4-prefix")).await.is_err(),
        "no prefix on the primary ENI: 404"
    );

    let m2 = format!("{md}/network/interfaces/macs/{eni2_mac}");
    assert_eq!(get(&c, &format!("{m2}/device-number")).await, "1");
    assert_eq!(get(&c, &format!("{m2}/interface-id")).await, eni2_id);
    assert_eq!(get(&c, &format!("{m2}/ipv4-prefix")).await, prefix);
    assert!(get(&c, &format!("{m2}/"))
        .await
        .lines()
        .any(|l| l == "ipv4-prefix"));

    let doc = get(&c, "/latest/dynamic/instance-identity/document").await;
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["region"], "us-east-1");
    assert_eq!(doc["instanceId"], inst.instance_id.as_str());
}

async fn wait_until(deadline: Duration, mut f: impl AsyncFnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < deadline {
        if f().await {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test]
async fn lagging_imds_shows_new_ips_only_after_the_lag() {
    let lab = lab(32).await;
    let inst = lab.instance("m5.large").await;
    let primary = inst.primary_eni.clone().unwrap();
    lab.emu
        .set_imds_lag(Some(&inst.instance_id), Duration::from_secs(2));
    let c = imds_client(&lab.emu.imds_endpoint(&inst.instance_id).await.unwrap()).await;
    let path = format!(
        "/latest/meta-data/network/interfaces/macs/{}/local-ipv4s",
        primary.mac
    );
    let t0 = Instant::now();
    let r = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&primary.eni_id)
        .secondary_private_ip_address_count(1)
        .send()
        .await
        .unwrap();
    let ip = r.assigned_private_ip_addresses()[0]
        .private_ip_address()
        .unwrap()
        .to_string();
    // EC2 knows at once
    assert!(lab
        .emu
        .eni(&primary.eni_id)
        .unwrap()
        .secondary_ips
        .contains(&ip.parse().unwrap()));
    let seen = wait_until(Duration::from_secs(8), async || {
        get(&c, &path).await.lines().any(|l| l == ip)
    })
    .await;
    let seen_after = t0.elapsed();
    assert!(seen.is_some(), "never shown");
    assert!(
        seen_after >= Duration::from_secs(2),
        "shown after {seen_after:?}"
    );
    // polled every 100 ms; a generous upper bound for a loaded machine
    assert!(
        seen_after < Duration::from_millis(4500),
        "shown only after {seen_after:?}"
    );

    // unassignment lags too; other instances are not affected
    let t1 = Instant::now();
    lab.ec2
        .unassign_private_ip_addresses()
        .network_interface_id(&primary.eni_id)
        .private_ip_addresses(&ip)
        .send()
        .await
        .unwrap();
    assert!(
        get(&c, &path).await.lines().any(|l| l == ip),
        "still shown right after unassign"
    );
    wait_until(Duration::from_secs(5), async || {
        !get(&c, &path).await.lines().any(|l| l == ip)
    })
    .await
    .unwrap();
    assert!(t1.elapsed() >= Duration::from_secs(2));

    let other = lab.instance("m5.large").await;
    let oeni = other.primary_eni.unwrap();
    let oc = imds_client(&lab.emu.imds_endpoint(&other.instance_id).await.unwrap()).await;
    let r = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&oeni.eni_id)
        .secondary_private_ip_address_count(1)
        .send()
        .await
        .unwrap();
    let oip = r.assigned_private_ip_addresses()[0]
        .private_ip_address()
        .unwrap()
        .to_string();
    let opath = format!(
        "/latest/meta-data/network/interfaces/macs/{}/local-ipv4s",
        oeni.mac
    );
    assert!(
        get(&oc, &opath).await.lines().any(|l| l == oip),
        "no lag configured for the other instance"
    );
}

#[tokio::test]
async fn attached_eni_appears_after_its_attach_latency() {
    let lab = lab(33).await;
    let inst = lab.instance("m5.large").await;
    lab.emu
        .set_action_faults(
            "AttachNetworkInterface",
            Some(ActionFaults::default().latency(Duration::from_millis(3000))),
        )
        .unwrap();
    let c = imds_client(&lab.emu.imds_endpoint(&inst.instance_id).await.unwrap()).await;
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .send()
        .await
        .unwrap();
    let eni = r.network_interface().unwrap();
    let (eni_id, mac) = (
        eni.network_interface_id().unwrap().to_string(),
        eni.mac_address().unwrap().to_string(),
    );
    let t0 = Instant::now();
    lab.ec2
        .attach_network_interface()
        .network_interface_id(&eni_id)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(2500),
        "AttachNetworkInterface answers at once"
    );
    let d = lab
        .ec2
        .describe_network_interfaces()
        .network_interface_ids(&eni_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        d.network_interfaces()[0]
            .attachment()
            .unwrap()
            .status()
            .map(|s| s.as_str()),
        Some("attaching")
    );
    assert!(!get(&c, "/latest/meta-data/network/interfaces/macs/")
        .await
        .contains(&mac));
    let macs = "/latest/meta-data/network/interfaces/macs/";
    wait_until(Duration::from_secs(8), async || {
        get(&c, macs).await.contains(&mac)
    })
    .await
    .unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(3000),
        "shown after {:?}",
        t0.elapsed()
    );
    let d = lab
        .ec2
        .describe_network_interfaces()
        .network_interface_ids(&eni_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        d.network_interfaces()[0]
            .attachment()
            .unwrap()
            .status()
            .map(|s| s.as_str()),
        Some("attached")
    );
}

#[tokio::test]
async fn shared_listener_knows_the_caller_by_source_address() {
    // a VPC on 127.0.0.0/16 so that a test can send from an instance's primary address on loopback
    let emu = Emulator::new(34);
    let vpc = emu
        .create_vpc("127.0.0.0/16".parse().unwrap(), &[])
        .unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "127.0.0.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let mut ids = Vec::new();
    for ip in ["127.0.0.10", "127.0.0.11"] {
        let i = emu
            .run_instance(RunInstance {
                instance_type: "m5.large".into(),
                subnet_id: subnet.clone(),
                private_ip: Some(ip.parse().unwrap()),
                ..Default::default()
            })
            .await
            .unwrap();
        ids.push((ip, i.instance_id));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let e = emu.clone();
    let task = tokio::spawn(async move { e.serve_imds(listener).await });
    for (ip, id) in &ids {
        let (st, _, token) = raw(
            &url,
            Some(ip),
            "PUT",
            "/latest/api/token",
            &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
        )
        .await;
        assert_eq!(st, 200);
        let (st, _, body) = raw(
            &url,
            Some(ip),
            "GET",
            "/latest/meta-data/instance-id",
            &[("X-aws-ec2-metadata-token", &token)],
        )
        .await;
        assert_eq!((st, body.as_str()), (200, id.as_str()));
        let (_, _, body) = raw(
            &url,
            Some(ip),
            "GET",
            "/latest/meta-data/local-ipv4",
            &[("X-aws-ec2-metadata-token", &token)],
        )
        .await;
        assert_eq!(body, *ip);
    }
    let (st, _, _) = raw(
        &url,
        Some("127.0.0.99"),
        "PUT",
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
    )
    .await;
    assert_eq!(st, 404, "no instance has that address");
    task.abort();
}

/// `/latest/user-data` answers what the instance was launched with (e.g. a NodeConfig), and 404
/// for an instance launched without.
#[tokio::test]
async fn user_data_as_launched() {
    let lab = lab(32).await;
    let mut ids = Vec::new();
    for user_data in [
        Some("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"),
        None,
    ] {
        let inst = lab
            .emu
            .run_instance(RunInstance {
                instance_type: "m5.large".into(),
                subnet_id: lab.subnet.clone(),
                user_data: user_data.map(str::to_string),
                ..Default::default()
            })
            .await
            .unwrap();
        ids.push(inst.instance_id);
    }
    let read = |id: String| {
        let emu = lab.emu.clone();
        async move {
            let url = emu.imds_endpoint(&id).await.unwrap();
            vpcnet_imds::Imds::with_endpoint(&url, None)
                .unwrap()
                .user_data()
                .await
                .unwrap()
        }
    };
    assert_eq!(
        read(ids[0].clone()).await.as_deref(),
        Some("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n")
    );
    assert_eq!(read(ids[1].clone()).await, None);
}
