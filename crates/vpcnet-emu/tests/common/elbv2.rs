//! Shared ELBv2 test setup: an emulator with a VPC of two subnets in two zones, served on
//! 127.0.0.1, and the unmodified aws-sdk-elasticloadbalancingv2 client.

use std::time::Duration;

use aws_sdk_elasticloadbalancingv2 as elb;
use elb::config::{BehaviorVersion, Region};
use elb::types::{
    Action, ActionTypeEnum, LoadBalancerSchemeEnum, LoadBalancerTypeEnum, ProtocolEnum,
    TargetDescription, TargetGroupAttribute, TargetTypeEnum,
};
use elb::{Client, Config};
use vpcnet_emu::{EmuServer, Emulator, VpcInfo};

/// An ELBv2 client for `endpoint`; `attempts` = 1 disables the SDK's retries.
pub fn client(endpoint: &str, attempts: u32) -> Client {
    let cfg = Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(super::credentials())
        .retry_config(super::retry(attempts, Duration::from_millis(50)))
        .build();
    Client::from_conf(cfg)
}

pub struct Lab {
    pub emu: Emulator,
    pub server: EmuServer,
    pub elb: Client,
    pub vpc: VpcInfo,
    /// 10.0.1.0/24 in us-east-1a
    pub subnet_a: String,
    /// 10.0.2.0/24 in us-east-1b
    pub subnet_b: String,
}

/// VPC 10.0.0.0/16 with subnets 10.0.1.0/24 (us-east-1a) and 10.0.2.0/24 (us-east-1b); SDK
/// without retries.
pub async fn lab(seed: u64) -> Lab {
    let emu = Emulator::new(seed);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet_a = emu
        .create_subnet(&vpc.vpc_id, "10.0.1.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let subnet_b = emu
        .create_subnet(&vpc.vpc_id, "10.0.2.0/24".parse().unwrap(), "us-east-1b")
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let elb = client(&server.endpoint, 1);
    Lab {
        emu,
        server,
        elb,
        vpc,
        subnet_a,
        subnet_b,
    }
}

pub fn target(id: &str, port: Option<i32>, az: Option<&str>) -> TargetDescription {
    TargetDescription::builder()
        .id(id)
        .set_port(port)
        .set_availability_zone(az.map(str::to_string))
        .build()
}

pub fn forward(tg_arn: &str) -> Action {
    Action::builder()
        .r#type(ActionTypeEnum::Forward)
        .target_group_arn(tg_arn)
        .build()
}

impl Lab {
    /// An internal network load balancer in subnet a; returns its ARN.
    pub async fn nlb(&self, name: &str) -> String {
        self.elb
            .create_load_balancer()
            .name(name)
            .r#type(LoadBalancerTypeEnum::Network)
            .scheme(LoadBalancerSchemeEnum::Internal)
            .subnets(&self.subnet_a)
            .send()
            .await
            .expect("CreateLoadBalancer")
            .load_balancers()[0]
            .load_balancer_arn()
            .unwrap()
            .to_string()
    }

    /// A TCP target group of type ip on `port` in the lab VPC; returns its ARN.
    pub async fn ip_tg(&self, name: &str, port: i32) -> String {
        self.tg(name, ProtocolEnum::Tcp, port, Some(TargetTypeEnum::Ip))
            .await
    }

    /// A target group in the lab VPC (target type: ELBv2's default when None); returns its ARN.
    pub async fn tg(
        &self,
        name: &str,
        protocol: ProtocolEnum,
        port: i32,
        target_type: Option<TargetTypeEnum>,
    ) -> String {
        self.elb
            .create_target_group()
            .name(name)
            .protocol(protocol)
            .port(port)
            .vpc_id(&self.vpc.vpc_id)
            .set_target_type(target_type)
            .send()
            .await
            .expect("CreateTargetGroup")
            .target_groups()[0]
            .target_group_arn()
            .unwrap()
            .to_string()
    }

    /// DeregisterTargets of target `id` (on the group's port) from `tg`.
    pub async fn deregister(&self, tg: &str, id: &str) {
        self.elb
            .deregister_targets()
            .target_group_arn(tg)
            .targets(target(id, None, None))
            .send()
            .await
            .expect("DeregisterTargets");
    }

    /// A TCP listener on `port` of `lb` forwarding to `tg`; returns its ARN.
    pub async fn listener(&self, lb: &str, port: i32, tg: &str) -> String {
        self.elb
            .create_listener()
            .load_balancer_arn(lb)
            .protocol(ProtocolEnum::Tcp)
            .port(port)
            .default_actions(forward(tg))
            .send()
            .await
            .expect("CreateListener")
            .listeners()[0]
            .listener_arn()
            .unwrap()
            .to_string()
    }

    /// Sets target group `tg`'s `deregistration_delay.timeout_seconds`.
    pub async fn set_delay(&self, tg: &str, seconds: u32) {
        self.elb
            .modify_target_group_attributes()
            .target_group_arn(tg)
            .attributes(
                TargetGroupAttribute::builder()
                    .key("deregistration_delay.timeout_seconds")
                    .value(seconds.to_string())
                    .build(),
            )
            .send()
            .await
            .expect("ModifyTargetGroupAttributes");
    }

    /// (target id, state, reason) of every registered target.
    pub async fn health(&self, tg: &str) -> Vec<(String, String, Option<String>)> {
        let out = self
            .elb
            .describe_target_health()
            .target_group_arn(tg)
            .send()
            .await
            .expect("DescribeTargetHealth");
        let mut v: Vec<_> = out
            .target_health_descriptions()
            .iter()
            .map(|d| {
                let h = d.target_health().unwrap();
                (
                    d.target().unwrap().id().unwrap().to_string(),
                    h.state().unwrap().as_str().to_string(),
                    h.reason().map(|r| r.as_str().to_string()),
                )
            })
            .collect();
        v.sort();
        v
    }
}
