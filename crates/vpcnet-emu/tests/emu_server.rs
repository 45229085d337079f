//! The emulator as a server: the `vpcnet-emu` binary with a setup file, and EC2 calls counted
//! per calling instance address.

mod common;

use std::io::BufRead;

use common::client;
use serde_json::{json, Value};
use vpcnet_emu::Emulator;

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
