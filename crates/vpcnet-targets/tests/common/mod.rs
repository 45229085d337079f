//! Shared by the emulator-backed tests: a cloud (vpcnet-emu through the real SDK), a recording
//! [`Sink`], and inputs.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vpcnet_elbv2::{
    CallSettings, Elbv2, Elbv2Options, HealthCheck, HealthState, LoadBalancerType, NewLoadBalancer,
    NewTargetGroup, StaticCredentials, TargetType,
};
use vpcnet_emu::elbv2::fault_key;
use vpcnet_emu::{EmuServer, Emulator};
use vpcnet_targets::core::desired::{Desired, TargetKey};
use vpcnet_targets::core::usage::GateOpen;
use vpcnet_targets::group::{Gated, GroupInput, Owner, Sink};

pub struct Cloud {
    pub emu: Emulator,
    _server: EmuServer,
    pub elb: Elbv2,
    pub vpc: String,
    pub subnet: String,
}

pub async fn cloud(seed: u64) -> Cloud {
    let emu = Emulator::new(seed);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "10.0.1.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let mut calls = CallSettings::default();
    calls.retry.base_delay = Duration::from_millis(5);
    calls.retry.throttle_base_delay = Duration::from_millis(10);
    calls.retry.max_delay = Duration::from_millis(50);
    calls.retry.max_attempts = 2;
    let elb = Elbv2::connect(Elbv2Options {
        region: Some("us-east-1".into()),
        endpoint_url: Some(server.endpoint.clone()),
        credentials: Some(StaticCredentials {
            access_key_id: "AKIDEMU".into(),
            secret_access_key: "secret".into(),
            session_token: None,
        }),
        calls,
    })
    .await
    .unwrap();
    Cloud {
        emu,
        _server: server,
        elb,
        vpc: vpc.vpc_id,
        subnet,
    }
}

impl Cloud {
    /// A target group (type ip, port 80); with `in_use`, behind a network load balancer so
    /// deregistered targets drain.
    pub async fn group(&self, name: &str, in_use: bool) -> String {
        let tg = self
            .elb
            .create_target_group(&NewTargetGroup {
                name: name.into(),
                protocol: "TCP".into(),
                port: 80,
                vpc_id: self.vpc.clone(),
                target_type: TargetType::Ip,
                health: HealthCheck::default(),
                tags: vec![],
            })
            .await
            .unwrap();
        if in_use {
            self.use_group(name, &tg.arn).await;
        }
        tg.arn
    }

    /// A network load balancer `lb-<name>` in the first subnet (us-east-1a) whose listener
    /// forwards to target group `arn`.
    pub async fn use_group(&self, name: &str, arn: &str) {
        let lb = self
            .elb
            .create_load_balancer(&NewLoadBalancer {
                name: format!("lb-{name}"),
                lb_type: LoadBalancerType::Network,
                internal: true,
                subnets: vec![self.subnet.clone()],
                security_groups: vec![],
                tags: vec![],
            })
            .await
            .unwrap();
        self.elb
            .create_listener(&lb.arn, "TCP", 80, arn)
            .await
            .unwrap();
    }

    pub async fn registered(&self, arn: &str) -> Vec<(String, HealthState)> {
        let mut v: Vec<(String, HealthState)> = self
            .elb
            .target_health(arn, &[])
            .await
            .unwrap()
            .into_iter()
            .map(|h| (h.target.id, h.state))
            .collect();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    }

    pub fn calls(&self, action: &str) -> u64 {
        self.emu
            .calls()
            .per_action
            .get(&fault_key(action))
            .copied()
            .unwrap_or(0)
    }
}

/// The Kubernetes side, recorded.
#[derive(Clone, Default)]
pub struct Recorded {
    pub gates: Arc<Mutex<Vec<String>>>,
    /// (pod, why) of every gate opened.
    pub opened: Arc<Mutex<Vec<(String, GateOpen)>>>,
    pub events: Arc<Mutex<Vec<String>>>,
    /// (binding, in use, note) of every condition written.
    pub conditions: Arc<Mutex<Vec<(String, bool, String)>>>,
    pub observed: Arc<Mutex<u32>>,
}

impl Sink for Recorded {
    async fn open_gate(&self, g: &Gated, why: GateOpen) -> anyhow::Result<()> {
        self.gates.lock().unwrap().push(g.pod.clone());
        self.opened.lock().unwrap().push((g.pod.clone(), why));
        Ok(())
    }
    async fn in_use_condition(&self, o: &Owner, in_use: bool, note: String) {
        self.conditions
            .lock()
            .unwrap()
            .push((o.name.clone(), in_use, note));
    }
    async fn event(&self, _: &Owner, _: bool, reason: &str, _: String) {
        self.events.lock().unwrap().push(reason.to_string());
    }
    async fn pod_event(&self, _: &str, pod: &str, reason: &str, _: String) {
        self.events.lock().unwrap().push(format!("{reason} {pod}"));
    }
    async fn observed(&self, _: &Owner) {
        *self.observed.lock().unwrap() += 1;
    }
}

pub fn key(i: u8) -> TargetKey {
    TargetKey {
        ip: Ipv4Addr::new(10, 0, 1, i),
        port: 80,
    }
}

pub fn input(wanted: &[u8]) -> GroupInput {
    GroupInput {
        desired: Desired {
            wanted: wanted.iter().map(|i| key(*i)).collect(),
            keep: Default::default(),
        },
        gated: vec![],
        pods: wanted
            .iter()
            .map(|i| (key(*i), "default".to_string(), format!("p{i}")))
            .collect(),
        owners: vec![Owner {
            namespace: "default".into(),
            name: "web".into(),
            generation: Some(1),
            observed: None,
            uid: None,
            in_use: None,
        }],
    }
}

pub fn ids(s: &[(String, HealthState)], state: Option<HealthState>) -> Vec<String> {
    s.iter()
        .filter(|(_, st)| state.as_ref().is_none_or(|x| x == st))
        .map(|(id, _)| id.clone())
        .collect()
}
