//! Wire cross-check against moto (an independent AWS emulator, PyPI `moto[server]`): the same
//! aws-sdk-ec2 call sequence runs against moto and against vpcnet-emu, and the parsed results
//! are compared field by field where both support them.
//!
//! Compared per step: ID shapes (`eni-`, `eni-attach-` prefixes), subnet/VPC/instance
//! references, availability zone, description, status, MAC shape, private IP count and the
//! primary flag, secondary addresses inside the subnet, tags, attachment (instance, device
//! index, status, DeleteOnTermination), filter results, and the NotFound code after delete.
//!
//! Skipped, and why:
//! - concrete ID, MAC and address values: both draw them at random;
//! - the length of AssignPrivateIpAddresses' `assignedPrivateIpAddressesSet`: EC2 lists the
//!   addresses just assigned, moto lists every address of the ENI (both must contain the new ones);
//! - `AvailableIpAddressCount` deltas: moto does not track subnet usage;
//! - limits and error codes for them: moto enforces none (the reason vpcnet-emu exists);
//! - `attachTime`, `ownerId`, `privateDnsName`: values differ by design (clock, account, region
//!   naming), the SDK parsing them is checked in `ec2_eni_lifecycle.rs` and `ec2_describe.rs`.

mod common;

use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{Filter, InstanceType, ResourceType, Tag, TagSpecification};
use aws_sdk_ec2::Client;
use common::client;
use common::moto::{assert_same_trace, delete_and_describe, start_moto, vpc_with_subnet, Trace};
use ipnet::Ipv4Net;
use vpcnet_emu::{Emulator, RunInstance};

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

/// The resources a sequence runs against.
struct Setup {
    vpc_id: String,
    subnet_id: String,
    subnet_cidr: Ipv4Net,
    instance_id: String,
}

fn rel(v: Option<&str>, setup: &Setup) -> String {
    match v {
        None => "<none>".into(),
        Some(s) if s == setup.vpc_id => "<vpc>".into(),
        Some(s) if s == setup.subnet_id => "<subnet>".into(),
        Some(s) if s == setup.instance_id => "<instance>".into(),
        Some(s) => s.to_string(),
    }
}

fn id_shape(v: Option<&str>) -> String {
    match v {
        None => "<none>".into(),
        Some(s) => format!("{}-<id>", s.rsplit_once('-').map(|(p, _)| p).unwrap_or("?")),
    }
}

fn in_subnet(ips: &[&str], setup: &Setup) -> String {
    ips.iter()
        .all(|ip| {
            ip.parse::<Ipv4Addr>()
                .is_ok_and(|a| setup.subnet_cidr.contains(&a))
        })
        .to_string()
}

async fn run_sequence(ec2: &Client, setup: &Setup) -> Trace {
    let mut t: Trace = Vec::new();
    let mut put = |k: &str, v: String| t.push((k.to_string(), v));

    // create
    let r = ec2
        .create_network_interface()
        .subnet_id(&setup.subnet_id)
        .description("vpcnet xcheck")
        .secondary_private_ip_address_count(2)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::NetworkInterface)
                .tags(
                    Tag::builder()
                        .key("cluster.k8s.amazonaws.com/name")
                        .value("xcheck")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("CreateNetworkInterface");
    let eni = r.network_interface().expect("networkInterface");
    let eni_id = eni.network_interface_id().unwrap().to_string();
    put("create.id", id_shape(Some(&eni_id)));
    put("create.subnet", rel(eni.subnet_id(), setup));
    put("create.vpc", rel(eni.vpc_id(), setup));
    put("create.az", rel(eni.availability_zone(), setup));
    put("create.description", rel(eni.description(), setup));
    put(
        "create.status",
        rel(eni.status().map(|s| s.as_str()), setup),
    );
    let mac = eni.mac_address().unwrap_or("");
    put(
        "create.mac_shape",
        (mac.len() == 17 && mac.split(':').count() == 6).to_string(),
    );
    put(
        "create.ip_count",
        eni.private_ip_addresses().len().to_string(),
    );
    put(
        "create.first_is_primary",
        format!(
            "{:?}",
            eni.private_ip_addresses().first().and_then(|p| p.primary())
        ),
    );
    put(
        "create.primary_matches",
        (eni.private_ip_addresses()
            .first()
            .and_then(|p| p.private_ip_address())
            == eni.private_ip_address())
        .to_string(),
    );
    let ips: Vec<&str> = eni
        .private_ip_addresses()
        .iter()
        .filter_map(|p| p.private_ip_address())
        .collect();
    put("create.ips_in_subnet", in_subnet(&ips, setup));
    put("create.groups", eni.groups().len().to_string());
    put(
        "create.tags",
        format!(
            "{:?}",
            eni.tag_set()
                .iter()
                .map(|t| (t.key(), t.value()))
                .collect::<Vec<_>>()
        ),
    );
    put(
        "create.attachment",
        format!("{:?}", eni.attachment().map(|_| "some")),
    );

    // attach
    let r = ec2
        .attach_network_interface()
        .network_interface_id(&eni_id)
        .instance_id(&setup.instance_id)
        .device_index(1)
        .send()
        .await
        .expect("AttachNetworkInterface");
    let att_id = r.attachment_id().unwrap().to_string();
    put("attach.id", id_shape(Some(&att_id)));

    // assign
    let r = ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni_id)
        .secondary_private_ip_address_count(2)
        .send()
        .await
        .expect("AssignPrivateIpAddresses");
    put(
        "assign.eni",
        (r.network_interface_id() == Some(eni_id.as_str())).to_string(),
    );
    let assigned: Vec<String> = r
        .assigned_private_ip_addresses()
        .iter()
        .filter_map(|a| a.private_ip_address())
        .map(str::to_string)
        .collect();
    // EC2 lists the newly assigned addresses; moto lists every address of the ENI (skipped: exact count)
    put("assign.at_least_new", (assigned.len() >= 2).to_string());
    put(
        "assign.in_subnet",
        in_subnet(
            &assigned.iter().map(String::as_str).collect::<Vec<_>>(),
            setup,
        ),
    );

    // describe with filters
    let d = ec2
        .describe_network_interfaces()
        .filters(filter("attachment.instance-id", &setup.instance_id))
        .filters(filter("network-interface-id", &eni_id))
        .send()
        .await
        .expect("DescribeNetworkInterfaces");
    put("describe.count", d.network_interfaces().len().to_string());
    if let Some(n) = d.network_interfaces().first() {
        put(
            "describe.status",
            rel(n.status().map(|s| s.as_str()), setup),
        );
        let a = n.attachment();
        put(
            "describe.att_id",
            (a.and_then(|a| a.attachment_id()) == Some(att_id.as_str())).to_string(),
        );
        put(
            "describe.att_instance",
            rel(a.and_then(|a| a.instance_id()), setup),
        );
        put(
            "describe.att_device",
            format!("{:?}", a.and_then(|a| a.device_index())),
        );
        put(
            "describe.att_status",
            rel(a.and_then(|a| a.status()).map(|s| s.as_str()), setup),
        );
        put(
            "describe.ip_count",
            n.private_ip_addresses().len().to_string(),
        );
        let all: Vec<&str> = n
            .private_ip_addresses()
            .iter()
            .filter_map(|p| p.private_ip_address())
            .collect();
        put(
            "describe.has_assigned",
            assigned
                .iter()
                .all(|a| all.contains(&a.as_str()))
                .to_string(),
        );
        put(
            "describe.primary_flags",
            format!(
                "{:?}",
                n.private_ip_addresses()
                    .iter()
                    .map(|p| p.primary())
                    .collect::<Vec<_>>()
            ),
        );
        put(
            "describe.tags",
            format!(
                "{:?}",
                n.tag_set()
                    .iter()
                    .map(|t| (t.key(), t.value()))
                    .collect::<Vec<_>>()
            ),
        );
    }
    let d = ec2
        .describe_network_interfaces()
        .filters(filter("subnet-id", &setup.subnet_id))
        .filters(filter("vpc-id", &setup.vpc_id))
        .filters(filter("tag:cluster.k8s.amazonaws.com/name", "xcheck"))
        .send()
        .await
        .expect("DescribeNetworkInterfaces by subnet/vpc/tag");
    put(
        "describe_tag.ids",
        format!(
            "{:?}",
            d.network_interfaces()
                .iter()
                .map(|n| n.network_interface_id() == Some(eni_id.as_str()))
                .collect::<Vec<_>>()
        ),
    );
    let d = ec2
        .describe_network_interfaces()
        .filters(filter("description", "vpcnet xcheck"))
        .send()
        .await
        .expect("by description");
    put(
        "describe_desc.count",
        d.network_interfaces().len().to_string(),
    );

    // unassign one of the secondary addresses
    let primary = eni.private_ip_address().unwrap().to_string();
    let victim = assigned
        .iter()
        .find(|a| **a != primary)
        .expect("a secondary address")
        .clone();
    ec2.unassign_private_ip_addresses()
        .network_interface_id(&eni_id)
        .private_ip_addresses(&victim)
        .send()
        .await
        .expect("UnassignPrivateIpAddresses");
    let d = ec2
        .describe_network_interfaces()
        .network_interface_ids(&eni_id)
        .send()
        .await
        .expect("describe by id");
    let n = &d.network_interfaces()[0];
    put(
        "unassign.ip_count",
        n.private_ip_addresses().len().to_string(),
    );
    put(
        "unassign.gone",
        (!n.private_ip_addresses()
            .iter()
            .any(|p| p.private_ip_address() == Some(victim.as_str())))
        .to_string(),
    );

    // detach
    ec2.detach_network_interface()
        .attachment_id(&att_id)
        .send()
        .await
        .expect("DetachNetworkInterface");
    let d = ec2
        .describe_network_interfaces()
        .network_interface_ids(&eni_id)
        .send()
        .await
        .expect("describe after detach");
    let n = &d.network_interfaces()[0];
    put("detach.status", rel(n.status().map(|s| s.as_str()), setup));
    put(
        "detach.attachment",
        format!(
            "{:?}",
            n.attachment().and_then(|a| a.instance_id()).map(|_| "some")
        ),
    );

    // delete
    put("delete.describe", delete_and_describe(ec2, &eni_id).await);
    t
}

async fn moto_setup(ec2: &Client) -> Setup {
    let (vpc_id, subnet_id) = vpc_with_subnet(ec2, "10.0.0.0/24").await;
    let r = ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(InstanceType::M5Large)
        .subnet_id(&subnet_id)
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .expect("moto RunInstances");
    let instance_id = r.instances()[0].instance_id().unwrap().to_string();
    Setup {
        vpc_id,
        subnet_id,
        subnet_cidr: "10.0.0.0/24".parse().unwrap(),
        instance_id,
    }
}

async fn emu_setup(emu: &Emulator) -> Setup {
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet_id = emu
        .create_subnet(&vpc.vpc_id, "10.0.0.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let i = emu
        .run_instance(RunInstance {
            instance_type: "m5.large".into(),
            subnet_id: subnet_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    Setup {
        vpc_id: vpc.vpc_id,
        subnet_id,
        subnet_cidr: "10.0.0.0/24".parse().unwrap(),
        instance_id: i.instance_id,
    }
}

#[tokio::test]
async fn same_sequence_same_results_as_moto() {
    let moto = start_moto();
    let moto_ec2 = client(&moto.endpoint, 1);
    let moto_trace = run_sequence(&moto_ec2, &moto_setup(&moto_ec2).await).await;

    let emu = Emulator::new(40);
    let server = emu.spawn().await.unwrap();
    let emu_ec2 = client(&server.endpoint, 1);
    let emu_trace = run_sequence(&emu_ec2, &emu_setup(&emu).await).await;

    // the trace is not trivially empty
    assert_same_trace(&moto_trace, &emu_trace, 30);
    drop(moto);
}
