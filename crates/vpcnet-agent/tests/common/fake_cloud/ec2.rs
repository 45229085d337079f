//! The fake's EC2 actions: [`Ec2Api`] on the emulator's model, each call through the fake's
//! outcome (script, then random rates).

use vpcnet_agent::cloud::{Ec2Api, Ec2Result};
use vpcnet_ec2::{
    Action, AddressRelease, AddressRequest, Assigned, CreateEni, EniAttachment, NetworkInterface,
    Subnet, Tags,
};
use vpcnet_emu::model::{self, AssignRequest, CreateEniRequest, ModifyEniRequest};
use vpcnet_limits::InstanceLimits;

use super::FakeCloud;

fn network_interface(e: &model::Eni, now: std::time::Instant) -> NetworkInterface {
    NetworkInterface {
        eni_id: e.id.clone(),
        mac: e.mac.clone(),
        description: e.description.clone(),
        subnet_id: e.subnet_id.clone(),
        vpc_id: e.vpc_id.clone(),
        availability_zone: e.az.clone(),
        primary_ip: e.primary_ip,
        secondary_ips: e.secondary_ips.clone(),
        prefixes: e.prefixes.clone(),
        attachment: e.attachment.as_ref().map(|a| EniAttachment {
            attachment_id: a.id.clone(),
            instance_id: Some(a.instance_id.clone()),
            device_index: a.device_index,
            network_card_index: a.network_card,
            status: a.status(now).into(),
            delete_on_termination: a.delete_on_termination,
        }),
        status: e.status().into(),
        security_group_ids: e.groups.clone(),
        interface_type: "interface".into(),
        requester_managed: false,
        tags: e.tags.0.iter().cloned().collect(),
    }
}

fn subnet(s: &model::Subnet) -> Subnet {
    Subnet {
        subnet_id: s.id.clone(),
        vpc_id: s.vpc_id.clone(),
        availability_zone: s.az.clone(),
        cidr_block: s.cidr,
        available_ip_address_count: s.available(),
        tags: s.tags.0.iter().cloned().collect(),
    }
}

impl Ec2Api for FakeCloud {
    fn describe_instance_network_interfaces<'a>(
        &'a self,
        instance_id: &'a str,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(self.call(Action::DescribeNetworkInterfaces, move |m, now| {
            let mut v: Vec<_> = m
                .enis()
                .filter(|e| {
                    e.attachment
                        .as_ref()
                        .is_some_and(|a| a.instance_id == instance_id)
                })
                .map(|e| network_interface(e, now))
                .collect();
            v.sort_by_key(|e| {
                e.attachment
                    .as_ref()
                    .map(|a| (a.network_card_index, a.device_index))
            });
            Ok(v)
        }))
    }

    fn describe_network_interfaces_by_id<'a>(
        &'a self,
        eni_ids: &'a [String],
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(self.call(Action::DescribeNetworkInterfaces, move |m, now| {
            eni_ids
                .iter()
                .map(|id| {
                    m.eni(id)
                        .map(|e| network_interface(e, now))
                        .ok_or_else(|| vpcnet_emu::Ec2Error::eni_not_found(id))
                })
                .collect()
        }))
    }

    fn describe_network_interfaces_by_tag<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        status: Option<&'a str>,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(self.call(Action::DescribeNetworkInterfaces, move |m, now| {
            Ok(m.enis()
                .filter(|e| e.tags.get(key) == Some(value))
                .filter(|e| status.is_none_or(|s| e.status() == s))
                .map(|e| network_interface(e, now))
                .collect())
        }))
    }

    fn describe_subnets<'a>(&'a self, subnet_ids: &'a [String]) -> Ec2Result<'a, Vec<Subnet>> {
        Box::pin(self.call(Action::DescribeSubnets, move |m, _| {
            subnet_ids
                .iter()
                .map(|id| {
                    m.subnet(id)
                        .map(subnet)
                        .ok_or_else(|| vpcnet_emu::Ec2Error::subnet_not_found(id))
                })
                .collect()
        }))
    }

    fn describe_zone_subnets<'a>(
        &'a self,
        vpc_id: &'a str,
        zone: &'a str,
    ) -> Ec2Result<'a, Vec<Subnet>> {
        Box::pin(self.call(Action::DescribeSubnets, move |m, _| {
            Ok(m.subnets()
                .filter(|s| s.vpc_id == vpc_id && s.az == zone)
                .map(subnet)
                .collect())
        }))
    }

    fn describe_instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> Ec2Result<'a, Vec<InstanceLimits>> {
        Box::pin(self.call(Action::DescribeInstanceTypes, move |m, _| {
            Ok(types.iter().filter_map(|t| m.instance_limits(t)).collect())
        }))
    }

    fn create_network_interface<'a>(
        &'a self,
        req: &'a CreateEni,
    ) -> Ec2Result<'a, NetworkInterface> {
        Box::pin(self.call(Action::CreateNetworkInterface, move |m, now| {
            let (secondary_count, prefix_count) = match req.addresses {
                Some(AddressRequest::SecondaryIps(n)) => (n, 0),
                Some(AddressRequest::Prefixes(n)) => (0, n),
                None => (0, 0),
            };
            let id = m.create_eni(CreateEniRequest {
                subnet_id: req.subnet_id.clone(),
                description: req.description.clone(),
                groups: req.security_group_ids.clone(),
                tags: req
                    .tags
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                secondary_count,
                prefix_count,
                ..Default::default()
            })?;
            Ok(network_interface(m.eni(&id).expect("created"), now))
        }))
    }

    fn attach_network_interface<'a>(
        &'a self,
        eni_id: &'a str,
        instance_id: &'a str,
        device_index: u32,
        network_card_index: u32,
    ) -> Ec2Result<'a, String> {
        let delay = *self.0.attach_delay.lock().unwrap();
        Box::pin(self.call(Action::AttachNetworkInterface, move |m, now| {
            m.attach_eni(
                eni_id,
                instance_id,
                device_index,
                Some(network_card_index),
                now,
                now + delay,
            )
        }))
    }

    fn set_delete_on_termination<'a>(
        &'a self,
        eni_id: &'a str,
        attachment_id: &'a str,
        delete: bool,
    ) -> Ec2Result<'a, ()> {
        Box::pin(
            self.call(Action::ModifyNetworkInterfaceAttribute, move |m, _| {
                m.modify_eni(
                    eni_id,
                    ModifyEniRequest {
                        delete_on_termination: Some((attachment_id.to_string(), delete)),
                        ..Default::default()
                    },
                )
            }),
        )
    }

    fn detach_network_interface<'a>(
        &'a self,
        attachment_id: &'a str,
        force: bool,
    ) -> Ec2Result<'a, ()> {
        Box::pin(self.call(Action::DetachNetworkInterface, move |m, _| {
            m.detach_eni(attachment_id, force)
        }))
    }

    fn delete_network_interface<'a>(&'a self, eni_id: &'a str) -> Ec2Result<'a, ()> {
        Box::pin(self.call(Action::DeleteNetworkInterface, move |m, _| {
            m.delete_eni(eni_id)
        }))
    }

    fn assign_private_ips<'a>(
        &'a self,
        eni_id: &'a str,
        req: AddressRequest,
    ) -> Ec2Result<'a, Assigned> {
        Box::pin(self.call(Action::AssignPrivateIpAddresses, move |m, _| {
            let r = match req {
                AddressRequest::SecondaryIps(n) => AssignRequest {
                    count: n,
                    ..Default::default()
                },
                AddressRequest::Prefixes(n) => AssignRequest {
                    prefix_count: n,
                    ..Default::default()
                },
            };
            let (ips, prefixes) = m.assign(eni_id, r)?;
            Ok(Assigned { ips, prefixes })
        }))
    }

    fn unassign_private_ips<'a>(
        &'a self,
        eni_id: &'a str,
        release: &'a AddressRelease,
    ) -> Ec2Result<'a, ()> {
        Box::pin(self.call(
            Action::UnassignPrivateIpAddresses,
            move |m, _| match release {
                AddressRelease::SecondaryIps(ips) => m.unassign(eni_id, ips, &[]),
                AddressRelease::Prefixes(p) => m.unassign(eni_id, &[], p),
            },
        ))
    }

    fn create_tags<'a>(&'a self, resource_ids: &'a [String], tags: &'a Tags) -> Ec2Result<'a, ()> {
        Box::pin(self.call(Action::CreateTags, move |m, _| {
            let tags: Vec<_> = tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            m.create_tags(resource_ids, &tags)
        }))
    }
}
