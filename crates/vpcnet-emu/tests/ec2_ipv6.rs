//! IPv6 through the unmodified aws-sdk-ec2 client and IMDS: VPC /56 and subnet /64 blocks,
//! AssignIpv6Addresses / UnassignIpv6Addresses (addresses and /80 prefixes), the per-ENI
//! limit and every error code, CreateNetworkInterface's Ipv6* parameters, the describes, the
//! IMDS keys, the fabric events, and a property test that no address or prefix is handed out
//! twice.

mod common;

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use aws_config::imds::Client as Imds;
use aws_sdk_ec2::types::InstanceIpv6Address;
use common::{client, code, filter};
use ipnet::Ipv6Net;
use proptest::prelude::*;
use vpcnet_emu::model::{Cloud, CreateEniRequest, Ipv6Request, RunInstanceRequest};
use vpcnet_emu::{EmuServer, Emulator, FabricEvent, RunInstance, VpcInfo};

const VPC6: &str = "2600:1f18:1234:ab00::/56";
const SUBNET6: &str = "2600:1f18:1234:ab00::/64";

struct Lab {
    emu: Emulator,
    _server: EmuServer,
    ec2: aws_sdk_ec2::Client,
    vpc: VpcInfo,
    /// 10.0.0.0/24 + SUBNET6, AssignIpv6AddressOnCreation
    dual: String,
    /// 10.0.1.0/24, IPv4 only
    v4only: String,
}

/// A dual-stack VPC with a dual-stack subnet and an IPv4-only one, served; SDK without retries.
async fn lab(seed: u64) -> Lab {
    let emu = Emulator::new(seed);
    let vpc = emu
        .create_vpc_with_ipv6(
            "10.0.0.0/16".parse().unwrap(),
            &[],
            Some(VPC6.parse().unwrap()),
        )
        .unwrap();
    let dual = emu
        .create_subnet_with_ipv6(
            &vpc.vpc_id,
            "10.0.0.0/24".parse().unwrap(),
            "us-east-1a",
            Some(SUBNET6.parse().unwrap()),
            true,
        )
        .unwrap();
    let v4only = emu
        .create_subnet(&vpc.vpc_id, "10.0.1.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let ec2 = client(&server.endpoint, 1);
    Lab {
        emu,
        _server: server,
        ec2,
        vpc,
        dual,
        v4only,
    }
}

impl Lab {
    async fn instance(&self, instance_type: &str, subnet: &str) -> vpcnet_emu::InstanceInfo {
        self.emu
            .run_instance(RunInstance {
                instance_type: instance_type.into(),
                subnet_id: subnet.into(),
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// A new ENI in `subnet` attached at the next device index of `instance`; returns its ID.
    async fn attached_eni(&self, subnet: &str, instance: &str) -> String {
        let device = self.emu.with_cloud(|c| {
            c.enis()
                .filter(|e| {
                    e.attachment
                        .as_ref()
                        .is_some_and(|a| a.instance_id == instance)
                })
                .count() as i32
        });
        let eni = self
            .ec2
            .create_network_interface()
            .subnet_id(subnet)
            .ipv6_address_count(0)
            .send()
            .await
            .expect("CreateNetworkInterface")
            .network_interface()
            .unwrap()
            .network_interface_id()
            .unwrap()
            .to_string();
        self.ec2
            .attach_network_interface()
            .network_interface_id(&eni)
            .instance_id(instance)
            .device_index(device)
            .send()
            .await
            .expect("AttachNetworkInterface");
        eni
    }

    /// AssignIpv6Addresses on `eni`, to finish and send.
    fn assign(
        &self,
        eni: &str,
    ) -> aws_sdk_ec2::operation::assign_ipv6_addresses::builders::AssignIpv6AddressesFluentBuilder
    {
        self.ec2.assign_ipv6_addresses().network_interface_id(eni)
    }

    /// UnassignIpv6Addresses on `eni`, to finish and send.
    fn unassign(
        &self,
        eni: &str,
    ) -> aws_sdk_ec2::operation::unassign_ipv6_addresses::builders::UnassignIpv6AddressesFluentBuilder
    {
        self.ec2.unassign_ipv6_addresses().network_interface_id(eni)
    }

    async fn described(&self, eni: &str) -> aws_sdk_ec2::types::NetworkInterface {
        self.ec2
            .describe_network_interfaces()
            .network_interface_ids(eni)
            .send()
            .await
            .expect("DescribeNetworkInterfaces")
            .network_interfaces()[0]
            .clone()
    }
}

fn subnet6() -> Ipv6Net {
    SUBNET6.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

#[tokio::test]
async fn describe_vpcs_and_subnets_show_the_ipv6_blocks() {
    let lab = lab(1).await;
    let v = lab
        .ec2
        .describe_vpcs()
        .vpc_ids(&lab.vpc.vpc_id)
        .send()
        .await
        .unwrap();
    let assoc = &v.vpcs()[0].ipv6_cidr_block_association_set()[0];
    assert_eq!(assoc.ipv6_cidr_block(), Some(VPC6));
    assert!(assoc
        .association_id()
        .unwrap()
        .starts_with("vpc-cidr-assoc-"));
    assert_eq!(
        assoc
            .ipv6_cidr_block_state()
            .and_then(|s| s.state())
            .map(|s| s.as_str()),
        Some("associated")
    );
    let s = lab
        .ec2
        .describe_subnets()
        .filters(filter(
            "ipv6-cidr-block-association.ipv6-cidr-block",
            &[SUBNET6],
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(s.subnets().len(), 1);
    let dual = &s.subnets()[0];
    assert_eq!(dual.subnet_id(), Some(lab.dual.as_str()));
    assert_eq!(dual.assign_ipv6_address_on_creation(), Some(true));
    let a = &dual.ipv6_cidr_block_association_set()[0];
    assert_eq!(a.ipv6_cidr_block(), Some(SUBNET6));
    assert!(a
        .association_id()
        .unwrap()
        .starts_with("subnet-cidr-assoc-"));
    let s = lab
        .ec2
        .describe_subnets()
        .subnet_ids(&lab.v4only)
        .send()
        .await
        .unwrap();
    assert_eq!(
        s.subnets()[0].assign_ipv6_address_on_creation(),
        Some(false)
    );
    assert!(s.subnets()[0].ipv6_cidr_block_association_set().is_empty());
}

#[tokio::test]
async fn a_subnet_block_must_lie_in_the_vpc_block() {
    let lab = lab(2).await;
    let az = "us-east-1a";
    let bad = |c: &str| {
        lab.emu
            .create_subnet_with_ipv6(
                &lab.vpc.vpc_id,
                "10.0.9.0/24".parse().unwrap(),
                az,
                Some(c.parse().unwrap()),
                false,
            )
            .unwrap_err()
    };
    let e = bad("2600:1f18:1234:cd00::/64");
    assert_eq!(e.code, "InvalidSubnet.Range");
    assert!(e.message.contains(VPC6), "{}", e.message);
    assert_eq!(bad("2600:1f18:1234:ab00::/60").code, "InvalidSubnet.Range");
    assert_eq!(bad(SUBNET6).code, "InvalidSubnet.Conflict");
    // nothing was created by the failed calls
    assert_eq!(lab.emu.with_cloud(|c| c.subnets().count()), 2);
    let v4 = lab
        .emu
        .create_vpc("10.1.0.0/16".parse().unwrap(), &[])
        .unwrap();
    let e = lab
        .emu
        .create_subnet_with_ipv6(
            &v4.vpc_id,
            "10.1.0.0/24".parse().unwrap(),
            az,
            Some("2600:1f18:1234:ab01::/64".parse().unwrap()),
            false,
        )
        .unwrap_err();
    assert_eq!(e.code, "InvalidSubnet.Range");
    assert!(e.message.contains("no IPv6 CIDR block"), "{}", e.message);
    let e = lab
        .emu
        .create_vpc_with_ipv6(
            "10.2.0.0/16".parse().unwrap(),
            &[],
            Some("2600:1f18::/48".parse().unwrap()),
        )
        .unwrap_err();
    assert_eq!(e.code, "InvalidParameterValue");
    let e = lab
        .emu
        .create_vpc_with_ipv6(
            "10.2.0.0/16".parse().unwrap(),
            &[],
            Some(VPC6.parse().unwrap()),
        )
        .unwrap_err();
    assert_eq!(e.code, "InvalidParameterValue");
    assert_eq!(lab.emu.with_cloud(|c| c.vpcs().count()), 2);
}

#[tokio::test]
async fn assign_and_unassign_addresses() {
    let lab = lab(3).await;
    let i = lab.instance("m5.large", &lab.dual).await;
    let eni = lab.attached_eni(&lab.dual, &i.instance_id).await;
    let r = lab
        .assign(&eni)
        .ipv6_address_count(3)
        .send()
        .await
        .expect("AssignIpv6Addresses");
    assert_eq!(r.network_interface_id(), Some(eni.as_str()));
    let got: Vec<String> = r.assigned_ipv6_addresses().to_vec();
    assert_eq!(got.len(), 3);
    assert!(r.assigned_ipv6_prefixes().is_empty());
    for a in &got {
        assert!(subnet6().contains(&v6(a)), "{a}");
    }
    let explicit = "2600:1f18:1234:ab00::abcd";
    let r = lab
        .assign(&eni)
        .ipv6_addresses(explicit)
        .send()
        .await
        .unwrap();
    assert_eq!(r.assigned_ipv6_addresses(), [explicit.to_string()]);
    let d = lab.described(&eni).await;
    let held: Vec<&str> = d
        .ipv6_addresses()
        .iter()
        .filter_map(|a| a.ipv6_address())
        .collect();
    assert_eq!(held.len(), 4);
    assert!(held.contains(&explicit));
    assert!(d
        .ipv6_addresses()
        .iter()
        .all(|a| a.is_primary_ipv6() == Some(false)));
    // filter by address
    let f = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("ipv6-addresses.ipv6-address", &[explicit]))
        .send()
        .await
        .unwrap();
    assert_eq!(f.network_interfaces().len(), 1);
    // unassign two
    let r = lab
        .unassign(&eni)
        .ipv6_addresses(explicit)
        .ipv6_addresses(&got[0])
        .send()
        .await
        .expect("UnassignIpv6Addresses");
    assert_eq!(
        r.unassigned_ipv6_addresses(),
        [explicit.to_string(), got[0].clone()]
    );
    assert_eq!(lab.described(&eni).await.ipv6_addresses().len(), 2);
    // the freed address can be claimed again
    lab.assign(&eni)
        .ipv6_addresses(explicit)
        .send()
        .await
        .expect("reassign a freed address");
    lab.emu.with_cloud(|c| c.check_books()).unwrap();
}

#[tokio::test]
async fn assign_and_unassign_prefixes() {
    let lab = lab(4).await;
    let i = lab.instance("m5.large", &lab.dual).await;
    let eni = lab.attached_eni(&lab.dual, &i.instance_id).await;
    let r = lab
        .assign(&eni)
        .ipv6_prefix_count(1)
        .send()
        .await
        .expect("AssignIpv6Addresses prefix");
    let p: Ipv6Net = r.assigned_ipv6_prefixes()[0].parse().unwrap();
    assert_eq!(p.prefix_len(), 80);
    assert!(subnet6().contains(&p));
    let d = lab.described(&eni).await;
    assert_eq!(
        d.ipv6_prefixes()
            .iter()
            .filter_map(|x| x.ipv6_prefix())
            .collect::<Vec<_>>(),
        [p.to_string().as_str()]
    );
    // the instance's ENIs in DescribeInstances carry it too
    let di = lab
        .ec2
        .describe_instances()
        .instance_ids(&i.instance_id)
        .send()
        .await
        .unwrap();
    let inst = &di.reservations()[0].instances()[0];
    let nic = inst
        .network_interfaces()
        .iter()
        .find(|n| n.network_interface_id() == Some(eni.as_str()))
        .unwrap();
    assert_eq!(
        nic.ipv6_prefixes()[0].ipv6_prefix(),
        Some(p.to_string().as_str())
    );
    // the primary ENI got one address on creation (AssignIpv6AddressOnCreation)
    let primary = inst
        .network_interfaces()
        .iter()
        .find(|n| n.attachment().and_then(|a| a.device_index()) == Some(0))
        .unwrap();
    assert_eq!(primary.ipv6_addresses().len(), 1);
    // an address inside the prefix is in use
    let inside = Ipv6Addr::from(u128::from(p.network()) + 9).to_string();
    let e = lab
        .assign(&eni)
        .ipv6_addresses(&inside)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidIPAddress.InUse");
    let r = lab
        .unassign(&eni)
        .ipv6_prefixes(p.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.unassigned_ipv6_prefixes(), [p.to_string()]);
    assert!(lab.described(&eni).await.ipv6_prefixes().is_empty());
    // explicit prefix claim of the freed /80
    let r = lab
        .assign(&eni)
        .ipv6_prefixes(p.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.assigned_ipv6_prefixes(), [p.to_string()]);
    lab.emu.with_cloud(|c| c.check_books()).unwrap();
}

#[tokio::test]
async fn the_limit_is_ipv4_per_eni_and_a_prefix_takes_one_slot() {
    let lab = lab(5).await;
    // m5.large: 10 IPv4 per ENI → 10 IPv6 slots
    let i = lab.instance("m5.large", &lab.dual).await;
    let eni = lab.attached_eni(&lab.dual, &i.instance_id).await;
    let assign = |n: i32| lab.assign(&eni).ipv6_address_count(n).send();
    let e = assign(11).await.unwrap_err();
    assert_eq!(code(&e), "InvalidInterface.IpAddressLimitExceeded");
    assign(9).await.unwrap();
    lab.assign(&eni).ipv6_prefix_count(1).send().await.unwrap();
    let e = assign(1).await.unwrap_err();
    assert_eq!(code(&e), "InvalidInterface.IpAddressLimitExceeded");
    let e = lab
        .assign(&eni)
        .ipv6_prefix_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidInterface.IpAddressLimitExceeded");
    let d = lab.described(&eni).await;
    assert_eq!((d.ipv6_addresses().len(), d.ipv6_prefixes().len()), (9, 1));
    // the IPv4 slots are a separate count
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(9)
        .send()
        .await
        .expect("IPv4 slots are not taken by IPv6");
}

#[tokio::test]
async fn error_codes() {
    let lab = lab(6).await;
    let nitro = lab.instance("m5.large", &lab.dual).await;
    let eni = lab.attached_eni(&lab.dual, &nitro.instance_id).await;
    // subnet without an IPv6 block
    let v4eni = lab.attached_eni(&lab.v4only, &nitro.instance_id).await;
    let e = lab
        .assign(&v4eni)
        .ipv6_address_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    assert!(format!("{e:?}").contains("no IPv6 CIDR block"));
    // nothing asked, both kinds asked, count and list
    let e = lab.assign(&eni).send().await.unwrap_err();
    assert_eq!(code(&e), "MissingParameter");
    let e = lab
        .assign(&eni)
        .ipv6_address_count(1)
        .ipv6_prefix_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterCombination");
    // address outside the subnet, malformed address
    for bad in ["2600:1f18:1234:ab01::5", "not-an-address"] {
        let e = lab
            .assign(&eni)
            .ipv6_addresses(bad)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e), "InvalidParameterValue", "{bad}");
    }
    // in use on another ENI
    let taken = lab
        .assign(&eni)
        .ipv6_address_count(1)
        .send()
        .await
        .unwrap()
        .assigned_ipv6_addresses()[0]
        .clone();
    let other = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.dual)
        .send()
        .await
        .unwrap()
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    let e = lab
        .assign(&other)
        .ipv6_addresses(&taken)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidIPAddress.InUse");
    // unknown address or prefix on unassign
    let e = lab
        .unassign(&other)
        .ipv6_addresses(&taken)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = lab
        .unassign(&eni)
        .ipv6_prefixes("2600:1f18:1234:ab00:1::/80")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = lab.unassign(&eni).send().await.unwrap_err();
    assert_eq!(code(&e), "MissingParameter");
    // unknown ENI
    let e = lab
        .assign("eni-0000000000000000f")
        .ipv6_address_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidNetworkInterfaceID.NotFound");
    // prefixes on a non-Nitro (Xen) type
    let xen = lab.instance("m4.large", &lab.dual).await;
    let xen_eni = lab.attached_eni(&lab.dual, &xen.instance_id).await;
    let e = lab
        .assign(&xen_eni)
        .ipv6_prefix_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    assert!(format!("{e:?}").contains("Nitro"));
    lab.assign(&xen_eni)
        .ipv6_address_count(2)
        .send()
        .await
        .expect("addresses are fine on Xen");
    // nothing leaked by the failures
    lab.emu.with_cloud(|c| c.check_books()).unwrap();
}

#[tokio::test]
async fn create_network_interface_takes_ipv6_and_delete_frees_it() {
    let lab = lab(7).await;
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.dual)
        .ipv6_address_count(2)
        .send()
        .await
        .expect("CreateNetworkInterface Ipv6AddressCount");
    let n = r.network_interface().unwrap();
    assert_eq!(n.ipv6_addresses().len(), 2);
    let explicit = "2600:1f18:1234:ab00::77";
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.dual)
        .ipv6_addresses(
            InstanceIpv6Address::builder()
                .ipv6_address(explicit)
                .build(),
        )
        .send()
        .await
        .expect("CreateNetworkInterface Ipv6Addresses");
    let with_explicit = r.network_interface().unwrap();
    assert_eq!(
        with_explicit.ipv6_addresses()[0].ipv6_address(),
        Some(explicit)
    );
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.dual)
        .ipv6_prefix_count(1)
        .send()
        .await
        .expect("CreateNetworkInterface Ipv6PrefixCount");
    let n = r.network_interface().unwrap();
    assert_eq!((n.ipv6_addresses().len(), n.ipv6_prefixes().len()), (0, 1));
    // AssignIpv6AddressOnCreation gives one; the v4-only subnet none
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.dual)
        .send()
        .await
        .unwrap();
    assert_eq!(r.network_interface().unwrap().ipv6_addresses().len(), 1);
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.v4only)
        .send()
        .await
        .unwrap();
    assert!(r.network_interface().unwrap().ipv6_addresses().is_empty());
    let e = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.v4only)
        .ipv6_address_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    // the explicit address is taken until its ENI is deleted
    let e = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.dual)
        .ipv6_addresses(
            InstanceIpv6Address::builder()
                .ipv6_address(explicit)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidIPAddress.InUse");
    lab.ec2
        .delete_network_interface()
        .network_interface_id(with_explicit.network_interface_id().unwrap())
        .send()
        .await
        .unwrap();
    lab.ec2
        .create_network_interface()
        .subnet_id(&lab.dual)
        .ipv6_addresses(
            InstanceIpv6Address::builder()
                .ipv6_address(explicit)
                .build(),
        )
        .send()
        .await
        .expect("the deleted ENI's address is free again");
    lab.emu.with_cloud(|c| c.check_books()).unwrap();
}

#[tokio::test]
async fn attaching_checks_the_ipv6_limit_and_prefix_support() {
    let lab = lab(8).await;
    let xen = lab.instance("t2.micro", &lab.dual).await;
    let ec2 = lab.ec2.clone();
    let dual = lab.dual.clone();
    let create = |count: i32, prefixes: i32| {
        let (ec2, dual) = (ec2.clone(), dual.clone());
        async move {
            ec2.create_network_interface()
                .subnet_id(&dual)
                .ipv6_address_count(count)
                .ipv6_prefix_count(prefixes)
                .send()
                .await
                .expect("CreateNetworkInterface")
                .network_interface()
                .unwrap()
                .network_interface_id()
                .unwrap()
                .to_string()
        }
    };
    // t2.micro: 2 per ENI; no prefixes (Xen)
    for (count, prefixes, want) in [
        (3, 0, "InvalidInterface.IpAddressLimitExceeded"),
        (0, 1, "InvalidParameterValue"),
    ] {
        let eni = create(count, prefixes).await;
        let e = lab
            .ec2
            .attach_network_interface()
            .network_interface_id(&eni)
            .instance_id(&xen.instance_id)
            .device_index(1)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e), want);
    }
}

async fn imds_get(c: &Imds, path: &str) -> Result<String, String> {
    c.get(path)
        .await
        .map(|s| s.as_ref().to_string())
        .map_err(|e| format!("{e}"))
}

#[tokio::test]
async fn imds_serves_the_ipv6_keys_only_when_present() {
    let lab = lab(9).await;
    let dual = lab.instance("m5.large", &lab.dual).await;
    let v4 = lab.instance("m5.large", &lab.v4only).await;
    let eni = lab.attached_eni(&lab.dual, &dual.instance_id).await;
    let p = lab
        .assign(&eni)
        .ipv6_prefix_count(1)
        .send()
        .await
        .unwrap()
        .assigned_ipv6_prefixes()[0]
        .clone();
    let imds = Imds::builder()
        .endpoint(lab.emu.imds_endpoint(&dual.instance_id).await.unwrap())
        .unwrap()
        .build();
    let primary = dual.primary_eni.as_ref().unwrap();
    let primary_ipv6 = lab.described(&primary.eni_id).await.ipv6_addresses()[0]
        .ipv6_address()
        .unwrap()
        .to_string();
    let base = format!("/latest/meta-data/network/interfaces/macs/{}/", primary.mac);
    let keys = imds_get(&imds, &base).await.unwrap();
    for k in ["ipv6s", "subnet-ipv6-cidr-blocks", "vpc-ipv6-cidr-blocks"] {
        assert!(keys.lines().any(|l| l == k), "{k} missing from {keys}");
    }
    assert!(!keys.lines().any(|l| l == "ipv6-prefix"), "{keys}");
    assert_eq!(
        imds_get(&imds, &format!("{base}ipv6s")).await.unwrap(),
        primary_ipv6
    );
    assert_eq!(
        imds_get(&imds, &format!("{base}subnet-ipv6-cidr-blocks"))
            .await
            .unwrap(),
        SUBNET6
    );
    assert_eq!(
        imds_get(&imds, &format!("{base}vpc-ipv6-cidr-blocks"))
            .await
            .unwrap(),
        VPC6
    );
    assert!(imds_get(&imds, &format!("{base}ipv6-prefix"))
        .await
        .is_err());
    assert_eq!(
        imds_get(&imds, "/latest/meta-data/ipv6").await.unwrap(),
        primary_ipv6
    );
    // the secondary ENI: a prefix, no addresses
    let mac = lab.described(&eni).await.mac_address().unwrap().to_string();
    let base2 = format!("/latest/meta-data/network/interfaces/macs/{mac}/");
    let keys = imds_get(&imds, &base2).await.unwrap();
    assert!(keys.lines().any(|l| l == "ipv6-prefix"), "{keys}");
    assert!(!keys.lines().any(|l| l == "ipv6s"), "{keys}");
    assert_eq!(
        imds_get(&imds, &format!("{base2}ipv6-prefix"))
            .await
            .unwrap(),
        p
    );
    let e = imds_get(&imds, &format!("{base2}ipv6s")).await.unwrap_err();
    assert!(e.contains("404"), "{e}");
    // an IPv4-only instance: none of the keys, and 404s
    let imds4 = Imds::builder()
        .endpoint(lab.emu.imds_endpoint(&v4.instance_id).await.unwrap())
        .unwrap()
        .build();
    let mac4 = &v4.primary_eni.as_ref().unwrap().mac;
    let base4 = format!("/latest/meta-data/network/interfaces/macs/{mac4}/");
    let keys = imds_get(&imds4, &base4).await.unwrap();
    assert!(
        !keys.contains("ipv6s") && !keys.contains("subnet-ipv6"),
        "{keys}"
    );
    // the VPC has a /56, so vpc-ipv6-cidr-blocks is there even for a v4-only subnet
    assert!(keys.lines().any(|l| l == "vpc-ipv6-cidr-blocks"), "{keys}");
    for k in ["ipv6s", "ipv6-prefix", "subnet-ipv6-cidr-blocks"] {
        assert!(
            imds_get(&imds4, &format!("{base4}{k}")).await.is_err(),
            "{k}"
        );
    }
    assert!(imds_get(&imds4, "/latest/meta-data/ipv6").await.is_err());
}

#[test]
fn fabric_events_carry_ipv6() {
    let mut cloud = Cloud::new(1, "us-east-1", "123456789012");
    let (vpc, _) = cloud
        .create_vpc("10.0.0.0/16".parse().unwrap(), &[])
        .unwrap();
    cloud
        .associate_vpc_ipv6(&vpc, VPC6.parse().unwrap())
        .unwrap();
    let s = cloud
        .create_subnet(&vpc, "10.0.0.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    cloud.associate_subnet_ipv6(&s, subnet6(), false).unwrap();
    let id = cloud
        .create_eni(CreateEniRequest {
            subnet_id: s,
            ..Default::default()
        })
        .unwrap();
    cloud.take_events();
    let (a, _) = cloud
        .assign_ipv6(
            &id,
            Ipv6Request {
                count: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let ev = cloud.take_events();
    assert!(
        ev.iter()
            .any(|e| matches!(e, FabricEvent::AddressesAssigned(c)
            if c.cidrs.is_empty() && c.ipv6 == [Ipv6Net::from(a[0])])),
        "{ev:?}"
    );
    cloud.unassign_ipv6(&id, &a, &[]).unwrap();
    let ev = cloud.take_events();
    assert!(
        ev.iter()
            .any(|e| matches!(e, FabricEvent::AddressesUnassigned(c) if c.ipv6.len() == 1)),
        "{ev:?}"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        addrs: u32,
        prefixes: u32,
    },
    Assign {
        eni: usize,
        addrs: u32,
        prefixes: u32,
    },
    Unassign {
        eni: usize,
        nth: usize,
    },
    Delete {
        eni: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..3, 0u32..2).prop_map(|(addrs, prefixes)| Op::Create { addrs, prefixes }),
        (0usize..6, 0u32..12, 0u32..3).prop_map(|(eni, addrs, prefixes)| Op::Assign {
            eni,
            addrs,
            prefixes
        }),
        (0usize..6, 0usize..8).prop_map(|(eni, nth)| Op::Unassign { eni, nth }),
        (0usize..6).prop_map(|eni| Op::Delete { eni }),
    ]
}

/// Codes a random IPv6 operation may answer.
const ALLOWED: &[&str] = &[
    "InvalidInterface.IpAddressLimitExceeded",
    "InvalidParameterCombination",
    "MissingParameter",
    "InvalidNetworkInterface.InUse",
    // an op on an ENI the sequence deleted before
    "InvalidNetworkInterfaceID.NotFound",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random IPv6 creates, assigns, unassigns and deletes on ENIs of one instance never hand
    /// an address or /80 out twice, keep the books (check_books), stay within the limit, and
    /// answer only EC2 codes.
    #[test]
    fn ipv6_is_never_handed_out_twice(ops in prop::collection::vec(op(), 1..40), seed in 0u64..1000) {
        let mut cloud = Cloud::new(seed, "us-east-1", "123456789012");
        let (vpc, _) = cloud.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
        cloud.associate_vpc_ipv6(&vpc, VPC6.parse().unwrap()).unwrap();
        let s = cloud.create_subnet(&vpc, "10.0.0.0/22".parse().unwrap(), "us-east-1a").unwrap();
        cloud.associate_subnet_ipv6(&s, subnet6(), false).unwrap();
        let now = Instant::now();
        let inst = cloud
            .run_instance(RunInstanceRequest { instance_type: "m5.large".into(), subnet_id: s.clone(), ..Default::default() }, now)
            .unwrap();
        let mut enis: Vec<String> = Vec::new();
        for op in ops {
            let res: Result<(), vpcnet_emu::Ec2Error> = match op {
                Op::Create { addrs, prefixes } => cloud
                    .create_eni(CreateEniRequest {
                        subnet_id: s.clone(),
                        ipv6: Some(Ipv6Request { count: addrs, prefix_count: prefixes, ..Default::default() }),
                        ..Default::default()
                    })
                    .and_then(|id| {
                        enis.push(id.clone());
                        // attach the first two so the m5.large limit applies to them
                        if enis.len() <= 2 {
                            let dev = enis.len() as u32;
                            cloud.attach_eni(&id, &inst, dev, None, now, now + Duration::ZERO).map(|_| ())
                        } else {
                            Ok(())
                        }
                    }),
                Op::Assign { eni, addrs, prefixes } => match enis.get(eni) {
                    Some(id) => cloud
                        .assign_ipv6(id, Ipv6Request { count: addrs, prefix_count: prefixes, ..Default::default() })
                        .map(|_| ()),
                    None => Ok(()),
                },
                Op::Unassign { eni, nth } => match enis.get(eni).and_then(|id| cloud.eni(id)) {
                    Some(e) => {
                        let a: Vec<Ipv6Addr> = e.ipv6_addresses.iter().skip(nth).take(1).copied().collect();
                        let p: Vec<Ipv6Net> = if a.is_empty() { e.ipv6_prefixes.iter().take(1).copied().collect() } else { Vec::new() };
                        let id = e.id.clone();
                        if a.is_empty() && p.is_empty() { Ok(()) } else { cloud.unassign_ipv6(&id, &a, &p).map(|_| ()) }
                    }
                    None => Ok(()),
                },
                Op::Delete { eni } => match enis.get(eni).cloned() {
                    Some(id) if cloud.eni(&id).is_some_and(|e| e.attachment.is_none()) => {
                        cloud.delete_eni(&id)
                    }
                    _ => Ok(()),
                },
            };
            if let Err(e) = res {
                prop_assert!(ALLOWED.contains(&e.code.as_str()), "unexpected {e}");
            }
            if let Err(msg) = cloud.check_books() {
                return Err(TestCaseError::fail(msg));
            }
        }
    }
}
