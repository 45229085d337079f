//! ELBv2 load balancers through the unmodified aws-sdk-elasticloadbalancingv2, with ELBv2's
//! defaults, rules and error codes: their lifecycle and ENIs, their rules, and tags on every
//! resource.

mod common;

use aws_sdk_elasticloadbalancingv2 as elb;
use common::elbv2::lab;
use common::{code, status};
use elb::types::{LoadBalancerSchemeEnum, LoadBalancerTypeEnum, SubnetMapping, Tag};
use vpcnet_emu::elbv2::Limits;

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

#[tokio::test]
async fn load_balancer_lifecycle_and_its_enis() {
    let lab = lab(1).await;
    let free = lab.emu.subnet_available(&lab.subnet_a).unwrap();
    let out = lab
        .elb
        .create_load_balancer()
        .name("web")
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(LoadBalancerSchemeEnum::Internal)
        .subnets(&lab.subnet_a)
        .tags(tag("team", "net"))
        .send()
        .await
        .unwrap();
    let lb = &out.load_balancers()[0];
    let arn = lb.load_balancer_arn().unwrap().to_string();
    assert!(
        arn.starts_with(
            "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/web/"
        ),
        "{arn}"
    );
    assert_eq!(lb.load_balancer_name(), Some("web"));
    assert_eq!(lb.r#type(), Some(&LoadBalancerTypeEnum::Network));
    assert_eq!(lb.scheme(), Some(&LoadBalancerSchemeEnum::Internal));
    assert_eq!(lb.vpc_id(), Some(lab.vpc.vpc_id.as_str()));
    assert_eq!(lb.state().unwrap().code().unwrap().as_str(), "provisioning");
    assert!(lb
        .dns_name()
        .unwrap()
        .ends_with(".elb.us-east-1.amazonaws.com"));
    assert!(lb.created_time().is_some());
    let az = &lb.availability_zones()[0];
    assert_eq!(
        (az.zone_name(), az.subnet_id()),
        (Some("us-east-1a"), Some(lab.subnet_a.as_str()))
    );
    let ip: std::net::Ipv4Addr = az.load_balancer_addresses()[0]
        .private_ipv4_address()
        .unwrap()
        .parse()
        .unwrap();
    assert!("10.0.1.0/24"
        .parse::<ipnet::Ipv4Net>()
        .unwrap()
        .contains(&ip));
    // the load balancer's node is an ENI of the subnet, as in EC2
    let eni = lab
        .emu
        .enis()
        .into_iter()
        .find(|e| e.primary_ip == ip)
        .expect("ELB ENI");
    assert!(
        eni.description.starts_with("ELB net/web/"),
        "{}",
        eni.description
    );
    assert_eq!(lab.emu.subnet_available(&lab.subnet_a), Some(free - 1));

    // active once the data plane took it; found by name and by ARN
    let d = lab
        .elb
        .describe_load_balancers()
        .names("web")
        .send()
        .await
        .unwrap();
    assert_eq!(
        d.load_balancers()[0]
            .state()
            .unwrap()
            .code()
            .unwrap()
            .as_str(),
        "active"
    );
    let d = lab
        .elb
        .describe_load_balancers()
        .load_balancer_arns(&arn)
        .send()
        .await
        .unwrap();
    assert_eq!(d.load_balancers().len(), 1);

    // same name, same settings: the same load balancer; other settings: DuplicateLoadBalancerName
    let again = lab.nlb("web").await;
    assert_eq!(again, arn);
    let e = lab
        .elb
        .create_load_balancer()
        .name("web")
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(LoadBalancerSchemeEnum::Internal)
        .subnets(&lab.subnet_b)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (code(&e).as_str(), status(&e)),
        ("DuplicateLoadBalancerName", 400)
    );

    lab.elb
        .delete_load_balancer()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap();
    assert!(
        lab.emu.enis().iter().all(|e| e.primary_ip != ip),
        "ENI removed"
    );
    assert_eq!(lab.emu.subnet_available(&lab.subnet_a), Some(free));
    // deleting again succeeds (ELBv2 is idempotent there); describing it does not
    lab.elb
        .delete_load_balancer()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap();
    let e = lab
        .elb
        .describe_load_balancers()
        .load_balancer_arns(&arn)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "LoadBalancerNotFound");
    let e = lab
        .elb
        .describe_load_balancers()
        .names("web")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "LoadBalancerNotFound");
}

#[tokio::test]
async fn load_balancer_rules() {
    let lab = lab(2).await;
    let create = || {
        lab.elb
            .create_load_balancer()
            .name("x")
            .scheme(LoadBalancerSchemeEnum::Internal)
    };
    // application load balancers need two zones
    let e = create().subnets(&lab.subnet_a).send().await.unwrap_err();
    assert_eq!(code(&e), "ValidationError");
    let alb = create()
        .subnets(&lab.subnet_a)
        .subnets(&lab.subnet_b)
        .send()
        .await
        .unwrap();
    let alb = &alb.load_balancers()[0];
    assert_eq!(alb.r#type(), Some(&LoadBalancerTypeEnum::Application));
    assert!(alb.dns_name().unwrap().starts_with("internal-x-"));
    assert_eq!(alb.availability_zones().len(), 2);
    // the emulated VPCs have no internet gateway
    let e = lab
        .elb
        .create_load_balancer()
        .name("public")
        .r#type(LoadBalancerTypeEnum::Network)
        .subnets(&lab.subnet_a)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidSubnet");
    let nlb = lab
        .elb
        .create_load_balancer()
        .name("n")
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(LoadBalancerSchemeEnum::Internal);
    let e = nlb
        .clone()
        .subnets("subnet-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "SubnetNotFound");
    let e = nlb
        .clone()
        .subnets(&lab.subnet_a)
        .security_groups("sg-0123456789abcdef0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidSecurityGroup");
    let e = nlb.clone().send().await.unwrap_err();
    assert_eq!(code(&e), "ValidationError");
    for bad in ["-n", "n-", "internal-n", "n_1"] {
        let e = nlb
            .clone()
            .name(bad)
            .subnets(&lab.subnet_a)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e), "ValidationError", "{bad}");
    }
    // a chosen address through SubnetMappings
    let mapped = nlb
        .clone()
        .subnet_mappings(
            SubnetMapping::builder()
                .subnet_id(&lab.subnet_b)
                .private_ipv4_address("10.0.2.50")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let a = &mapped.load_balancers()[0].availability_zones()[0];
    assert_eq!(
        a.load_balancer_addresses()[0].private_ipv4_address(),
        Some("10.0.2.50")
    );
    // the quota of load balancers
    lab.emu.set_elbv2_limits(Limits {
        load_balancers: 2,
        ..Limits::default()
    });
    let e = nlb
        .clone()
        .name("third")
        .subnets(&lab.subnet_a)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TooManyLoadBalancers");
}

#[tokio::test]
async fn tags_on_every_resource() {
    let lab = lab(7).await;
    let lb = lab.nlb("web").await;
    let tg = lab.ip_tg("web", 80).await;
    let l = lab.listener(&lb, 80, &tg).await;
    lab.elb
        .add_tags()
        .resource_arns(&lb)
        .resource_arns(&tg)
        .resource_arns(&l)
        .tags(tag("a", "1"))
        .tags(tag("b", "2"))
        .send()
        .await
        .unwrap();
    lab.elb
        .remove_tags()
        .resource_arns(&tg)
        .tag_keys("a")
        .send()
        .await
        .unwrap();
    let d = lab
        .elb
        .describe_tags()
        .resource_arns(&lb)
        .resource_arns(&tg)
        .resource_arns(&l)
        .send()
        .await
        .unwrap();
    let got: Vec<(String, Vec<String>)> = d
        .tag_descriptions()
        .iter()
        .map(|t| {
            (
                t.resource_arn().unwrap().to_string(),
                t.tags()
                    .iter()
                    .map(|t| format!("{}={}", t.key().unwrap(), t.value().unwrap()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (lb.clone(), vec!["a=1".to_string(), "b=2".to_string()]),
            (tg.clone(), vec!["b=2".to_string()]),
            (l.clone(), vec!["a=1".to_string(), "b=2".to_string()]),
        ]
    );
    let e = lab
        .elb
        .add_tags()
        .resource_arns(&lb)
        .tags(tag("x", "1"))
        .tags(tag("x", "2"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "DuplicateTagKeys");
    lab.emu.set_elbv2_limits(Limits {
        tags_per_resource: 3,
        ..Limits::default()
    });
    let e = lab
        .elb
        .add_tags()
        .resource_arns(&tg)
        .resource_arns(&lb)
        .tags(tag("c", "3"))
        .tags(tag("d", "4"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TooManyTags");
    let d = lab
        .elb
        .describe_tags()
        .resource_arns(&tg)
        .send()
        .await
        .unwrap();
    assert_eq!(d.tag_descriptions()[0].tags().len(), 1, "all or nothing");
    let gone_lb = lb.replace("/web/", "/gone/");
    let e = lab
        .elb
        .describe_tags()
        .resource_arns(&gone_lb)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "LoadBalancerNotFound");
    let e = lab
        .elb
        .describe_tags()
        .resource_arns(tg.replace("/web/", "/gone/"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "TargetGroupNotFound");
}
