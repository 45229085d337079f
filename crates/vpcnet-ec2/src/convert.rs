//! SDK shapes → domain structs. Missing required fields become
//! [`Ec2Error::InvalidResponse`] naming the field.

use std::net::Ipv4Addr;

use aws_sdk_ec2::types as sdk;
use ipnet::Ipv4Net;
use vpcnet_limits::{Hypervisor, InstanceLimits, NetworkCard};

use crate::{Action, Ec2Error, EniAttachment, Instance, NetworkInterface, Subnet, Tags};

pub(crate) fn invalid(action: Action, message: impl Into<String>) -> Ec2Error {
    Ec2Error::InvalidResponse {
        action,
        message: message.into(),
        source: None,
    }
}

fn req<'a>(action: Action, v: Option<&'a str>, what: &str) -> Result<&'a str, Ec2Error> {
    v.filter(|s| !s.is_empty())
        .ok_or_else(|| invalid(action, format!("missing {what}")))
}

pub(crate) fn ipv4(action: Action, s: &str, what: &str) -> Result<Ipv4Addr, Ec2Error> {
    s.parse()
        .map_err(|_| invalid(action, format!("{what} {s:?} is not an IPv4 address")))
}

pub(crate) fn ipv4_net(action: Action, s: &str, what: &str) -> Result<Ipv4Net, Ec2Error> {
    s.parse()
        .map_err(|_| invalid(action, format!("{what} {s:?} is not an IPv4 CIDR")))
}

fn count(action: Action, v: Option<i32>, what: &str) -> Result<u32, Ec2Error> {
    let n = v.ok_or_else(|| invalid(action, format!("missing {what}")))?;
    u32::try_from(n).map_err(|_| invalid(action, format!("{what} is negative: {n}")))
}

pub(crate) fn tags(tags: &[sdk::Tag]) -> Tags {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

pub(crate) fn network_interface(
    action: Action,
    eni: &sdk::NetworkInterface,
) -> Result<NetworkInterface, Ec2Error> {
    let eni_id = req(action, eni.network_interface_id(), "NetworkInterfaceId")?.to_string();
    let ctx = |what: &str| format!("{what} of {eni_id}");
    let primary_ip = ipv4(
        action,
        req(action, eni.private_ip_address(), &ctx("PrivateIpAddress"))?,
        &ctx("PrivateIpAddress"),
    )?;
    let mut secondary_ips = Vec::new();
    for a in eni.private_ip_addresses() {
        if a.primary() == Some(true) {
            continue;
        }
        if let Some(s) = a.private_ip_address() {
            let ip = ipv4(action, s, &ctx("PrivateIpAddresses"))?;
            if ip != primary_ip {
                secondary_ips.push(ip);
            }
        }
    }
    let prefixes = eni
        .ipv4_prefixes()
        .iter()
        .filter_map(|p| p.ipv4_prefix())
        .map(|p| ipv4_net(action, p, &ctx("Ipv4Prefixes")))
        .collect::<Result<Vec<_>, _>>()?;
    let attachment = match eni.attachment() {
        Some(a) if a.attachment_id().is_some() => Some(EniAttachment {
            attachment_id: a.attachment_id().unwrap_or_default().to_string(),
            instance_id: a.instance_id().map(str::to_string),
            device_index: count(action, a.device_index(), &ctx("Attachment.DeviceIndex"))?,
            network_card_index: a.network_card_index().unwrap_or(0).max(0) as u32,
            status: a
                .status()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            delete_on_termination: a.delete_on_termination().unwrap_or(false),
        }),
        _ => None,
    };
    Ok(NetworkInterface {
        mac: eni.mac_address().unwrap_or_default().to_ascii_lowercase(),
        description: eni.description().unwrap_or_default().to_string(),
        subnet_id: req(action, eni.subnet_id(), &ctx("SubnetId"))?.to_string(),
        vpc_id: eni.vpc_id().unwrap_or_default().to_string(),
        availability_zone: eni.availability_zone().unwrap_or_default().to_string(),
        primary_ip,
        secondary_ips,
        prefixes,
        attachment,
        status: eni
            .status()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        security_group_ids: eni
            .groups()
            .iter()
            .filter_map(|g| g.group_id())
            .map(str::to_string)
            .collect(),
        interface_type: eni
            .interface_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_else(|| "interface".into()),
        requester_managed: eni.requester_managed().unwrap_or(false),
        tags: tags(eni.tag_set()),
        eni_id,
    })
}

pub(crate) fn instance(action: Action, i: &sdk::Instance) -> Result<Instance, Ec2Error> {
    let instance_id = req(action, i.instance_id(), "InstanceId")?.to_string();
    Ok(Instance {
        instance_type: req(
            action,
            i.instance_type().map(|t| t.as_str()),
            "InstanceType",
        )?
        .to_string(),
        private_dns_name: i
            .private_dns_name()
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        private_ip: i
            .private_ip_address()
            .map(|s| ipv4(action, s, "PrivateIpAddress"))
            .transpose()?,
        availability_zone: req(
            action,
            i.placement().and_then(|p| p.availability_zone()),
            "Placement.AvailabilityZone",
        )?
        .to_string(),
        subnet_id: i.subnet_id().unwrap_or_default().to_string(),
        vpc_id: i.vpc_id().unwrap_or_default().to_string(),
        security_group_ids: i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id())
            .map(str::to_string)
            .collect(),
        tags: tags(i.tags()),
        instance_id,
    })
}

pub(crate) fn subnet(action: Action, s: &sdk::Subnet) -> Result<Subnet, Ec2Error> {
    let subnet_id = req(action, s.subnet_id(), "SubnetId")?.to_string();
    Ok(Subnet {
        vpc_id: req(action, s.vpc_id(), "VpcId")?.to_string(),
        availability_zone: s.availability_zone().unwrap_or_default().to_string(),
        cidr_block: ipv4_net(
            action,
            req(action, s.cidr_block(), "CidrBlock")?,
            "CidrBlock",
        )?,
        available_ip_address_count: s.available_ip_address_count().unwrap_or(0).max(0) as u32,
        tags: tags(s.tags()),
        subnet_id,
    })
}

/// `InstanceTypeInfo` → [`InstanceLimits`]: ENIs on the default card, IPv4 per ENI, cards,
/// hypervisor, bare metal, vCPUs.
pub(crate) fn instance_limits(
    action: Action,
    t: &sdk::InstanceTypeInfo,
) -> Result<InstanceLimits, Ec2Error> {
    let name = req(
        action,
        t.instance_type().map(|t| t.as_str()),
        "InstanceType",
    )?
    .to_string();
    let net = t
        .network_info()
        .ok_or_else(|| invalid(action, format!("missing NetworkInfo of {name}")))?;
    let ipv4_per_eni = count(
        action,
        net.ipv4_addresses_per_interface(),
        &format!("Ipv4AddressesPerInterface of {name}"),
    )?;
    let default_network_card = net.default_network_card_index().unwrap_or(0).max(0) as u32;
    let mut network_cards = net
        .network_cards()
        .iter()
        .map(|c| {
            Ok(NetworkCard {
                index: count(
                    action,
                    c.network_card_index(),
                    &format!("NetworkCardIndex of {name}"),
                )?,
                max_enis: count(
                    action,
                    c.maximum_network_interfaces(),
                    &format!("NetworkCards.MaximumNetworkInterfaces of {name}"),
                )?,
            })
        })
        .collect::<Result<Vec<_>, Ec2Error>>()?;
    let total = net.maximum_network_interfaces();
    if network_cards.is_empty() {
        let max_enis = count(
            action,
            total,
            &format!("MaximumNetworkInterfaces of {name}"),
        )?;
        network_cards.push(NetworkCard {
            index: default_network_card,
            max_enis,
        });
    }
    network_cards.sort_by_key(|c| c.index);
    let eni_limit = network_cards
        .iter()
        .find(|c| c.index == default_network_card)
        .map(|c| c.max_enis)
        .ok_or_else(|| {
            invalid(
                action,
                format!("{name}: default network card {default_network_card} not listed"),
            )
        })?;
    Ok(InstanceLimits {
        instance_type: name,
        eni_limit,
        ipv4_per_eni,
        default_network_card,
        network_cards,
        hypervisor: match t.hypervisor() {
            Some(sdk::InstanceTypeHypervisor::Nitro) => Hypervisor::Nitro,
            Some(sdk::InstanceTypeHypervisor::Xen) => Hypervisor::Xen,
            _ => Hypervisor::Unknown,
        },
        bare_metal: t.bare_metal().unwrap_or(false),
        vcpus: t
            .v_cpu_info()
            .and_then(|v| v.default_v_cpus())
            .and_then(|n| u32::try_from(n).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Action = Action::DescribeNetworkInterfaces;

    fn eni() -> sdk::NetworkInterface {
        sdk::NetworkInterface::builder()
            .network_interface_id("eni-1")
            .mac_address("0A:00:00:00:00:01")
            .subnet_id("subnet-1")
            .vpc_id("vpc-1")
            .private_ip_address("10.0.0.10")
            .private_ip_addresses(
                sdk::NetworkInterfacePrivateIpAddress::builder()
                    .primary(true)
                    .private_ip_address("10.0.0.10")
                    .build(),
            )
            .private_ip_addresses(
                sdk::NetworkInterfacePrivateIpAddress::builder()
                    .primary(false)
                    .private_ip_address("10.0.0.11")
                    .build(),
            )
            .ipv4_prefixes(
                sdk::Ipv4PrefixSpecification::builder()
                    .ipv4_prefix("10.0.1.0/28")
                    .build(),
            )
            .attachment(
                sdk::NetworkInterfaceAttachment::builder()
                    .attachment_id("eni-attach-1")
                    .instance_id("i-1")
                    .device_index(1)
                    .network_card_index(0)
                    .status(sdk::AttachmentStatus::Attached)
                    .delete_on_termination(true)
                    .build(),
            )
            .status(sdk::NetworkInterfaceStatus::InUse)
            .tag_set(sdk::Tag::builder().key("k").value("v").build())
            .build()
    }

    #[test]
    fn eni_conversion_splits_primary_secondary_and_prefixes() {
        let e = network_interface(A, &eni()).unwrap();
        assert_eq!(e.eni_id, "eni-1");
        assert_eq!(e.mac, "0a:00:00:00:00:01");
        assert_eq!(e.primary_ip, Ipv4Addr::new(10, 0, 0, 10));
        assert_eq!(e.secondary_ips, vec![Ipv4Addr::new(10, 0, 0, 11)]);
        assert_eq!(e.prefixes, vec!["10.0.1.0/28".parse::<Ipv4Net>().unwrap()]);
        let a = e.attachment.unwrap();
        assert_eq!(
            (a.device_index, a.status.as_str(), a.delete_on_termination),
            (1, "attached", true)
        );
        assert_eq!(e.status, "in-use");
        assert_eq!(e.tags.get("k").map(String::as_str), Some("v"));
    }

    #[test]
    fn missing_fields_are_named() {
        let bad = sdk::NetworkInterface::builder()
            .network_interface_id("eni-2")
            .subnet_id("s")
            .build();
        let err = network_interface(A, &bad).unwrap_err().to_string();
        assert!(err.contains("PrivateIpAddress of eni-2"), "{err}");
        let bad_ip = sdk::NetworkInterface::builder()
            .network_interface_id("eni-3")
            .subnet_id("s")
            .private_ip_address("10.0.0.300")
            .build();
        assert!(network_interface(A, &bad_ip)
            .unwrap_err()
            .to_string()
            .contains("not an IPv4 address"));
    }

    #[test]
    fn instance_type_conversion_matches_the_table() {
        let info = sdk::InstanceTypeInfo::builder()
            .instance_type(sdk::InstanceType::from("m5.large"))
            .hypervisor(sdk::InstanceTypeHypervisor::Nitro)
            .bare_metal(false)
            .v_cpu_info(sdk::VCpuInfo::builder().default_v_cpus(2).build())
            .network_info(
                sdk::NetworkInfo::builder()
                    .maximum_network_interfaces(3)
                    .ipv4_addresses_per_interface(10)
                    .default_network_card_index(0)
                    .network_cards(
                        sdk::NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(3)
                            .build(),
                    )
                    .build(),
            )
            .build();
        let got = instance_limits(Action::DescribeInstanceTypes, &info).unwrap();
        assert_eq!(&got, vpcnet_limits::lookup("m5.large").unwrap());
    }

    #[test]
    fn instance_type_without_cards_uses_the_total() {
        let info = sdk::InstanceTypeInfo::builder()
            .instance_type(sdk::InstanceType::from("t2.micro"))
            .hypervisor(sdk::InstanceTypeHypervisor::Xen)
            .network_info(
                sdk::NetworkInfo::builder()
                    .maximum_network_interfaces(2)
                    .ipv4_addresses_per_interface(2)
                    .build(),
            )
            .build();
        let got = instance_limits(Action::DescribeInstanceTypes, &info).unwrap();
        assert_eq!(
            (got.eni_limit, got.ipv4_per_eni, got.hypervisor),
            (2, 2, Hypervisor::Xen)
        );
        assert_eq!(got.vcpus, None);
    }
}
