//! The test cloud of the emulator tests: vpcnet-emu in-process with one VPC, subnet, security
//! group and instance, a vpcnet-ec2 client on its endpoint with an observer recording every
//! attempt, and ENI requests for it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vpcnet_ec2::{
    Action, AddressRequest, CallSettings, CreateEni, Ec2, Ec2Error, Ec2Observer, Ec2Options,
    RetryPolicy, StaticCredentials,
};
use vpcnet_emu::{EmuServer, Emulator, InstanceInfo, RunInstance};

#[derive(Default)]
pub struct Recorder {
    pub attempts: Mutex<Vec<(Action, Option<String>)>>,
}

impl Recorder {
    pub fn count(&self, action: Action, code: Option<&str>) -> usize {
        self.attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|(a, c)| *a == action && c.as_deref() == code)
            .count()
    }
}

impl Ec2Observer for Recorder {
    fn on_attempt(&self, action: Action, _: Duration, error: Option<&Ec2Error>) {
        self.attempts
            .lock()
            .unwrap()
            .push((action, error.map(|e| e.code().to_string())));
    }
}

pub struct Lab {
    pub emu: Emulator,
    pub _server: EmuServer,
    pub ec2: Ec2,
    pub rec: Arc<Recorder>,
    pub subnet: String,
    pub sg: String,
    pub instance: InstanceInfo,
}

pub fn fast_calls() -> CallSettings {
    CallSettings {
        operation_timeout: Duration::from_secs(20),
        attempt_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_attempts: 30,
            base_delay: Duration::from_millis(2),
            throttle_base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(50),
        },
        ..CallSettings::default()
    }
}

pub async fn lab(calls: CallSettings) -> Lab {
    let emu = Emulator::new(7);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "10.0.0.0/20".parse().unwrap(), "us-east-1a")
        .unwrap();
    let sg = emu.create_security_group(&vpc.vpc_id, "pods").unwrap();
    let instance = emu
        .run_instance(RunInstance {
            instance_type: "m5.large".into(),
            subnet_id: subnet.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let rec = Arc::new(Recorder::default());
    let ec2 = Ec2::connect(
        Ec2Options {
            region: Some("us-east-1".into()),
            endpoint_url: Some(server.endpoint.clone()),
            imds_endpoint: None,
            credentials: Some(StaticCredentials {
                access_key_id: "AKIDTEST".into(),
                secret_access_key: "secret".into(),
                session_token: None,
            }),
            calls,
        },
        rec.clone(),
    )
    .await
    .unwrap();
    Lab {
        emu,
        _server: server,
        ec2,
        rec,
        subnet,
        sg,
        instance,
    }
}

pub fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn create(lab: &Lab, addresses: Option<AddressRequest>, tag_value: &str) -> CreateEni {
    CreateEni {
        subnet_id: lab.subnet.clone(),
        security_group_ids: vec![lab.sg.clone()],
        description: format!("vpcnet-cni: {}", lab.instance.instance_id),
        tags: tags(&[
            (
                "node.k8s.amazonaws.com/instance_id",
                &lab.instance.instance_id,
            ),
            ("test", tag_value),
        ]),
        addresses,
        client_token: None,
    }
}
