//! ELBv2 wire cross-check against moto: the same aws-sdk-elasticloadbalancingv2 call sequence
//! runs against moto and against vpcnet-emu, and the parsed results are compared field by field.
//!
//! Compared per step: ARN shapes (`loadbalancer/net/NAME/<16 hex>`, `targetgroup/NAME/<16 hex>`,
//! `listener/net/NAME/<lb id>/<16 hex>`), names, type, scheme, state code at creation and after,
//! VPC and subnet references, zones, IP address type; target group protocol, port, target type,
//! health-check protocol/port/interval/timeout/thresholds, path and matcher, load balancers
//! using it; the deregistration delay before and after ModifyTargetGroupAttributes; listener
//! port, protocol, default action type and target group; registered target IDs and ports; tags
//! after AddTags and RemoveTags; the error codes of unknown names, duplicate names, a group in
//! use, an unknown listener and deleted resources.
//!
//! Skipped, and why:
//! - concrete ARN IDs and addresses: both draw them at random;
//! - the load balancer kind inside ARNs: moto writes `app` for network load balancers too,
//!   ELBv2 writes `net` (`loadbalancer/net/NAME/ID` in its API reference); the kind is compared
//!   through `Type`, and `elbv2_load_balancers.rs` checks vpcnet-emu's `net`;
//! - `DNSName`: moto writes `NAME-1.REGION.elb.amazonaws.com`, ELBv2 (and vpcnet-emu) write
//!   `NAME-<id>.elb.REGION.amazonaws.com` for network load balancers;
//! - target health states: moto reports every registered target `healthy` without checking
//!   anything; vpcnet-emu reports `initial` until a data plane's checks pass (issue's "real
//!   checks"), so only the targets listed are compared, draining ones left out (moto forgets a
//!   deregistered target at once; ELBv2 lists it `draining` for the delay);
//! - the attributes answered by ModifyTargetGroupAttributes: ELBv2 answers all of them, moto
//!   only those changed (the changed one is compared);
//! - `LoadBalancerAddresses`: moto lists none for internal load balancers; vpcnet-emu gives the
//!   load balancer's private address (the lab needs it to send traffic).

mod common;

use aws_sdk_elasticloadbalancingv2 as elb;
use common::code;
use common::moto::{assert_same_trace, start_moto, vpc_with_subnet, Trace};
use elb::types::{
    Action, ActionTypeEnum, LoadBalancerSchemeEnum, LoadBalancerTypeEnum, ProtocolEnum, Tag,
    TargetDescription, TargetGroupAttribute, TargetTypeEnum,
};
use elb::Client;
use vpcnet_emu::Emulator;

/// IDs the sequence runs against.
struct Setup {
    vpc_id: String,
    subnet_id: String,
}

fn rel(v: Option<&str>, s: &Setup) -> String {
    match v {
        None => "<none>".into(),
        Some(x) if x == s.vpc_id => "<vpc>".into(),
        Some(x) if x == s.subnet_id => "<subnet>".into(),
        Some(x) => x.to_string(),
    }
}

/// An ARN with its random 16-hex IDs replaced by `<id>` and the load balancer kind (`app`,
/// `net`) by `<kind>`.
fn arn_shape(arn: Option<&str>) -> String {
    let Some(arn) = arn else {
        return "<none>".into();
    };
    arn.split('/')
        .map(|p| {
            if p.len() == 16 && p.bytes().all(|b| b.is_ascii_hexdigit()) {
                "<id>"
            } else if p == "app" || p == "net" {
                "<kind>"
            } else {
                p
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn target(id: &str, port: Option<i32>) -> TargetDescription {
    TargetDescription::builder().id(id).set_port(port).build()
}

async fn run_sequence(elb: &Client, s: &Setup) -> Trace {
    let mut t: Trace = Vec::new();
    let mut put = |k: &str, v: String| t.push((k.to_string(), v));

    let out = elb
        .create_load_balancer()
        .name("xnlb")
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(LoadBalancerSchemeEnum::Internal)
        .subnets(&s.subnet_id)
        .tags(Tag::builder().key("team").value("net").build())
        .send()
        .await
        .expect("CreateLoadBalancer");
    let lb = &out.load_balancers()[0];
    let lb_arn = lb.load_balancer_arn().unwrap().to_string();
    put("lb.arn", arn_shape(Some(&lb_arn)));
    put("lb.name", rel(lb.load_balancer_name(), s));
    put("lb.type", format!("{:?}", lb.r#type()));
    put("lb.scheme", format!("{:?}", lb.scheme()));
    put("lb.vpc", rel(lb.vpc_id(), s));
    put(
        "lb.state",
        format!("{:?}", lb.state().and_then(|x| x.code())),
    );
    put("lb.ip_type", format!("{:?}", lb.ip_address_type()));
    put(
        "lb.zones",
        format!(
            "{:?}",
            lb.availability_zones()
                .iter()
                .map(|z| (z.zone_name().unwrap_or(""), rel(z.subnet_id(), s)))
                .collect::<Vec<_>>()
        ),
    );
    let d = elb
        .describe_load_balancers()
        .names("xnlb")
        .send()
        .await
        .expect("DescribeLoadBalancers");
    put("describe_lb.count", d.load_balancers().len().to_string());
    put(
        "describe_lb.state",
        format!("{:?}", d.load_balancers()[0].state().and_then(|x| x.code())),
    );

    let out = elb
        .create_target_group()
        .name("xtg")
        .protocol(ProtocolEnum::Tcp)
        .port(8080)
        .vpc_id(&s.vpc_id)
        .target_type(TargetTypeEnum::Ip)
        .send()
        .await
        .expect("CreateTargetGroup");
    let tg = &out.target_groups()[0];
    let tg_arn = tg.target_group_arn().unwrap().to_string();
    put("tg.arn", arn_shape(Some(&tg_arn)));
    put("tg.name", rel(tg.target_group_name(), s));
    put("tg.protocol", format!("{:?}", tg.protocol()));
    put("tg.port", format!("{:?}", tg.port()));
    put("tg.vpc", rel(tg.vpc_id(), s));
    put("tg.target_type", format!("{:?}", tg.target_type()));
    put(
        "tg.hc_protocol",
        format!("{:?}", tg.health_check_protocol()),
    );
    put("tg.hc_port", format!("{:?}", tg.health_check_port()));
    put(
        "tg.hc_interval",
        format!("{:?}", tg.health_check_interval_seconds()),
    );
    put(
        "tg.hc_timeout",
        format!("{:?}", tg.health_check_timeout_seconds()),
    );
    put("tg.healthy", format!("{:?}", tg.healthy_threshold_count()));
    put(
        "tg.unhealthy",
        format!("{:?}", tg.unhealthy_threshold_count()),
    );
    put("tg.hc_path", format!("{:?}", tg.health_check_path()));
    put("tg.lbs", tg.load_balancer_arns().len().to_string());

    let a = elb
        .describe_target_group_attributes()
        .target_group_arn(&tg_arn)
        .send()
        .await
        .expect("DescribeTargetGroupAttributes");
    let delay = |attrs: &[TargetGroupAttribute]| {
        format!(
            "{:?}",
            attrs
                .iter()
                .find(|x| x.key() == Some("deregistration_delay.timeout_seconds"))
                .and_then(|x| x.value())
        )
    };
    put("attrs.delay", delay(a.attributes()));
    let a = elb
        .modify_target_group_attributes()
        .target_group_arn(&tg_arn)
        .attributes(
            TargetGroupAttribute::builder()
                .key("deregistration_delay.timeout_seconds")
                .value("30")
                .build(),
        )
        .send()
        .await
        .expect("ModifyTargetGroupAttributes");
    put("attrs.modified", delay(a.attributes()));

    let out = elb
        .create_listener()
        .load_balancer_arn(&lb_arn)
        .protocol(ProtocolEnum::Tcp)
        .port(80)
        .default_actions(
            Action::builder()
                .r#type(ActionTypeEnum::Forward)
                .target_group_arn(&tg_arn)
                .build(),
        )
        .send()
        .await
        .expect("CreateListener");
    let l = &out.listeners()[0];
    let l_arn = l.listener_arn().unwrap().to_string();
    put("listener.arn", arn_shape(Some(&l_arn)));
    put(
        "listener.lb",
        (l.load_balancer_arn() == Some(lb_arn.as_str())).to_string(),
    );
    put("listener.port", format!("{:?}", l.port()));
    put("listener.protocol", format!("{:?}", l.protocol()));
    let act = &l.default_actions()[0];
    put("listener.action", format!("{:?}", act.r#type()));
    put(
        "listener.action_tg",
        (act.target_group_arn() == Some(tg_arn.as_str())).to_string(),
    );
    let d = elb
        .describe_listeners()
        .load_balancer_arn(&lb_arn)
        .send()
        .await
        .expect("DescribeListeners");
    put("describe_listeners.count", d.listeners().len().to_string());
    let d = elb
        .describe_target_groups()
        .load_balancer_arn(&lb_arn)
        .send()
        .await
        .expect("DescribeTargetGroups by load balancer");
    put(
        "tg_of_lb",
        format!(
            "{:?}",
            d.target_groups()
                .iter()
                .map(|t| (
                    t.target_group_name().unwrap_or(""),
                    t.load_balancer_arns() == std::slice::from_ref(&lb_arn)
                ))
                .collect::<Vec<_>>()
        ),
    );

    elb.register_targets()
        .target_group_arn(&tg_arn)
        .targets(target("10.0.1.10", None))
        .targets(target("10.0.1.11", Some(9090)))
        .send()
        .await
        .expect("RegisterTargets");
    let listed = |d: &elb::operation::describe_target_health::DescribeTargetHealthOutput| {
        let mut v: Vec<String> = d
            .target_health_descriptions()
            .iter()
            .filter(|h| {
                h.target_health()
                    .and_then(|x| x.state())
                    .map(|x| x.as_str())
                    != Some("draining")
            })
            .map(|h| {
                let t = h.target().unwrap();
                format!("{}:{:?}", t.id().unwrap(), t.port())
            })
            .collect();
        v.sort();
        format!("{v:?}")
    };
    let d = elb
        .describe_target_health()
        .target_group_arn(&tg_arn)
        .send()
        .await
        .expect("DescribeTargetHealth");
    put("health.targets", listed(&d));
    elb.deregister_targets()
        .target_group_arn(&tg_arn)
        .targets(target("10.0.1.10", None))
        .send()
        .await
        .expect("DeregisterTargets");
    let d = elb
        .describe_target_health()
        .target_group_arn(&tg_arn)
        .send()
        .await
        .expect("DescribeTargetHealth after deregistration");
    put("health.after_deregister", listed(&d));

    elb.add_tags()
        .resource_arns(&tg_arn)
        .tags(Tag::builder().key("x").value("1").build())
        .tags(Tag::builder().key("y").value("2").build())
        .send()
        .await
        .expect("AddTags");
    elb.remove_tags()
        .resource_arns(&tg_arn)
        .tag_keys("x")
        .send()
        .await
        .expect("RemoveTags");
    let d = elb
        .describe_tags()
        .resource_arns(&lb_arn)
        .resource_arns(&tg_arn)
        .send()
        .await
        .expect("DescribeTags");
    put(
        "tags",
        format!(
            "{:?}",
            d.tag_descriptions()
                .iter()
                .map(|t| (
                    arn_shape(t.resource_arn()),
                    t.tags()
                        .iter()
                        .map(|t| format!("{}={}", t.key().unwrap(), t.value().unwrap()))
                        .collect::<Vec<_>>()
                ))
                .collect::<Vec<_>>()
        ),
    );

    // errors
    let e = elb
        .describe_target_groups()
        .names("nope")
        .send()
        .await
        .unwrap_err();
    put("err.tg_name", code(&e));
    let e = elb
        .describe_load_balancers()
        .names("nope")
        .send()
        .await
        .unwrap_err();
    put("err.lb_name", code(&e));
    let e = elb
        .create_target_group()
        .name("xtg")
        .protocol(ProtocolEnum::Tcp)
        .port(9999)
        .vpc_id(&s.vpc_id)
        .target_type(TargetTypeEnum::Ip)
        .send()
        .await
        .unwrap_err();
    put("err.duplicate_tg", code(&e));
    let e = elb
        .delete_target_group()
        .target_group_arn(&tg_arn)
        .send()
        .await
        .unwrap_err();
    put("err.tg_in_use", code(&e));
    let bogus = format!("{}/0123456789abcdef", &l_arn[..l_arn.rfind('/').unwrap()]);
    let e = elb
        .describe_listeners()
        .listener_arns(&bogus)
        .send()
        .await
        .unwrap_err();
    put("err.listener", code(&e));

    // deletion
    elb.delete_listener()
        .listener_arn(&l_arn)
        .send()
        .await
        .expect("DeleteListener");
    let d = elb
        .describe_listeners()
        .load_balancer_arn(&lb_arn)
        .send()
        .await
        .expect("DescribeListeners after delete");
    put("deleted.listeners", d.listeners().len().to_string());
    elb.delete_target_group()
        .target_group_arn(&tg_arn)
        .send()
        .await
        .expect("DeleteTargetGroup");
    let e = elb
        .describe_target_groups()
        .target_group_arns(&tg_arn)
        .send()
        .await
        .unwrap_err();
    put("deleted.tg", code(&e));
    elb.delete_load_balancer()
        .load_balancer_arn(&lb_arn)
        .send()
        .await
        .expect("DeleteLoadBalancer");
    let e = elb
        .describe_load_balancers()
        .names("xnlb")
        .send()
        .await
        .unwrap_err();
    put("deleted.lb", code(&e));
    t
}

#[tokio::test]
async fn same_elbv2_sequence_same_results_as_moto() {
    let moto = start_moto();
    let ec2 = common::client(&moto.endpoint, 1);
    let (vpc_id, subnet_id) = vpc_with_subnet(&ec2, "10.0.1.0/24").await;
    let moto_setup = Setup { vpc_id, subnet_id };
    let moto_trace = run_sequence(&common::elbv2::client(&moto.endpoint, 1), &moto_setup).await;

    let emu = Emulator::new(41);
    let v = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet_id = emu
        .create_subnet(&v.vpc_id, "10.0.1.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let emu_setup = Setup {
        vpc_id: v.vpc_id,
        subnet_id,
    };
    let emu_trace = run_sequence(&common::elbv2::client(&server.endpoint, 1), &emu_setup).await;

    assert_same_trace(&moto_trace, &emu_trace, 40);
    drop(moto);
}
