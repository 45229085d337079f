//! IPv6 wire cross-check against moto (PyPI `moto[server]`, see `tests/common/moto.rs`): the
//! same aws-sdk-ec2 calls run against moto and against vpcnet-emu, and the parsed results are
//! compared where moto supports IPv6. Like the other cross-checks it does not skip: without
//! moto it fails, naming the fix.
//!
//! Compared: the VPC's IPv6 association (count, /56, state), the subnet's (count, /64 inside
//! the VPC's block), CreateNetworkInterface with `Ipv6AddressCount` (how many, inside the
//! /64), AssignIpv6Addresses by count and by explicit address (the new ones are in the answer,
//! inside the /64), DescribeNetworkInterfaces' `ipv6AddressesSet` after each step,
//! UnassignIpv6Addresses (the answer names the address, it is gone).
//!
//! Skipped, and why:
//! - concrete blocks and addresses: moto draws the VPC's /56 at random (Amazon-provided);
//! - the length of `assignedIpv6Addresses`: EC2 lists the addresses just assigned, moto every
//!   address of the ENI (both must contain the new ones);
//! - the subnet association's state: moto nests its state element one level too deep;
//! - `/80` prefixes (`Ipv6PrefixCount`, `Ipv6Prefix.N`), limits and error codes: moto has none
//!   of them; `ec2_ipv6.rs` checks them against EC2's documented shapes.

mod common;

use std::net::Ipv6Addr;

use aws_sdk_ec2::Client;
use common::client;
use common::moto::{assert_same_trace, delete_and_describe, start_moto, Trace};
use ipnet::Ipv6Net;
use vpcnet_emu::Emulator;

/// The resources a sequence runs against.
struct Setup {
    subnet_id: String,
    subnet6: Ipv6Net,
}

fn inside(addrs: &[String], net: Ipv6Net) -> String {
    addrs
        .iter()
        .all(|a| a.parse::<Ipv6Addr>().is_ok_and(|a| net.contains(&a)))
        .to_string()
}

async fn eni_ipv6(ec2: &Client, eni: &str) -> Vec<String> {
    let d = ec2
        .describe_network_interfaces()
        .network_interface_ids(eni)
        .send()
        .await
        .expect("DescribeNetworkInterfaces");
    d.network_interfaces()[0]
        .ipv6_addresses()
        .iter()
        .filter_map(|a| a.ipv6_address())
        .map(str::to_string)
        .collect()
}

/// The VPC's and subnet's IPv6 associations as described, for the trace.
async fn describe_blocks(ec2: &Client, vpc_id: &str, subnet_id: &str, t: &mut Trace) {
    let v = ec2
        .describe_vpcs()
        .vpc_ids(vpc_id)
        .send()
        .await
        .expect("DescribeVpcs");
    let assocs = v.vpcs()[0].ipv6_cidr_block_association_set();
    t.push(("vpc.ipv6_count".into(), assocs.len().to_string()));
    let vpc6: Option<Ipv6Net> = assocs
        .first()
        .and_then(|a| a.ipv6_cidr_block())
        .and_then(|c| c.parse().ok());
    t.push((
        "vpc.ipv6_len".into(),
        format!("{:?}", vpc6.map(|c| c.prefix_len())),
    ));
    t.push((
        "vpc.ipv6_state".into(),
        format!(
            "{:?}",
            assocs
                .first()
                .and_then(|a| a.ipv6_cidr_block_state())
                .and_then(|s| s.state())
                .map(|s| s.as_str().to_string())
        ),
    ));
    let s = ec2
        .describe_subnets()
        .subnet_ids(subnet_id)
        .send()
        .await
        .expect("DescribeSubnets");
    let assocs = s.subnets()[0].ipv6_cidr_block_association_set();
    t.push(("subnet.ipv6_count".into(), assocs.len().to_string()));
    let sub6: Option<Ipv6Net> = assocs
        .first()
        .and_then(|a| a.ipv6_cidr_block())
        .and_then(|c| c.parse().ok());
    t.push((
        "subnet.ipv6_len".into(),
        format!("{:?}", sub6.map(|c| c.prefix_len())),
    ));
    t.push((
        "subnet.in_vpc_block".into(),
        (vpc6.zip(sub6).is_some_and(|(v, s)| v.contains(&s))).to_string(),
    ));
}

async fn run_sequence(ec2: &Client, setup: &Setup) -> Trace {
    let mut t: Trace = Vec::new();
    let r = ec2
        .create_network_interface()
        .subnet_id(&setup.subnet_id)
        .ipv6_address_count(2)
        .send()
        .await
        .expect("CreateNetworkInterface Ipv6AddressCount");
    let eni = r.network_interface().unwrap();
    let eni_id = eni.network_interface_id().unwrap().to_string();
    let created: Vec<String> = eni
        .ipv6_addresses()
        .iter()
        .filter_map(|a| a.ipv6_address())
        .map(str::to_string)
        .collect();
    t.push(("create.ipv6_count".into(), created.len().to_string()));
    t.push(("create.in_subnet".into(), inside(&created, setup.subnet6)));

    let r = ec2
        .assign_ipv6_addresses()
        .network_interface_id(&eni_id)
        .ipv6_address_count(2)
        .send()
        .await
        .expect("AssignIpv6Addresses count");
    t.push((
        "assign.eni".into(),
        (r.network_interface_id() == Some(eni_id.as_str())).to_string(),
    ));
    let assigned = r.assigned_ipv6_addresses().to_vec();
    t.push((
        "assign.at_least_new".into(),
        (assigned.len() >= 2).to_string(),
    ));
    t.push(("assign.in_subnet".into(), inside(&assigned, setup.subnet6)));
    let held = eni_ipv6(ec2, &eni_id).await;
    t.push(("describe.count".into(), held.len().to_string()));
    t.push((
        "describe.has_all".into(),
        created
            .iter()
            .chain(&assigned)
            .all(|a| held.contains(a))
            .to_string(),
    ));

    let explicit = Ipv6Addr::from(u128::from(setup.subnet6.network()) + 0x4242).to_string();
    let r = ec2
        .assign_ipv6_addresses()
        .network_interface_id(&eni_id)
        .ipv6_addresses(&explicit)
        .send()
        .await
        .expect("AssignIpv6Addresses explicit");
    t.push((
        "assign_explicit.named".into(),
        r.assigned_ipv6_addresses().contains(&explicit).to_string(),
    ));
    let held = eni_ipv6(ec2, &eni_id).await;
    t.push(("describe2.count".into(), held.len().to_string()));

    let r = ec2
        .unassign_ipv6_addresses()
        .network_interface_id(&eni_id)
        .ipv6_addresses(&explicit)
        .send()
        .await
        .expect("UnassignIpv6Addresses");
    t.push((
        "unassign.named".into(),
        r.unassigned_ipv6_addresses()
            .contains(&explicit)
            .to_string(),
    ));
    let held = eni_ipv6(ec2, &eni_id).await;
    t.push(("unassign.count".into(), held.len().to_string()));
    t.push((
        "unassign.gone".into(),
        (!held.contains(&explicit)).to_string(),
    ));

    t.push((
        "delete.describe".into(),
        delete_and_describe(ec2, &eni_id).await,
    ));
    t
}

/// moto: an Amazon-provided /56 (drawn by moto), the subnet's /64 its first.
async fn moto_setup(ec2: &Client, t: &mut Trace) -> Setup {
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .amazon_provided_ipv6_cidr_block(true)
        .send()
        .await
        .expect("moto CreateVpc");
    let vpc = vpc.vpc().unwrap();
    let vpc_id = vpc.vpc_id().unwrap().to_string();
    let vpc6: Ipv6Net = vpc.ipv6_cidr_block_association_set()[0]
        .ipv6_cidr_block()
        .expect("moto gives the VPC a /56")
        .parse()
        .unwrap();
    let subnet6 = Ipv6Net::new(vpc6.network(), 64).unwrap();
    let s = ec2
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.0.0.0/24")
        .ipv6_cidr_block(subnet6.to_string())
        .availability_zone("us-east-1a")
        .send()
        .await
        .expect("moto CreateSubnet");
    let subnet_id = s.subnet().unwrap().subnet_id().unwrap().to_string();
    describe_blocks(ec2, &vpc_id, &subnet_id, t).await;
    Setup { subnet_id, subnet6 }
}

async fn emu_setup(emu: &Emulator, ec2: &Client, t: &mut Trace) -> Setup {
    let vpc6: Ipv6Net = "2600:1f18:77:5a00::/56".parse().unwrap();
    let subnet6 = Ipv6Net::new(vpc6.network(), 64).unwrap();
    let vpc = emu
        .create_vpc_with_ipv6("10.0.0.0/16".parse().unwrap(), &[], Some(vpc6))
        .unwrap();
    let subnet_id = emu
        .create_subnet_with_ipv6(
            &vpc.vpc_id,
            "10.0.0.0/24".parse().unwrap(),
            "us-east-1a",
            Some(subnet6),
            false,
        )
        .unwrap();
    describe_blocks(ec2, &vpc.vpc_id, &subnet_id, t).await;
    Setup { subnet_id, subnet6 }
}

#[tokio::test]
async fn same_ipv6_sequence_same_results_as_moto() {
    let moto = start_moto();
    let moto_ec2 = client(&moto.endpoint, 1);
    let mut moto_trace = Trace::new();
    let setup = moto_setup(&moto_ec2, &mut moto_trace).await;
    moto_trace.extend(run_sequence(&moto_ec2, &setup).await);

    let emu = Emulator::new(41);
    let server = emu.spawn().await.unwrap();
    let emu_ec2 = client(&server.endpoint, 1);
    let mut emu_trace = Trace::new();
    let setup = emu_setup(&emu, &emu_ec2, &mut emu_trace).await;
    emu_trace.extend(run_sequence(&emu_ec2, &setup).await);

    assert_same_trace(&moto_trace, &emu_trace, 18);
    drop(moto);
}
