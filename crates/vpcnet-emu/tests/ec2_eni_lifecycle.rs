//! An ENI's life through the real aws-sdk-ec2 client, asserting parsed field values: create,
//! attach, assign, describe, unassign, detach and delete; attribute changes and instance
//! termination.

mod common;

use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{
    AttributeBooleanValue, AttributeValue, NetworkInterfaceAttachmentChanges, ResourceType, Tag,
    TagSpecification,
};
use common::{code, filter, lab};

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
