//! EC2's limits through aws-sdk-ec2: ENIs per instance type and network card, IPv4 per ENI,
//! subnet free addresses, /28 prefixes carved from aligned free space, AZ and SG checks.

mod common;

use common::{code, lab, status};
use vpcnet_emu::RunInstance;

async fn new_eni(lab: &common::Lab, subnet: &str) -> String {
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(subnet)
        .send()
        .await
        .unwrap();
    r.network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn m5_large_refuses_a_fourth_eni() {
    let lab = lab(10).await;
    let inst = lab.instance("m5.large").await;
    for idx in 1..=2 {
        let eni = new_eni(&lab, &lab.subnet).await;
        lab.ec2
            .attach_network_interface()
            .network_interface_id(&eni)
            .instance_id(&inst.instance_id)
            .device_index(idx)
            .send()
            .await
            .unwrap();
    }
    let fourth = new_eni(&lab, &lab.subnet).await;
    let e = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&fourth)
        .instance_id(&inst.instance_id)
        .device_index(3)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "AttachmentLimitExceeded");
    assert_eq!(status(&e), 400);
    assert!(
        lab.emu.eni(&fourth).unwrap().attachment.is_none(),
        "a refused attach leaves the ENI available"
    );
}

#[tokio::test]
async fn network_cards_have_their_own_limits() {
    let lab = lab(11).await;
    let inst = lab.instance("p4d.24xlarge").await; // 4 cards x 15 ENIs
    let eni = new_eni(&lab, &lab.subnet).await;
    let r = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni)
        .instance_id(&inst.instance_id)
        .device_index(0)
        .network_card_index(3)
        .send()
        .await
        .unwrap();
    assert_eq!(r.network_card_index(), Some(3));
    let eni = new_eni(&lab, &lab.subnet).await;
    let e = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .network_card_index(4)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    // same device index on the same card is taken
    let e = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni)
        .instance_id(&inst.instance_id)
        .device_index(0)
        .network_card_index(3)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    assert!(e
        .into_service_error()
        .meta()
        .message()
        .unwrap()
        .contains("device index"));

    // a type with 2 ENIs on card 1 only: the 3rd on card 1 is refused even though card 0 has room
    lab.emu
        .register_instance_type(vpcnet_limits::InstanceLimits {
            instance_type: "test.cards".into(),
            eni_limit: 4,
            ipv4_per_eni: 5,
            default_network_card: 0,
            network_cards: vec![
                vpcnet_limits::NetworkCard {
                    index: 0,
                    max_enis: 4,
                },
                vpcnet_limits::NetworkCard {
                    index: 1,
                    max_enis: 2,
                },
            ],
            hypervisor: vpcnet_limits::Hypervisor::Nitro,
            bare_metal: false,
            vcpus: Some(2),
        });
    let inst = lab.instance("test.cards").await;
    for idx in 0..2 {
        let eni = new_eni(&lab, &lab.subnet).await;
        lab.ec2
            .attach_network_interface()
            .network_interface_id(&eni)
            .instance_id(&inst.instance_id)
            .device_index(idx)
            .network_card_index(1)
            .send()
            .await
            .unwrap();
    }
    let eni = new_eni(&lab, &lab.subnet).await;
    let e = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni)
        .instance_id(&inst.instance_id)
        .device_index(2)
        .network_card_index(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "AttachmentLimitExceeded");
}

#[tokio::test]
async fn eni_on_m5_large_refuses_a_tenth_ipv4() {
    let lab = lab(12).await;
    let inst = lab.instance("m5.large").await;
    let eni = inst.primary_eni.unwrap().eni_id;
    // primary + 8 secondaries = 9 of 10 slots
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(8)
        .send()
        .await
        .unwrap();
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(2)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "PrivateIpAddressLimitExceeded");
    assert_eq!(
        lab.emu.eni(&eni).unwrap().secondary_ips.len(),
        8,
        "all-or-nothing"
    );
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(1)
        .send()
        .await
        .unwrap();
    // m5.large: 10 IPv4 per ENI, the primary included, so the 9th secondary fits and the
    // 10th secondary (the 11th IPv4) is refused
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "PrivateIpAddressLimitExceeded");
    // and a /28 prefix takes a slot too
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefix_count(1)
        .send()
        .await
        .unwrap_err();
    assert!([
        "PrivateIpAddressLimitExceeded",
        "InvalidParameterCombination"
    ]
    .contains(&code(&e).as_str()));
}

#[tokio::test]
async fn prefixes_take_one_slot_each() {
    let lab = lab(13).await;
    let inst = lab.instance("m5.large").await;
    let eni = inst.primary_eni.unwrap().eni_id;
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefix_count(9)
        .send()
        .await
        .unwrap();
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefix_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "PrivateIpAddressLimitExceeded");
    assert_eq!(
        lab.emu.subnet_available(&lab.subnet),
        Some(256 - 5 - 1 - 9 * 16)
    );
}

#[tokio::test]
async fn slash28_subnet_serves_exactly_eleven() {
    let lab = lab(14).await;
    let small = lab
        .emu
        .create_subnet(
            &lab.vpc.vpc_id,
            "10.0.9.0/28".parse().unwrap(),
            "us-east-1a",
        )
        .unwrap();
    let s = lab
        .ec2
        .describe_subnets()
        .subnet_ids(&small)
        .send()
        .await
        .unwrap();
    assert_eq!(s.subnets()[0].available_ip_address_count(), Some(11));
    // one ENI with 9 secondaries = 10 addresses, then one more ENI = 11
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&small)
        .secondary_private_ip_address_count(9)
        .send()
        .await
        .unwrap();
    let mut all: Vec<String> = r
        .network_interface()
        .unwrap()
        .private_ip_addresses()
        .iter()
        .map(|p| p.private_ip_address().unwrap().to_string())
        .collect();
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&small)
        .send()
        .await
        .unwrap();
    all.push(
        r.network_interface()
            .unwrap()
            .private_ip_address()
            .unwrap()
            .to_string(),
    );
    let mut got: Vec<std::net::Ipv4Addr> = all.iter().map(|ip| ip.parse().unwrap()).collect();
    got.sort();
    let expect: Vec<std::net::Ipv4Addr> = (4..15)
        .map(|i| std::net::Ipv4Addr::new(10, 0, 9, i))
        .collect();
    assert_eq!(
        got, expect,
        "exactly .4 to .14, each once (network, router, DNS, reserved and broadcast held back)"
    );
    let e = lab
        .ec2
        .create_network_interface()
        .subnet_id(&small)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InsufficientFreeAddressesInSubnet");
    let s = lab
        .ec2
        .describe_subnets()
        .subnet_ids(&small)
        .send()
        .await
        .unwrap();
    assert_eq!(s.subnets()[0].available_ip_address_count(), Some(0));
}

#[tokio::test]
async fn fragmented_subnet_has_addresses_but_no_prefix() {
    let lab = lab(15).await;
    // /26 = 4 aligned /28 blocks; blocks 0 and 3 hold reserved addresses
    let frag = lab
        .emu
        .create_subnet(
            &lab.vpc.vpc_id,
            "10.0.8.0/26".parse().unwrap(),
            "us-east-1a",
        )
        .unwrap();
    let inst = lab
        .emu
        .run_instance(RunInstance {
            instance_type: "m5.large".into(),
            subnet_id: frag.clone(),
            private_ip: Some("10.0.8.20".parse().unwrap()),
            ..Default::default()
        })
        .await
        .unwrap();
    let eni = inst.primary_eni.unwrap().eni_id;
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .private_ip_addresses("10.0.8.40")
        .send()
        .await
        .unwrap();
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefix_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InsufficientCidrBlocks");
    let r = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(1)
        .send()
        .await
        .unwrap();
    assert_eq!(r.assigned_private_ip_addresses().len(), 1);
    // a fresh ENI asking for a prefix at creation fails the same way
    let e = lab
        .ec2
        .create_network_interface()
        .subnet_id(&frag)
        .ipv4_prefix_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InsufficientCidrBlocks");
}

#[tokio::test]
async fn same_az_and_groups_of_the_vpc() {
    let lab = lab(16).await;
    let inst = lab.instance("m5.large").await;
    let other_az = lab
        .emu
        .create_subnet(
            &lab.vpc.vpc_id,
            "10.0.1.0/24".parse().unwrap(),
            "us-east-1b",
        )
        .unwrap();
    let eni = new_eni(&lab, &other_az).await;
    let e = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    assert!(e
        .into_service_error()
        .meta()
        .message()
        .unwrap()
        .contains("availability zone"));

    let other_vpc = lab
        .emu
        .create_vpc("192.168.0.0/16".parse().unwrap(), &[])
        .unwrap();
    let foreign = lab
        .emu
        .create_security_group(&other_vpc.vpc_id, "foreign")
        .unwrap();
    let e = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .groups(&foreign)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidGroup.NotFound");
    let e = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .groups("sg-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidGroup.NotFound");
}
