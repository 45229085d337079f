//! Security groups through the real aws-sdk-ec2 client: CreateSecurityGroup,
//! DescribeSecurityGroups (IDs, names, filters), AuthorizeSecurityGroupIngress and
//! RevokeSecurityGroupIngress with EC2's error codes, ENIs keeping their groups, and the
//! ingress view the fabric hook receives.

mod common;

use std::sync::{Arc, Mutex};

use aws_sdk_ec2::types::{
    Filter, IpPermission, IpRange, ResourceType, Tag, TagSpecification, UserIdGroupPair,
};
use common::{code, lab};
use vpcnet_emu::model::Source;
use vpcnet_emu::{FabricHooks, HookFuture, IngressRulesChanged};

fn tcp(port: i32, cidr: &str) -> IpPermission {
    IpPermission::builder()
        .ip_protocol("tcp")
        .from_port(port)
        .to_port(port)
        .ip_ranges(IpRange::builder().cidr_ip(cidr).build())
        .build()
}

#[tokio::test]
async fn create_describe_authorize_revoke_like_ec2() {
    let lab = lab(70).await;
    let created = lab
        .ec2
        .create_security_group()
        .group_name("pods-a")
        .description("pods in zone a")
        .vpc_id(&lab.vpc.vpc_id)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::SecurityGroup)
                .tags(Tag::builder().key("team").value("net").build())
                .build(),
        )
        .send()
        .await
        .unwrap();
    let sg = created.group_id().unwrap().to_string();
    assert!(sg.starts_with("sg-") && sg.len() == 20, "{sg}");
    assert_eq!(created.tags().len(), 1);

    // The name is unique per VPC.
    let dup = lab
        .ec2
        .create_security_group()
        .group_name("pods-a")
        .description("again")
        .vpc_id(&lab.vpc.vpc_id)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&dup), "InvalidGroup.Duplicate");
    let no_vpc = lab
        .ec2
        .create_security_group()
        .group_name("x")
        .description("x")
        .vpc_id("vpc-00000000000000000")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&no_vpc), "InvalidVpcID.NotFound");

    // TCP 80 from the node subnet, all traffic from the default group, ICMP from anywhere.
    lab.ec2
        .authorize_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("-1")
                .user_id_group_pairs(
                    UserIdGroupPair::builder()
                        .group_id(&lab.vpc.default_security_group_id)
                        .build(),
                )
                .build(),
        )
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("icmp")
                .from_port(-1)
                .to_port(-1)
                .ip_ranges(IpRange::builder().cidr_ip("0.0.0.0/0").build())
                .build(),
        )
        .send()
        .await
        .unwrap();
    // The same rule again, a rule given twice, an unknown group or source group.
    let e = lab
        .ec2
        .authorize_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidPermission.Duplicate");
    let e = lab
        .ec2
        .authorize_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(tcp(81, "10.0.1.0/24"))
        .ip_permissions(tcp(81, "10.0.1.0/24"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidPermission.Duplicate");
    let e = lab
        .ec2
        .authorize_security_group_ingress()
        .group_id("sg-00000000000000000")
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidGroup.NotFound");
    let e = lab
        .ec2
        .authorize_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(22)
                .to_port(22)
                .user_id_group_pairs(
                    UserIdGroupPair::builder()
                        .group_id("sg-00000000000000001")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidGroup.NotFound");
    let e = lab
        .ec2
        .authorize_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(90)
                .to_port(89)
                .ip_ranges(IpRange::builder().cidr_ip("10.0.1.0/24").build())
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");

    // DescribeSecurityGroups: by ID, the rules as EC2 groups them.
    let d = lab
        .ec2
        .describe_security_groups()
        .group_ids(&sg)
        .send()
        .await
        .unwrap();
    let g = &d.security_groups()[0];
    assert_eq!(g.group_name(), Some("pods-a"));
    assert_eq!(g.description(), Some("pods in zone a"));
    assert_eq!(g.vpc_id(), Some(lab.vpc.vpc_id.as_str()));
    assert_eq!(g.owner_id(), Some("123456789012"));
    let perms = g.ip_permissions();
    assert_eq!(perms.len(), 3, "{perms:?}");
    assert_eq!(perms[0].ip_protocol(), Some("tcp"));
    assert_eq!(
        (perms[0].from_port(), perms[0].to_port()),
        (Some(80), Some(80))
    );
    assert_eq!(perms[0].ip_ranges()[0].cidr_ip(), Some("10.0.1.0/24"));
    assert_eq!(perms[1].ip_protocol(), Some("-1"));
    assert_eq!(perms[1].from_port(), None);
    assert_eq!(
        perms[1].user_id_group_pairs()[0].group_id(),
        Some(lab.vpc.default_security_group_id.as_str())
    );
    assert_eq!(perms[2].ip_protocol(), Some("icmp"));
    assert_eq!(perms[2].from_port(), Some(-1));
    assert_eq!(g.ip_permissions_egress()[0].ip_protocol(), Some("-1"));
    assert_eq!(g.tags()[0].key(), Some("team"));

    // The default group admits all traffic from itself, as on EC2.
    let d = lab
        .ec2
        .describe_security_groups()
        .filters(
            Filter::builder()
                .name("group-name")
                .values("default")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let def = &d.security_groups()[0];
    assert_eq!(
        def.group_id(),
        Some(lab.vpc.default_security_group_id.as_str())
    );
    assert_eq!(
        def.ip_permissions()[0].user_id_group_pairs()[0].group_id(),
        def.group_id()
    );

    // Filters and names.
    let by_cidr = lab
        .ec2
        .describe_security_groups()
        .filters(
            Filter::builder()
                .name("ip-permission.cidr")
                .values("10.0.1.0/24")
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(by_cidr.security_groups().len(), 1);
    let by_name = lab
        .ec2
        .describe_security_groups()
        .group_names("pods-a")
        .send()
        .await
        .unwrap();
    assert_eq!(by_name.security_groups()[0].group_id(), Some(sg.as_str()));
    let e = lab
        .ec2
        .describe_security_groups()
        .group_ids("sg-00000000000000000")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidGroup.NotFound");
    let e = lab
        .ec2
        .describe_security_groups()
        .filters(Filter::builder().name("no-such-filter").values("x").build())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidParameterValue");

    // Revoke: the rule goes; revoking it again is InvalidPermission.NotFound.
    lab.ec2
        .revoke_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap();
    let e = lab
        .ec2
        .revoke_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidPermission.NotFound");
    let d = lab
        .ec2
        .describe_security_groups()
        .group_ids(&sg)
        .send()
        .await
        .unwrap();
    assert_eq!(d.security_groups()[0].ip_permissions().len(), 2);
}

#[derive(Default)]
struct Views(Mutex<Vec<IngressRulesChanged>>);

impl FabricHooks for Views {
    fn ingress_rules_changed(&self, ev: IngressRulesChanged) -> HookFuture<'_> {
        Box::pin(async move { self.0.lock().unwrap().push(ev) })
    }
}

#[tokio::test]
async fn enis_keep_their_groups_and_the_fabric_sees_every_rule_change() {
    let lab = lab(71).await;
    let views = Arc::new(Views::default());
    lab.emu.set_hooks(views.clone());
    let last = || views.0.lock().unwrap().last().cloned().unwrap();
    let count = || views.0.lock().unwrap().len();

    let sg = lab
        .ec2
        .create_security_group()
        .group_name("web")
        .description("web")
        .vpc_id(&lab.vpc.vpc_id)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    let n = count();
    assert!(last().groups.iter().any(|g| g.group_id == sg));
    let eni = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .groups(&sg)
        .secondary_private_ip_address_count(1)
        .send()
        .await
        .unwrap();
    let eni = eni.network_interface().unwrap();
    let eni_id = eni.network_interface_id().unwrap().to_string();
    assert_eq!(eni.groups()[0].group_id(), Some(sg.as_str()));
    assert_eq!(count(), n + 1, "the new ENI is reported");
    let v = last();
    let e = v.enis.iter().find(|e| e.eni_id == eni_id).unwrap();
    assert_eq!(e.groups, vec![sg.clone()]);
    assert_eq!(e.addresses.len(), 2, "primary and one secondary");

    // A rule change is reported with the new rules.
    lab.ec2
        .authorize_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap();
    assert_eq!(count(), n + 2);
    let g = last()
        .groups
        .into_iter()
        .find(|g| g.group_id == sg)
        .unwrap();
    assert_eq!(g.rules.len(), 1);
    assert_eq!(
        g.rules[0].source,
        Source::Cidr("10.0.1.0/24".parse().unwrap())
    );
    // A failed call reports nothing.
    let _ = lab
        .ec2
        .authorize_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(count(), n + 2);

    // ModifyNetworkInterfaceAttribute replaces the ENI's groups.
    lab.ec2
        .modify_network_interface_attribute()
        .network_interface_id(&eni_id)
        .groups(&lab.vpc.default_security_group_id)
        .groups(&sg)
        .send()
        .await
        .unwrap();
    let d = lab
        .ec2
        .describe_network_interfaces()
        .network_interface_ids(&eni_id)
        .send()
        .await
        .unwrap();
    let groups: Vec<&str> = d.network_interfaces()[0]
        .groups()
        .iter()
        .filter_map(|g| g.group_id())
        .collect();
    assert_eq!(groups, [lab.vpc.default_security_group_id.as_str(), &sg]);
    let v = last();
    let e = v.enis.iter().find(|e| e.eni_id == eni_id).unwrap();
    assert_eq!(e.groups.len(), 2);
    let e = lab
        .ec2
        .modify_network_interface_attribute()
        .network_interface_id(&eni_id)
        .groups("sg-00000000000000000")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidGroup.NotFound");

    // Deleting the ENI drops it from the view.
    lab.ec2
        .delete_network_interface()
        .network_interface_id(&eni_id)
        .send()
        .await
        .unwrap();
    assert!(!last().enis.iter().any(|e| e.eni_id == eni_id));
}
