//! `vpcnet plan --vpc-id`: the subnets read from EC2 (the in-process emulator, reached through
//! the standard `AWS_ENDPOINT_URL_EC2`), with their free addresses and tags, drive the plan.

use std::io::Write;

use vpcnet_emu::{Emulator, RunInstance};

const FLEET: &str = r#"
node_groups:
  - name: web
    instance_type: m5.large
    count: 4
    pods_per_node: 5
    subnets: [NODE_SUBNET]
"#;

async fn plan(endpoint: &str, vpc: &str, fleet: &str) -> std::process::Output {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(fleet.as_bytes()).unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_vpcnet"))
        .args(["plan", "-o", "json", "--vpc-id", vpc, "-f"])
        .arg(file.path())
        .env("AWS_ENDPOINT_URL_EC2", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env_remove("AWS_PROFILE")
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn subnets_free_addresses_and_tags_come_from_ec2() {
    let emu = Emulator::new(3);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let nodes = emu
        .create_subnet(&vpc.vpc_id, "10.0.0.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let pods = emu
        .create_subnet(&vpc.vpc_id, "10.0.16.0/20".parse().unwrap(), "us-east-1a")
        .unwrap();
    emu.create_tags(
        std::slice::from_ref(&pods),
        &[("kubernetes.io/role/cni".into(), "1".into())],
    )
    .unwrap();
    let server = emu.spawn().await.unwrap();
    // An instance already running in the node subnet: EC2's free count shows it.
    emu.run_instance(RunInstance {
        instance_type: "m5.large".into(),
        subnet_id: nodes.clone(),
        ..Default::default()
    })
    .await
    .unwrap();

    let out = plan(
        &server.endpoint,
        &vpc.vpc_id,
        &FLEET.replace("NODE_SUBNET", &nodes),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let subnet = |id: &str| {
        j["plan"]["subnets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .unwrap()
    };
    // 251 usable, the running instance's primary address taken.
    assert_eq!(subnet(&nodes)["available"], 250);
    assert_eq!(subnet(&nodes)["fleet_addresses"], 40, "the primary ENIs");
    // Discovered through its tag: the spare ENIs go there.
    assert_eq!(subnet(&pods)["fleet_addresses"], 40);

    // Subnets in the file and from EC2: refused, naming the fix.
    let both = format!(
        "subnets: [{{id: {nodes}, cidr: 10.0.0.0/24, zone: us-east-1a}}]\n{}",
        FLEET.replace("NODE_SUBNET", &nodes)
    );
    let out = plan(&server.endpoint, &vpc.vpc_id, &both).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("remove the file's subnets"),
        "{err}"
    );

    // A VPC without subnets (or another region's): refused, naming what to check.
    let out = plan(&server.endpoint, "vpc-0000000000000000", FLEET).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("check the VPC ID"),
        "{err}"
    );
}
