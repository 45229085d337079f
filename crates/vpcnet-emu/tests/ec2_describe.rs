//! EC2's describe actions through the real aws-sdk-ec2 client, asserting parsed field values:
//! instances, instance types, subnets and VPCs, filters and pagination.

mod common;

use aws_sdk_ec2::types::{InstanceType, Tag};
use common::{code, filter, lab};

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
