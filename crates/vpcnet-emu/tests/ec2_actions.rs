//! Every EC2 action through the real aws-sdk-ec2 client, asserting parsed field values.

mod common;

use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{
    AttributeBooleanValue, AttributeValue, Filter, InstanceType, NetworkInterfaceAttachmentChanges,
    ResourceType, Tag, TagSpecification,
};
use common::{code, lab};

fn filter(name: &str, values: &[&str]) -> Filter {
    let mut f = Filter::builder().name(name);
    for v in values {
        f = f.values(*v);
    }
    f.build()
}

#[tokio::test]
async fn create_attach_assign_describe_unassign_detach_delete() {
    let lab = lab(1).await;
    let inst = lab.instance("m5.large").await;
    let sg = lab
        .emu
        .create_security_group(&lab.vpc.vpc_id, "pods")
        .unwrap();

    let created = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .description("aws-K8S-i-test")
        .groups(&sg)
        .secondary_private_ip_address_count(2)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::NetworkInterface)
                .tags(
                    Tag::builder()
                        .key("node.k8s.amazonaws.com/instance_id")
                        .value(&inst.instance_id)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let eni = created.network_interface().unwrap();
    let eni_id = eni.network_interface_id().unwrap().to_string();
    assert!(eni_id.starts_with("eni-") && eni_id.len() == 21, "{eni_id}");
    assert_eq!(eni.subnet_id(), Some(lab.subnet.as_str()));
    assert_eq!(eni.vpc_id(), Some(lab.vpc.vpc_id.as_str()));
    assert_eq!(eni.availability_zone(), Some("us-east-1a"));
    assert_eq!(eni.description(), Some("aws-K8S-i-test"));
    assert_eq!(eni.status().map(|s| s.as_str()), Some("available"));
    assert!(eni.mac_address().unwrap().starts_with("02:"));
    assert_eq!(eni.groups().len(), 1);
    assert_eq!(eni.groups()[0].group_id(), Some(sg.as_str()));
    assert_eq!(eni.groups()[0].group_name(), Some("pods"));
    assert_eq!(eni.private_ip_addresses().len(), 3);
    assert_eq!(eni.private_ip_addresses()[0].primary(), Some(true));
    assert_eq!(
        eni.private_ip_addresses()[0].private_ip_address(),
        eni.private_ip_address()
    );
    assert_eq!(eni.private_ip_addresses()[1].primary(), Some(false));
    assert_eq!(eni.tag_set().len(), 1);
    assert_eq!(eni.tag_set()[0].value(), Some(inst.instance_id.as_str()));
    assert!(eni.attachment().is_none());
    let primary: Ipv4Addr = eni.private_ip_address().unwrap().parse().unwrap();
    assert!("10.0.0.0/24"
        .parse::<ipnet::Ipv4Net>()
        .unwrap()
        .contains(&primary));

    let att = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni_id)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap();
    let att_id = att.attachment_id().unwrap().to_string();
    assert!(att_id.starts_with("eni-attach-"));
    assert_eq!(att.network_card_index(), Some(0));

    let assigned = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni_id)
        .secondary_private_ip_address_count(3)
        .send()
        .await
        .unwrap();
    assert_eq!(assigned.network_interface_id(), Some(eni_id.as_str()));
    assert_eq!(assigned.assigned_private_ip_addresses().len(), 3);
    let new_ip = assigned.assigned_private_ip_addresses()[0]
        .private_ip_address()
        .unwrap()
        .to_string();

    let explicit = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni_id)
        .private_ip_addresses("10.0.0.200")
        .send()
        .await;
    // .200 may already be taken by the random picks; either way the SDK parses the answer
    match explicit {
        Ok(r) => assert_eq!(
            r.assigned_private_ip_addresses()[0].private_ip_address(),
            Some("10.0.0.200")
        ),
        Err(e) => assert_eq!(code(&e), "PrivateIpAddressInUse"),
    }

    let described = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("attachment.instance-id", &[&inst.instance_id]))
        .filters(filter("tag-key", &["node.k8s.amazonaws.com/instance_id"]))
        .send()
        .await
        .unwrap();
    assert_eq!(described.network_interfaces().len(), 1);
    let d = &described.network_interfaces()[0];
    assert_eq!(d.network_interface_id(), Some(eni_id.as_str()));
    assert_eq!(d.status().map(|s| s.as_str()), Some("in-use"));
    let a = d.attachment().unwrap();
    assert_eq!(a.attachment_id(), Some(att_id.as_str()));
    assert_eq!(a.instance_id(), Some(inst.instance_id.as_str()));
    assert_eq!(a.device_index(), Some(1));
    assert_eq!(a.network_card_index(), Some(0));
    assert_eq!(a.status().map(|s| s.as_str()), Some("attached"));
    assert_eq!(a.delete_on_termination(), Some(false));
    assert!(a.attach_time().is_some());
    assert!(d
        .private_ip_addresses()
        .iter()
        .any(|p| p.private_ip_address() == Some(new_ip.as_str())));
    let model = lab.emu.eni(&eni_id).unwrap();
    assert_eq!(
        d.private_ip_addresses().len(),
        1 + model.secondary_ips.len()
    );

    lab.ec2
        .unassign_private_ip_addresses()
        .network_interface_id(&eni_id)
        .private_ip_addresses(&new_ip)
        .send()
        .await
        .unwrap();
    assert!(!lab
        .emu
        .eni(&eni_id)
        .unwrap()
        .secondary_ips
        .contains(&new_ip.parse().unwrap()));

    // delete while attached is refused
    let e = lab
        .ec2
        .delete_network_interface()
        .network_interface_id(&eni_id)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidNetworkInterface.InUse");

    lab.ec2
        .detach_network_interface()
        .attachment_id(&att_id)
        .force(true)
        .send()
        .await
        .unwrap();
    assert!(lab.emu.eni(&eni_id).unwrap().attachment.is_none());
    let before = lab.emu.subnet_available(&lab.subnet).unwrap();
    lab.ec2
        .delete_network_interface()
        .network_interface_id(&eni_id)
        .send()
        .await
        .unwrap();
    assert!(lab.emu.eni(&eni_id).is_none());
    assert_eq!(
        lab.emu.subnet_available(&lab.subnet).unwrap(),
        before + 1 + model.secondary_ips.len() as u32 - 1
    );
}

#[tokio::test]
async fn prefixes_assign_and_unassign() {
    let lab = lab(2).await;
    let inst = lab.instance("m5.large").await;
    let eni = inst.primary_eni.unwrap().eni_id;
    let r = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefix_count(2)
        .send()
        .await
        .unwrap();
    assert_eq!(r.assigned_ipv4_prefixes().len(), 2);
    let p: ipnet::Ipv4Net = r.assigned_ipv4_prefixes()[0]
        .ipv4_prefix()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(p.prefix_len(), 28);
    assert_eq!(p.trunc(), p);
    let r2 = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefixes("10.0.0.240/28")
        .send()
        .await;
    // 10.0.0.240/28 holds the broadcast address: refused
    assert_eq!(code(&r2.unwrap_err()), "InvalidParameterValue");
    let d = lab
        .ec2
        .describe_network_interfaces()
        .network_interface_ids(&eni)
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = d.network_interfaces()[0]
        .ipv4_prefixes()
        .iter()
        .filter_map(|p| p.ipv4_prefix())
        .collect();
    assert_eq!(prefixes.len(), 2);
    assert_eq!(
        lab.emu.subnet_available(&lab.subnet),
        Some(256 - 5 - 1 - 32)
    );
    lab.ec2
        .unassign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefixes(prefixes[0])
        .send()
        .await
        .unwrap();
    assert_eq!(lab.emu.eni(&eni).unwrap().prefixes.len(), 1);
    assert_eq!(
        lab.emu.subnet_available(&lab.subnet),
        Some(256 - 5 - 1 - 16)
    );
}

#[tokio::test]
async fn describe_instances_types_subnets_vpcs() {
    let lab = lab(3).await;
    let inst = lab.instance("m5.large").await;
    let r = lab
        .ec2
        .describe_instances()
        .instance_ids(&inst.instance_id)
        .send()
        .await
        .unwrap();
    let i = &r.reservations()[0].instances()[0];
    assert_eq!(i.instance_id(), Some(inst.instance_id.as_str()));
    assert_eq!(i.instance_type(), Some(&InstanceType::M5Large));
    assert_eq!(
        i.private_ip_address(),
        Some(inst.private_ip.to_string().as_str())
    );
    let o = inst.private_ip.octets();
    assert_eq!(
        i.private_dns_name(),
        Some(format!("ip-{}-{}-{}-{}.ec2.internal", o[0], o[1], o[2], o[3]).as_str())
    );
    assert_eq!(
        i.placement().unwrap().availability_zone(),
        Some("us-east-1a")
    );
    assert_eq!(i.subnet_id(), Some(lab.subnet.as_str()));
    assert_eq!(i.vpc_id(), Some(lab.vpc.vpc_id.as_str()));
    assert_eq!(
        i.state().unwrap().name().map(|n| n.as_str()),
        Some("running")
    );
    assert_eq!(i.network_interfaces().len(), 1);
    let n = &i.network_interfaces()[0];
    assert_eq!(n.attachment().unwrap().device_index(), Some(0));
    assert_eq!(n.attachment().unwrap().delete_on_termination(), Some(true));
    assert_eq!(
        n.mac_address(),
        Some(inst.primary_eni.as_ref().unwrap().mac.as_str())
    );
    assert_eq!(
        i.security_groups()[0].group_id(),
        Some(lab.vpc.default_security_group_id.as_str())
    );

    // empty PrivateDnsName for the first N calls
    lab.emu.set_empty_private_dns_names(2);
    for _ in 0..2 {
        let r = lab
            .ec2
            .describe_instances()
            .instance_ids(&inst.instance_id)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.reservations()[0].instances()[0].private_dns_name(),
            Some("")
        );
    }
    let r = lab
        .ec2
        .describe_instances()
        .instance_ids(&inst.instance_id)
        .send()
        .await
        .unwrap();
    assert!(r.reservations()[0].instances()[0]
        .private_dns_name()
        .unwrap()
        .starts_with("ip-"));

    let t = lab
        .ec2
        .describe_instance_types()
        .instance_types(InstanceType::M5Large)
        .instance_types(InstanceType::P4d24xlarge)
        .send()
        .await
        .unwrap();
    assert_eq!(t.instance_types().len(), 2);
    let m5 = &t.instance_types()[0];
    assert_eq!(m5.instance_type(), Some(&InstanceType::M5Large));
    let ni = m5.network_info().unwrap();
    assert_eq!(ni.maximum_network_interfaces(), Some(3));
    assert_eq!(ni.ipv4_addresses_per_interface(), Some(10));
    assert_eq!(ni.default_network_card_index(), Some(0));
    assert_eq!(ni.network_cards().len(), 1);
    assert_eq!(ni.network_cards()[0].maximum_network_interfaces(), Some(3));
    assert_eq!(m5.v_cpu_info().unwrap().default_v_cpus(), Some(2));
    assert_eq!(m5.hypervisor().map(|h| h.as_str()), Some("nitro"));
    assert_eq!(m5.bare_metal(), Some(false));
    let p4 = t.instance_types()[1].network_info().unwrap();
    assert_eq!(p4.network_cards().len(), 4);
    assert_eq!(p4.maximum_network_interfaces(), Some(60));

    // a type EC2 answers that the compiled table does not know
    lab.emu
        .register_instance_type(vpcnet_limits::InstanceLimits {
            instance_type: "zz9.huge".into(),
            eni_limit: 7,
            ipv4_per_eni: 33,
            default_network_card: 0,
            network_cards: vec![vpcnet_limits::NetworkCard {
                index: 0,
                max_enis: 7,
            }],
            hypervisor: vpcnet_limits::Hypervisor::Nitro,
            bare_metal: true,
            vcpus: Some(9),
        });
    let t = lab
        .ec2
        .describe_instance_types()
        .instance_types(InstanceType::from("zz9.huge"))
        .send()
        .await
        .unwrap();
    let ni = t.instance_types()[0].network_info().unwrap();
    assert_eq!(
        (
            ni.maximum_network_interfaces(),
            ni.ipv4_addresses_per_interface()
        ),
        (Some(7), Some(33))
    );
    assert_eq!(t.instance_types()[0].bare_metal(), Some(true));
    let e = lab
        .ec2
        .describe_instance_types()
        .instance_types(InstanceType::from("no.such"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidInstanceType");

    let s = lab
        .ec2
        .describe_subnets()
        .subnet_ids(&lab.subnet)
        .send()
        .await
        .unwrap();
    let sn = &s.subnets()[0];
    assert_eq!(sn.cidr_block(), Some("10.0.0.0/24"));
    assert_eq!(sn.available_ip_address_count(), Some(256 - 5 - 1));
    assert_eq!(sn.availability_zone(), Some("us-east-1a"));
    assert_eq!(sn.vpc_id(), Some(lab.vpc.vpc_id.as_str()));
    let s = lab
        .ec2
        .describe_subnets()
        .filters(filter("vpc-id", &["vpc-nope"]))
        .send()
        .await
        .unwrap();
    assert!(s.subnets().is_empty());

    let v = lab
        .ec2
        .describe_vpcs()
        .vpc_ids(&lab.vpc.vpc_id)
        .send()
        .await
        .unwrap();
    let vpc = &v.vpcs()[0];
    assert_eq!(vpc.cidr_block(), Some("10.0.0.0/16"));
    let cidrs: Vec<&str> = vpc
        .cidr_block_association_set()
        .iter()
        .filter_map(|c| c.cidr_block())
        .collect();
    assert_eq!(cidrs, ["10.0.0.0/16", "100.64.0.0/16"]);
}

#[tokio::test]
async fn filters_and_pagination() {
    let lab = lab(4).await;
    let mut ids = Vec::new();
    for i in 0..12 {
        let r = lab
            .ec2
            .create_network_interface()
            .subnet_id(&lab.subnet)
            .description(if i % 2 == 0 { "even" } else { "odd" })
            .send()
            .await
            .unwrap();
        ids.push(
            r.network_interface()
                .unwrap()
                .network_interface_id()
                .unwrap()
                .to_string(),
        );
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let r = lab
            .ec2
            .describe_network_interfaces()
            .max_results(5)
            .set_next_token(token.clone())
            .filters(filter("subnet-id", &[&lab.subnet]))
            .send()
            .await
            .unwrap();
        pages += 1;
        assert!(r.network_interfaces().len() <= 5);
        seen.extend(
            r.network_interfaces()
                .iter()
                .map(|n| n.network_interface_id().unwrap().to_string()),
        );
        token = r.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 3);
    seen.sort();
    ids.sort();
    assert_eq!(seen, ids);

    // the SDK's paginator walks the same pages
    let all: Vec<_> = lab
        .ec2
        .describe_network_interfaces()
        .max_results(5)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap();
    assert_eq!(all.len(), 12);

    let odd = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("description", &["odd"]))
        .send()
        .await
        .unwrap();
    assert_eq!(odd.network_interfaces().len(), 6);
    let wild = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("description", &["e*n"]))
        .send()
        .await
        .unwrap();
    assert_eq!(wild.network_interfaces().len(), 6);
    let st = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("status", &["in-use"]))
        .send()
        .await
        .unwrap();
    assert!(st.network_interfaces().is_empty());
    let by_id = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("network-interface-id", &[&ids[0], &ids[1]]))
        .filters(filter("vpc-id", &[&lab.vpc.vpc_id]))
        .send()
        .await
        .unwrap();
    assert_eq!(by_id.network_interfaces().len(), 2);

    lab.ec2
        .create_tags()
        .resources(&ids[3])
        .tags(
            Tag::builder()
                .key("cluster.k8s.amazonaws.com/name")
                .value("lab")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let tagged = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("tag:cluster.k8s.amazonaws.com/name", &["lab"]))
        .send()
        .await
        .unwrap();
    assert_eq!(tagged.network_interfaces().len(), 1);
    assert_eq!(
        tagged.network_interfaces()[0].network_interface_id(),
        Some(ids[3].as_str())
    );
    lab.ec2
        .delete_tags()
        .resources(&ids[3])
        .tags(Tag::builder().key("cluster.k8s.amazonaws.com/name").build())
        .send()
        .await
        .unwrap();
    let tagged = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("tag-key", &["cluster.k8s.amazonaws.com/name"]))
        .send()
        .await
        .unwrap();
    assert!(tagged.network_interfaces().is_empty());

    let e = lab
        .ec2
        .describe_network_interfaces()
        .filters(filter("bogus", &["x"]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = lab
        .ec2
        .describe_network_interfaces()
        .network_interface_ids("eni-0000000000000dead")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidNetworkInterfaceID.NotFound");
}

#[tokio::test]
async fn modify_attribute_and_terminate() {
    let lab = lab(5).await;
    let inst = lab.instance("m5.large").await;
    let sg = lab
        .emu
        .create_security_group(&lab.vpc.vpc_id, "extra")
        .unwrap();
    let keep = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .send()
        .await
        .unwrap();
    let keep = keep
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    let gone = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .send()
        .await
        .unwrap();
    let gone = gone
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    lab.ec2
        .attach_network_interface()
        .network_interface_id(&keep)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap();
    let att = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&gone)
        .instance_id(&inst.instance_id)
        .device_index(2)
        .send()
        .await
        .unwrap();
    lab.ec2
        .modify_network_interface_attribute()
        .network_interface_id(&gone)
        .attachment(
            NetworkInterfaceAttachmentChanges::builder()
                .attachment_id(att.attachment_id().unwrap())
                .delete_on_termination(true)
                .build(),
        )
        .send()
        .await
        .unwrap();
    lab.ec2
        .modify_network_interface_attribute()
        .network_interface_id(&keep)
        .groups(&sg)
        .send()
        .await
        .unwrap();
    lab.ec2
        .modify_network_interface_attribute()
        .network_interface_id(&keep)
        .description(AttributeValue::builder().value("renamed").build())
        .send()
        .await
        .unwrap();
    lab.ec2
        .modify_network_interface_attribute()
        .network_interface_id(&keep)
        .source_dest_check(AttributeBooleanValue::builder().value(false).build())
        .send()
        .await
        .unwrap();
    let k = lab.emu.eni(&keep).unwrap();
    assert_eq!(k.security_group_ids, vec![sg.clone()]);
    assert_eq!(k.description, "renamed");
    assert!(
        lab.emu
            .eni(&gone)
            .unwrap()
            .attachment
            .unwrap()
            .delete_on_termination
    );
    let e = lab
        .ec2
        .modify_network_interface_attribute()
        .network_interface_id(&keep)
        .groups("sg-0000000000000beef")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidGroup.NotFound");

    let t = lab
        .ec2
        .terminate_instances()
        .instance_ids(&inst.instance_id)
        .send()
        .await
        .unwrap();
    let ch = &t.terminating_instances()[0];
    assert_eq!(ch.instance_id(), Some(inst.instance_id.as_str()));
    assert_eq!(
        ch.previous_state().unwrap().name().map(|n| n.as_str()),
        Some("running")
    );
    assert_eq!(
        ch.current_state().unwrap().name().map(|n| n.as_str()),
        Some("terminated")
    );
    assert!(
        lab.emu.eni(&gone).is_none(),
        "DeleteOnTermination ENI is deleted"
    );
    assert!(
        lab.emu.eni(&inst.primary_eni.unwrap().eni_id).is_none(),
        "primary ENI is deleted"
    );
    let k = lab.emu.eni(&keep).unwrap();
    assert!(k.attachment.is_none(), "other ENIs are detached and kept");
    let r = lab
        .ec2
        .describe_instances()
        .instance_ids(&inst.instance_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.reservations()[0].instances()[0]
            .state()
            .unwrap()
            .name()
            .map(|n| n.as_str()),
        Some("terminated")
    );
}

#[tokio::test]
async fn concurrent_assigns_never_hand_out_an_address_twice() {
    let lab = lab(6).await;
    let mut enis = Vec::new();
    for _ in 0..4 {
        let r = lab
            .ec2
            .create_network_interface()
            .subnet_id(&lab.subnet)
            .send()
            .await
            .unwrap();
        enis.push(
            r.network_interface()
                .unwrap()
                .network_interface_id()
                .unwrap()
                .to_string(),
        );
    }
    let mut tasks = Vec::new();
    for i in 0..40 {
        let ec2 = lab.ec2.clone();
        let eni = enis[i % enis.len()].clone();
        tasks.push(tokio::spawn(async move {
            ec2.assign_private_ip_addresses()
                .network_interface_id(eni)
                .secondary_private_ip_address_count(1)
                .send()
                .await
                .map(|r| {
                    r.assigned_private_ip_addresses()[0]
                        .private_ip_address()
                        .unwrap()
                        .to_string()
                })
        }));
    }
    let mut got = std::collections::BTreeSet::new();
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(ip) => {
                ok += 1;
                assert!(got.insert(ip.clone()), "{ip} handed out twice");
            }
            // 4 ENIs x 49 secondaries: no limit is reached; every call must succeed
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(ok, 40);
    assert_eq!(
        lab.emu.subnet_available(&lab.subnet),
        Some(256 - 5 - 4 - 40)
    );
}

#[tokio::test]
async fn allow_reassignment_moves_an_address() {
    let lab = lab(7).await;
    let a = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .private_ip_address("10.0.0.10")
        .send()
        .await
        .unwrap();
    let a = a
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    let b = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .private_ip_address("10.0.0.11")
        .send()
        .await
        .unwrap();
    let b = b
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&a)
        .private_ip_addresses("10.0.0.50")
        .send()
        .await
        .unwrap();
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&b)
        .private_ip_addresses("10.0.0.50")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "PrivateIpAddressInUse");
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&b)
        .private_ip_addresses("10.0.0.50")
        .allow_reassignment(true)
        .send()
        .await
        .unwrap();
    let ip: Ipv4Addr = "10.0.0.50".parse().unwrap();
    assert!(!lab.emu.eni(&a).unwrap().secondary_ips.contains(&ip));
    assert!(lab.emu.eni(&b).unwrap().secondary_ips.contains(&ip));
    assert_eq!(lab.emu.subnet_available(&lab.subnet), Some(256 - 5 - 3));
}

#[tokio::test]
async fn describe_instance_types_pages_through_the_whole_table() {
    let lab = lab(8).await;
    let mut pages = 0;
    let mut names = Vec::new();
    let mut stream = lab.ec2.describe_instance_types().into_paginator().send();
    while let Some(page) = stream.next().await {
        let page = page.unwrap();
        pages += 1;
        assert!(page.instance_types().len() <= 100);
        names.extend(
            page.instance_types()
                .iter()
                .map(|t| t.instance_type().unwrap().as_str().to_string()),
        );
    }
    assert_eq!(names.len(), vpcnet_limits::all().len());
    assert_eq!(pages, vpcnet_limits::all().len().div_ceil(100));
    let filtered = lab
        .ec2
        .describe_instance_types()
        .filters(filter("instance-type", &["m5.*"]))
        .send()
        .await
        .unwrap();
    assert!(filtered.instance_types().len() >= 8);
    assert!(filtered.instance_types().iter().all(|t| t
        .instance_type()
        .unwrap()
        .as_str()
        .starts_with("m5.")));
}
