//! Instances: launched with a primary ENI (device index 0, DeleteOnTermination=true) and
//! terminated with their DeleteOnTermination ENIs.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use vpcnet_limits::InstanceLimits;

use super::{Cloud, CreateEniRequest, ImdsNetwork, Tags};
use crate::error::Ec2Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Running,
    Terminated,
}

impl InstanceState {
    /// EC2 `InstanceState` (code, name).
    pub fn code_name(self) -> (i32, &'static str) {
        match self {
            InstanceState::Running => (16, "running"),
            InstanceState::Terminated => (48, "terminated"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub limits: InstanceLimits,
    pub reservation_id: String,
    pub image_id: String,
    pub subnet_id: String,
    pub vpc_id: String,
    pub az: String,
    pub primary_eni: String,
    pub private_ip: Ipv4Addr,
    pub groups: Vec<String>,
    pub state: InstanceState,
    pub launch_time: Instant,
    pub tags: Tags,
    /// User data as launched (IMDS `/latest/user-data`); `None`: IMDS answers 404.
    pub user_data: Option<String>,
    /// IMDS's view of the instance's network: (visible from, snapshot), oldest first.
    pub(crate) imds: VecDeque<(Instant, Arc<ImdsNetwork>)>,
}

/// Input of the control API's "run instance".
#[derive(Debug, Clone, Default)]
pub struct RunInstanceRequest {
    pub instance_type: String,
    pub subnet_id: String,
    pub groups: Vec<String>,
    pub private_ip: Option<Ipv4Addr>,
    pub tags: Vec<(String, String)>,
    pub user_data: Option<String>,
}

impl Cloud {
    /// Launch one instance with its primary ENI attached at device index 0 (reported to the
    /// hooks at once). Errors: `InvalidInstanceType` (unknown type), `InvalidSubnetID.NotFound`,
    /// `InvalidGroup.NotFound`, `InsufficientFreeAddressesInSubnet`, `PrivateIpAddressInUse`.
    pub fn run_instance(
        &mut self,
        req: RunInstanceRequest,
        now: Instant,
    ) -> Result<String, Ec2Error> {
        let limits = self.instance_limits(&req.instance_type).ok_or_else(|| {
            Ec2Error::new(
                "InvalidInstanceType",
                format!("The instance type '{}' does not exist", req.instance_type),
            )
        })?;
        let subnet = self
            .subnets
            .get(&req.subnet_id)
            .ok_or_else(|| Ec2Error::subnet_not_found(&req.subnet_id))?;
        let (vpc_id, az) = (subnet.vpc_id.clone(), subnet.az.clone());
        let groups = self.resolve_groups(&vpc_id, &req.groups)?;
        let eni_id = self.create_eni(CreateEniRequest {
            subnet_id: req.subnet_id.clone(),
            description: "Primary network interface".into(),
            groups: groups.clone(),
            primary_ip: req.private_ip,
            ..Default::default()
        })?;
        let id = self.new_id("i");
        let reservation_id = self.new_id("r");
        let mut tags = Tags::default();
        for (k, v) in &req.tags {
            tags.set(k, v);
        }
        let private_ip = self.enis[&eni_id].primary_ip;
        self.instances.insert(
            id.clone(),
            Instance {
                id: id.clone(),
                instance_type: req.instance_type.clone(),
                limits,
                reservation_id,
                image_id: "ami-0123456789abcdef0".into(),
                subnet_id: req.subnet_id.clone(),
                vpc_id,
                az,
                primary_eni: eni_id.clone(),
                private_ip,
                groups,
                state: InstanceState::Running,
                launch_time: now,
                tags,
                user_data: req.user_data.clone(),
                imds: VecDeque::new(),
            },
        );
        let att = self
            .attach_eni(&eni_id, &id, 0, None, now, now)
            .expect("a fresh instance takes its primary ENI");
        let eni = self.enis.get_mut(&eni_id).expect("created");
        if let Some(a) = eni.attachment.as_mut() {
            a.delete_on_termination = true;
        }
        self.complete_attachment(&eni_id, &att);
        Ok(id)
    }

    /// EC2 TerminateInstances (all-or-nothing ID check): every ENI attached is detached; those
    /// marked DeleteOnTermination are deleted, the rest become `available`.
    /// Returns (instance ID, previous state, current state). Errors: `InvalidInstanceID.NotFound`.
    pub fn terminate_instances(
        &mut self,
        ids: &[String],
    ) -> Result<Vec<(String, InstanceState, InstanceState)>, Ec2Error> {
        for id in ids {
            if !self.instances.contains_key(id) {
                return Err(Ec2Error::instance_not_found(id));
            }
        }
        let mut out = Vec::new();
        for id in ids {
            let prev = self.instances[id].state;
            if prev == InstanceState::Running {
                let attached: Vec<(String, bool)> = self
                    .enis
                    .values()
                    .filter_map(|e| {
                        e.attachment
                            .as_ref()
                            .filter(|a| &a.instance_id == id)
                            .map(|a| (e.id.clone(), a.delete_on_termination))
                    })
                    .collect();
                for (eni, delete) in attached {
                    self.force_detach(&eni).expect("attached");
                    if delete {
                        self.remove_eni(&eni);
                    }
                }
                let inst = self.instances.get_mut(id).expect("checked");
                inst.state = InstanceState::Terminated;
                inst.imds.clear();
            }
            out.push((id.clone(), prev, InstanceState::Terminated));
        }
        Ok(out)
    }
}
