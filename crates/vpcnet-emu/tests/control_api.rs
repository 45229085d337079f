//! The emulator's JSON control API (`/_emu/...`): it mirrors the emulator's methods, and
//! manages EKS clusters.

mod common;

use common::{client, control as call};
use serde_json::json;
use vpcnet_emu::Emulator;

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
