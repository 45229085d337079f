//! Wire cross-check of the security-group actions against moto (see `moto_crosscheck.rs`): the
//! same aws-sdk-ec2 sequence (CreateSecurityGroup, AuthorizeSecurityGroupIngress,
//! DescribeSecurityGroups by ID, name and filter, RevokeSecurityGroupIngress, and their error
//! codes) runs against both, and the parsed results are compared: ID shapes, names,
//! descriptions, VPC, ingress permissions (protocol, ports, CIDRs, source groups), error codes.
//!
//! Skipped: concrete IDs (random in both), `ownerId` (account differs by design).

mod common;

use aws_sdk_ec2::types::{Filter, IpPermission, IpRange, UserIdGroupPair};
use aws_sdk_ec2::Client;
use common::moto::{assert_same_trace, start_moto, vpc_with_subnet, Trace};
use common::{client, code};
use vpcnet_emu::Emulator;

fn tcp(port: i32, cidr: &str) -> IpPermission {
    IpPermission::builder()
        .ip_protocol("tcp")
        .from_port(port)
        .to_port(port)
        .ip_ranges(IpRange::builder().cidr_ip(cidr).build())
        .build()
}

fn shape(id: &str) -> String {
    format!(
        "{}-<id>",
        id.rsplit_once('-').map(|(p, _)| p).unwrap_or("?")
    )
}

async fn run_sequence(ec2: &Client, vpc: &str) -> Trace {
    let mut t: Trace = Vec::new();
    let mut obs = |k: &str, v: String| t.push((k.to_string(), v));
    let web = ec2
        .create_security_group()
        .group_name("web")
        .description("web servers")
        .vpc_id(vpc)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    obs("create.id", shape(&web));
    let admin = ec2
        .create_security_group()
        .group_name("admin")
        .description("admins")
        .vpc_id(vpc)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    let e = ec2
        .create_security_group()
        .group_name("web")
        .description("again")
        .vpc_id(vpc)
        .send()
        .await
        .unwrap_err();
    obs("create_dup.code", code(&e));

    ec2.authorize_security_group_ingress()
        .group_id(&web)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(22)
                .to_port(22)
                .user_id_group_pairs(UserIdGroupPair::builder().group_id(&admin).build())
                .build(),
        )
        .send()
        .await
        .unwrap();
    let e = ec2
        .authorize_security_group_ingress()
        .group_id(&web)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap_err();
    obs("authorize_dup.code", code(&e));
    let e = ec2
        .authorize_security_group_ingress()
        .group_id("sg-0123456789abcdef0")
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap_err();
    obs("authorize_unknown.code", code(&e));

    let d = ec2
        .describe_security_groups()
        .group_ids(&web)
        .send()
        .await
        .unwrap();
    let g = &d.security_groups()[0];
    obs("describe.name", g.group_name().unwrap_or_default().into());
    obs(
        "describe.description",
        g.description().unwrap_or_default().into(),
    );
    obs("describe.vpc", (g.vpc_id() == Some(vpc)).to_string());
    let mut perms: Vec<String> = g
        .ip_permissions()
        .iter()
        .map(|p| {
            let cidrs: Vec<&str> = p.ip_ranges().iter().filter_map(|r| r.cidr_ip()).collect();
            let groups: Vec<String> = p
                .user_id_group_pairs()
                .iter()
                .map(|u| {
                    if u.group_id() == Some(admin.as_str()) {
                        "<admin>".into()
                    } else {
                        format!("{:?}", u.group_id())
                    }
                })
                .collect();
            format!(
                "{:?} {:?}-{:?} {cidrs:?} {groups:?}",
                p.ip_protocol(),
                p.from_port(),
                p.to_port()
            )
        })
        .collect();
    perms.sort();
    obs("describe.ingress", perms.join("; "));
    let by_name = ec2
        .describe_security_groups()
        .filters(Filter::builder().name("group-name").values("web").build())
        .filters(Filter::builder().name("vpc-id").values(vpc).build())
        .send()
        .await
        .unwrap();
    obs(
        "filter_name.count",
        by_name.security_groups().len().to_string(),
    );
    let e = ec2
        .describe_security_groups()
        .group_ids("sg-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    obs("describe_unknown.code", code(&e));

    ec2.revoke_security_group_ingress()
        .group_id(&web)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap();
    let d = ec2
        .describe_security_groups()
        .group_ids(&web)
        .send()
        .await
        .unwrap();
    obs(
        "after_revoke.ingress",
        d.security_groups()[0].ip_permissions().len().to_string(),
    );
    let e = ec2
        .revoke_security_group_ingress()
        .group_id(&web)
        .ip_permissions(tcp(80, "10.0.1.0/24"))
        .send()
        .await
        .unwrap_err();
    obs("revoke_missing.code", code(&e));
    t
}

#[tokio::test]
async fn security_groups_same_results_as_moto() {
    let moto = start_moto();
    let moto_ec2 = client(&moto.endpoint, 1);
    let (moto_vpc, _) = vpc_with_subnet(&moto_ec2, "10.0.1.0/24").await;
    let moto_trace = run_sequence(&moto_ec2, &moto_vpc).await;

    let emu = Emulator::new(41);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let server = emu.spawn().await.unwrap();
    let emu_ec2 = client(&server.endpoint, 1);
    let emu_trace = run_sequence(&emu_ec2, &vpc.vpc_id).await;

    assert_same_trace(&moto_trace, &emu_trace, 11);
    drop(moto);
}
