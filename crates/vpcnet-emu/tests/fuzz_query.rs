//! Random form bodies against the EC2 Query endpoint (in-process through the axum router):
//! every answer is well-formed XML, a success of the right shape or EC2's error envelope with
//! an EC2 status, never a panic; and after any sequence the cloud's books still balance.

use std::collections::BTreeMap;

use axum::body::Body;
use proptest::prelude::*;
use quick_xml::events::Event;
use quick_xml::Reader;
use tower::ServiceExt;
use vpcnet_emu::{Emulator, RunInstance};

const ACTIONS: &[&str] = &[
    "DescribeInstances",
    "DescribeInstanceTypes",
    "DescribeSubnets",
    "DescribeVpcs",
    "DescribeNetworkInterfaces",
    "CreateNetworkInterface",
    "AttachNetworkInterface",
    "DetachNetworkInterface",
    "DeleteNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "AssignPrivateIpAddresses",
    "UnassignPrivateIpAddresses",
    "CreateTags",
    "DeleteTags",
    "TerminateInstances",
    "RunInstances",
    "CreateSecurityGroup",
    "DescribeSecurityGroups",
    "AuthorizeSecurityGroupIngress",
    "RevokeSecurityGroupIngress",
    "",
];

const KEYS: &[&str] = &[
    "SubnetId",
    "NetworkInterfaceId",
    "NetworkInterfaceId.1",
    "InstanceId",
    "InstanceId.1",
    "DeviceIndex",
    "NetworkCardIndex",
    "AttachmentId",
    "Force",
    "Description",
    "Description.Value",
    "SecurityGroupId.1",
    "SecondaryPrivateIpAddressCount",
    "Ipv4PrefixCount",
    "Ipv4Prefix.1",
    "Ipv4Prefix.1.Ipv4Prefix",
    "PrivateIpAddress",
    "PrivateIpAddress.1",
    "PrivateIpAddress.2",
    "PrivateIpAddresses.1.PrivateIpAddress",
    "PrivateIpAddresses.1.Primary",
    "AllowReassignment",
    "Filter.1.Name",
    "Filter.1.Value.1",
    "Filter.2.Name",
    "Filter.2.Value.1",
    "MaxResults",
    "NextToken",
    "ResourceId.1",
    "Tag.1.Key",
    "Tag.1.Value",
    "TagSpecification.1.ResourceType",
    "TagSpecification.1.Tag.1.Key",
    "TagSpecification.1.Tag.1.Value",
    "InstanceType.1",
    "Attachment.AttachmentId",
    "Attachment.DeleteOnTermination",
    "SourceDestCheck.Value",
    "DryRun",
    "SubnetId.1",
    "VpcId.1",
    "GroupId",
    "GroupId.1",
    "GroupName",
    "GroupName.1",
    "GroupDescription",
    "VpcId",
    "IpProtocol",
    "FromPort",
    "ToPort",
    "CidrIp",
    "IpPermissions.1.IpProtocol",
    "IpPermissions.1.FromPort",
    "IpPermissions.1.ToPort",
    "IpPermissions.1.IpRanges.1.CidrIp",
    "IpPermissions.1.Groups.1.GroupId",
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("$ENI".to_string()),
        Just("$INSTANCE".to_string()),
        Just("$SUBNET".to_string()),
        Just("$ATTACH".to_string()),
        Just("$SG".to_string()),
        Just("tcp".to_string()),
        Just("-1".to_string()),
        Just("icmp".to_string()),
        Just("10.0.1.0/24".to_string()),
        (0u32..20).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        (0u8..64).prop_map(|n| format!("10.0.0.{n}")),
        (0u8..4).prop_map(|n| format!("10.0.0.{}/28", n * 16)),
        Just("10.0.0.8/28".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("m5.large".to_string()),
        Just("attachment.instance-id".to_string()),
        Just("tag:k".to_string()),
        Just("subnet-id".to_string()),
        Just("status".to_string()),
        "\\PC{0,12}",
        ".{0,8}",
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let structured = (
        prop::sample::select(ACTIONS),
        prop::collection::vec((prop::sample::select(KEYS), value()), 0..8),
    )
        .prop_map(|(action, params)| {
            let mut s = form_urlencoded::Serializer::new(String::new());
            if !action.is_empty() {
                s.append_pair("Action", action);
            }
            s.append_pair("Version", "2016-11-15");
            for (k, v) in params {
                s.append_pair(k, &v);
            }
            s.finish().into_bytes()
        });
    prop_oneof![3 => structured, 1 => prop::collection::vec(any::<u8>(), 0..200)]
}

/// Root element name and every element's text, or the XML error.
fn parse_xml(body: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut r = Reader::from_str(body);
    r.config_mut().check_end_names = true;
    let mut root = None;
    let mut stack: Vec<String> = Vec::new();
    let mut leaves = Vec::new();
    loop {
        match r.read_event().map_err(|e| format!("{e} in {body}"))? {
            Event::Start(s) => {
                let name = String::from_utf8_lossy(s.name().as_ref()).to_string();
                root.get_or_insert(name.clone());
                stack.push(name);
            }
            Event::End(_) => {
                stack.pop();
            }
            Event::Text(t) => {
                let text = t.decode().map_err(|e| e.to_string())?.to_string();
                if let Some(top) = stack.last() {
                    leaves.push((top.clone(), text));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !stack.is_empty() {
        return Err(format!("unclosed elements {stack:?}"));
    }
    Ok((root.ok_or("no root element")?, leaves))
}

struct Fixture {
    emu: Emulator,
    ids: BTreeMap<&'static str, String>,
}

async fn fixture() -> Fixture {
    let emu = Emulator::new(7);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "10.0.0.0/26".parse().unwrap(), "us-east-1a")
        .unwrap();
    let inst = emu
        .run_instance(RunInstance {
            instance_type: "m5.large".into(),
            subnet_id: subnet.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let eni = inst.primary_eni.unwrap();
    let mut ids = BTreeMap::new();
    ids.insert("$ENI", eni.eni_id);
    ids.insert("$ATTACH", eni.attachment.unwrap().attachment_id);
    ids.insert("$INSTANCE", inst.instance_id);
    ids.insert("$SUBNET", subnet);
    ids.insert("$SG", vpc.default_security_group_id);
    Fixture { emu, ids }
}

/// The cloud's books ([`vpcnet_emu::model::Cloud::check_books`]).
fn books_balance(emu: &Emulator) -> Result<(), String> {
    emu.with_cloud(|c| c.check_books())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_bodies_get_well_formed_answers(bodies in prop::collection::vec(body(), 1..6)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let fx = fixture().await;
            let app = fx.emu.router();
            for raw in bodies {
                let mut text = String::from_utf8_lossy(&raw).to_string();
                for (k, v) in &fx.ids {
                    text = text.replace(k, v);
                }
                let req = http::Request::post("/")
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(Body::from(text.clone()))
                    .unwrap();
                let resp = app.clone().oneshot(req).await.unwrap();
                let status = resp.status().as_u16();
                let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap();
                let body = String::from_utf8(bytes.to_vec()).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let (root, leaves) = parse_xml(&body).map_err(TestCaseError::fail)?;
                if status == 200 {
                    let action = form_urlencoded::parse(text.as_bytes())
                        .filter(|(k, _)| k == "Action")
                        .last()
                        .map(|(_, v)| v.to_string())
                        .unwrap_or_default();
                    prop_assert_eq!(root, format!("{action}Response"));
                    prop_assert!(leaves.iter().any(|(k, _)| k == "requestId"));
                } else {
                    prop_assert!([400, 403, 412, 500, 503].contains(&status), "status {}", status);
                    prop_assert_eq!(root, "Response");
                    let code = leaves.iter().find(|(k, _)| k == "Code").map(|(_, v)| v.clone());
                    prop_assert!(code.as_deref().is_some_and(|c| !c.is_empty()), "no Code in {}", body);
                    let msg = leaves.iter().find(|(k, _)| k == "Message").map(|(_, v)| v.clone()).unwrap_or_default();
                    if code.as_deref() == Some("MissingParameter") {
                        prop_assert!(msg.contains("parameter"), "MissingParameter must name the parameter: {}", msg);
                    }
                }
                books_balance(&fx.emu).map_err(TestCaseError::fail)?;
            }
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn bad_parameters_name_the_parameter() {
    let fx = fixture().await;
    let app = fx.emu.router();
    for (body, code, names) in [
        (
            "Action=AttachNetworkInterface&InstanceId=i-1&DeviceIndex=1",
            "MissingParameter",
            "NetworkInterfaceId",
        ),
        (
            "Action=AttachNetworkInterface&NetworkInterfaceId=eni-1&InstanceId=i-1&DeviceIndex=x",
            "InvalidParameterValue",
            "DeviceIndex",
        ),
        (
            "Action=AssignPrivateIpAddresses&NetworkInterfaceId=eni-1&Ipv4Prefix.1=10.0.0.0",
            "InvalidParameterValue",
            "Ipv4Prefix.1",
        ),
        (
            "Action=DescribeNetworkInterfaces&Filter.1.Value.1=x",
            "MissingParameter",
            "Filter.1.Name",
        ),
        (
            "Action=CreateTags&ResourceId.1=eni-1&Tag.1.Value=v",
            "MissingParameter",
            "Tag.1.Key",
        ),
        (
            "Action=DetachNetworkInterface&AttachmentId=eni-attach-1&Force=maybe",
            "InvalidParameterValue",
            "Force",
        ),
        ("Version=2016-11-15", "MissingParameter", "Action"),
    ] {
        let req = http::Request::post("/").body(Body::from(body)).unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let (_, leaves) = parse_xml(&text).unwrap();
        let got: BTreeMap<_, _> = leaves.into_iter().collect();
        assert_eq!(got["Code"], code, "{body}: {text}");
        assert!(got["Message"].contains(names), "{body}: {text}");
        assert!(got.contains_key("RequestID"));
    }
}
