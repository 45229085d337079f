//! The EC2 actions vpcnet needs, as typed async methods on [`Ec2`]. Every method is sent by
//! `send.rs` under the client's [`crate::CallSettings`] (token bucket, deadline, retries) on
//! the shared call loop ([`vpcnet_aws::Caller`]; paginated describes through
//! [`vpcnet_aws::Caller::pages`]) and reports to its [`crate::Ec2Observer`].

use std::net::Ipv4Addr;

use aws_sdk_ec2::types as sdk;
use vpcnet_limits::InstanceLimits;

use crate::convert::{self, invalid};
use crate::{
    Action, AddressRelease, AddressRequest, Assigned, CreateEni, Ec2, Ec2Error, Filter, Instance,
    NetworkInterface, Subnet, Tags,
};

/// Instance types per `DescribeInstanceTypes` request (EC2's maximum is 100).
const TYPES_PER_REQUEST: usize = 100;

fn sdk_filters(filters: &[Filter]) -> Vec<sdk::Filter> {
    filters
        .iter()
        .map(|f| {
            sdk::Filter::builder()
                .name(&f.name)
                .set_values(Some(f.values.clone()))
                .build()
        })
        .collect()
}

fn sdk_tags(tags: &Tags) -> Vec<sdk::Tag> {
    tags.iter()
        .map(|(k, v)| sdk::Tag::builder().key(k).value(v).build())
        .collect()
}

fn count_i32(action: Action, n: u32, what: &str) -> Result<i32, Ec2Error> {
    i32::try_from(n).map_err(|e| Ec2Error::Request {
        action,
        message: format!("{what} {n} is too large"),
        source: Some(std::sync::Arc::new(e)),
    })
}

fn owned<S: AsRef<str>>(v: &[S]) -> Vec<String> {
    v.iter().map(|s| s.as_ref().to_string()).collect()
}

fn random_token() -> String {
    use rand::Rng;
    let n: u128 = rand::rng().random();
    format!("vpcnet-{n:032x}")
}

impl Ec2 {
    /// `DescribeInstances` for one instance: type, private DNS name and IP, zone, subnet,
    /// VPC, security groups, tags.
    ///
    /// Errors: `InvalidInstanceID.NotFound` ([`Ec2Error::is_not_found`]), transport/timeout.
    pub async fn describe_instance(&self, instance_id: &str) -> Result<Instance, Ec2Error> {
        let action = Action::DescribeInstances;
        let out = self
            .send(action, || {
                self.client
                    .describe_instances()
                    .instance_ids(instance_id)
                    .send()
            })
            .await?;
        let found = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find(|i| i.instance_id() == Some(instance_id))
            .ok_or_else(|| invalid(action, format!("instance {instance_id} not in the answer")))?;
        convert::instance(action, found)
    }

    /// `DescribeInstanceTypes` for `types` (any number; sent in batches of 100, paginated),
    /// converted into [`InstanceLimits`]. Types EC2 does not know are simply absent from the
    /// answer, or fail with `InvalidInstanceType`.
    pub async fn describe_instance_types<S: AsRef<str>>(
        &self,
        types: &[S],
    ) -> Result<Vec<InstanceLimits>, Ec2Error> {
        let action = Action::DescribeInstanceTypes;
        let mut all = Vec::new();
        for chunk in types.chunks(TYPES_PER_REQUEST) {
            let wanted: Vec<sdk::InstanceType> = chunk
                .iter()
                .map(|t| sdk::InstanceType::from(t.as_ref()))
                .collect();
            let wanted = &wanted;
            let page = self
                .pages(
                    action,
                    |token| {
                        self.client
                            .describe_instance_types()
                            .set_instance_types(Some(wanted.clone()))
                            .set_next_token(token)
                            .send()
                    },
                    |out, items| {
                        for t in out.instance_types() {
                            items.push(convert::instance_limits(action, t)?);
                        }
                        Ok(out.next_token().map(str::to_string))
                    },
                )
                .await?;
            all.extend(page);
        }
        Ok(all)
    }

    /// `DescribeSubnets` for `subnet_ids`.
    pub async fn describe_subnets<S: AsRef<str>>(
        &self,
        subnet_ids: &[S],
    ) -> Result<Vec<Subnet>, Ec2Error> {
        let action = Action::DescribeSubnets;
        let subnet_ids = owned(subnet_ids);
        let out = self
            .send(action, || {
                self.client
                    .describe_subnets()
                    .set_subnet_ids(Some(subnet_ids.clone()))
                    .send()
            })
            .await?;
        out.subnets()
            .iter()
            .map(|s| convert::subnet(action, s))
            .collect()
    }

    /// `DescribeSubnets` of the subnets of `vpc_id` in availability zone `zone`, every page
    /// (subnet discovery, as the VPC CNI lists them: filters `vpc-id` and
    /// `availability-zone`).
    pub async fn describe_zone_subnets(
        &self,
        vpc_id: &str,
        zone: &str,
    ) -> Result<Vec<Subnet>, Ec2Error> {
        self.describe_subnets_where(&[
            Filter::new("vpc-id", [vpc_id]),
            Filter::new("availability-zone", [zone]),
        ])
        .await
    }

    /// `DescribeSubnets` of every subnet of `vpc_id`, every page (filter `vpc-id`; `vpcnet
    /// plan --vpc-id`).
    pub async fn describe_vpc_subnets(&self, vpc_id: &str) -> Result<Vec<Subnet>, Ec2Error> {
        self.describe_subnets_where(&[Filter::new("vpc-id", [vpc_id])])
            .await
    }

    /// `DescribeSubnets` with `filters`, every page.
    async fn describe_subnets_where(&self, filters: &[Filter]) -> Result<Vec<Subnet>, Ec2Error> {
        let action = Action::DescribeSubnets;
        let filters = sdk_filters(filters);
        let filters = &filters;
        self.pages(
            action,
            |token| {
                self.client
                    .describe_subnets()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(token)
                    .send()
            },
            |out, items| {
                for s in out.subnets() {
                    items.push(convert::subnet(action, s)?);
                }
                Ok(out.next_token().map(str::to_string))
            },
        )
        .await
    }

    /// `DescribeSubnets` for one subnet (CIDR, zone, VPC, free addresses).
    ///
    /// Errors: `InvalidSubnetID.NotFound` ([`Ec2Error::is_not_found`]).
    pub async fn describe_subnet(&self, subnet_id: &str) -> Result<Subnet, Ec2Error> {
        self.describe_subnets(&[subnet_id])
            .await?
            .into_iter()
            .find(|s| s.subnet_id == subnet_id)
            .ok_or_else(|| {
                invalid(
                    Action::DescribeSubnets,
                    format!("subnet {subnet_id} not in the answer"),
                )
            })
    }

    /// `DescribeNetworkInterfaces` with `filters`, following every page
    /// ([`crate::CallSettings::describe_page_size`] per page).
    pub async fn describe_network_interfaces(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<NetworkInterface>, Ec2Error> {
        let action = Action::DescribeNetworkInterfaces;
        let filters = sdk_filters(filters);
        // EC2 accepts MaxResults 5..=1000.
        let page_size = self.caller.settings().describe_page_size.clamp(5, 1000) as i32;
        let filters = &filters;
        self.pages(
            action,
            |token| {
                self.client
                    .describe_network_interfaces()
                    .set_filters(Some(filters.clone()))
                    .max_results(page_size)
                    .set_next_token(token)
                    .send()
            },
            |out, items| {
                for e in out.network_interfaces() {
                    items.push(convert::network_interface(action, e)?);
                }
                Ok(out.next_token().map(str::to_string))
            },
        )
        .await
    }

    /// Every ENI attached to `instance_id` (filter `attachment.instance-id`), sorted by
    /// network card then device index. The startup's one batched describe.
    pub async fn describe_instance_network_interfaces(
        &self,
        instance_id: &str,
    ) -> Result<Vec<NetworkInterface>, Ec2Error> {
        let mut enis = self
            .describe_network_interfaces(&[Filter::attached_to(instance_id)])
            .await?;
        enis.sort_by_key(|e| {
            e.attachment
                .as_ref()
                .map(|a| (a.network_card_index, a.device_index))
        });
        Ok(enis)
    }

    /// ENIs carrying tag `key` = `value`, optionally only those in `status` (e.g. `available`
    /// = detached, for leak sweeps).
    pub async fn describe_network_interfaces_by_tag(
        &self,
        key: &str,
        value: &str,
        status: Option<&str>,
    ) -> Result<Vec<NetworkInterface>, Ec2Error> {
        let mut filters = vec![Filter::tag(key, value)];
        filters.extend(status.map(Filter::status));
        self.describe_network_interfaces(&filters).await
    }

    /// ENIs whose description matches `pattern` (`*` wildcards), optionally only in `status`.
    pub async fn describe_network_interfaces_by_description(
        &self,
        pattern: &str,
        status: Option<&str>,
    ) -> Result<Vec<NetworkInterface>, Ec2Error> {
        let mut filters = vec![Filter::description(pattern)];
        filters.extend(status.map(Filter::status));
        self.describe_network_interfaces(&filters).await
    }

    /// `DescribeNetworkInterfaces` by ID (no pagination: EC2 forbids it with IDs).
    ///
    /// Errors: `InvalidNetworkInterfaceID.NotFound` if any ID is unknown.
    pub async fn describe_network_interfaces_by_id<S: AsRef<str>>(
        &self,
        eni_ids: &[S],
    ) -> Result<Vec<NetworkInterface>, Ec2Error> {
        let action = Action::DescribeNetworkInterfaces;
        let eni_ids = owned(eni_ids);
        let out = self
            .send(action, || {
                self.client
                    .describe_network_interfaces()
                    .set_network_interface_ids(Some(eni_ids.clone()))
                    .send()
            })
            .await?;
        out.network_interfaces()
            .iter()
            .map(|e| convert::network_interface(action, e))
            .collect()
    }

    /// `CreateNetworkInterface` in `req.subnet_id` with security groups, description, tags
    /// (as a `TagSpecification`) and optionally secondary IPs or /28 prefixes. A `ClientToken`
    /// makes retries idempotent.
    ///
    /// Errors: `InsufficientFreeAddressesInSubnet` / `InsufficientCidrBlocks`
    /// ([`Ec2Error::is_insufficient_addresses`]), `InvalidSubnetID.NotFound`,
    /// `InvalidGroup.NotFound`, `PrivateIpAddressLimitExceeded`.
    pub async fn create_network_interface(
        &self,
        req: &CreateEni,
    ) -> Result<NetworkInterface, Ec2Error> {
        let action = Action::CreateNetworkInterface;
        let token = req.client_token.clone().unwrap_or_else(random_token);
        let (ips, prefixes) = match req.addresses {
            Some(AddressRequest::SecondaryIps(n)) if n > 0 => {
                (Some(count_i32(action, n, "secondary IP count")?), None)
            }
            Some(AddressRequest::Prefixes(n)) if n > 0 => {
                (None, Some(count_i32(action, n, "prefix count")?))
            }
            _ => (None, None),
        };
        let tag_spec = (!req.tags.is_empty()).then(|| {
            sdk::TagSpecification::builder()
                .resource_type(sdk::ResourceType::NetworkInterface)
                .set_tags(Some(sdk_tags(&req.tags)))
                .build()
        });
        let out = self
            .send(action, || {
                self.client
                    .create_network_interface()
                    .subnet_id(&req.subnet_id)
                    .set_groups(
                        (!req.security_group_ids.is_empty())
                            .then(|| req.security_group_ids.clone()),
                    )
                    .description(&req.description)
                    .set_tag_specifications(tag_spec.clone().map(|t| vec![t]))
                    .set_secondary_private_ip_address_count(ips)
                    .set_ipv4_prefix_count(prefixes)
                    .client_token(&token)
                    .send()
            })
            .await?;
        let eni = out
            .network_interface()
            .ok_or_else(|| invalid(action, "missing NetworkInterface"))?;
        convert::network_interface(action, eni)
    }

    /// `AttachNetworkInterface` at `device_index` on `network_card_index`; returns the
    /// attachment ID (`eni-attach-...`).
    ///
    /// Errors: `AttachmentLimitExceeded` ([`Ec2Error::is_limit`]), `InvalidParameterValue`
    /// (device index in use), `InvalidNetworkInterfaceID.NotFound`.
    pub async fn attach_network_interface(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
        network_card_index: u32,
    ) -> Result<String, Ec2Error> {
        let action = Action::AttachNetworkInterface;
        let device = count_i32(action, device_index, "device index")?;
        let card = count_i32(action, network_card_index, "network card index")?;
        let out = self
            .send(action, || {
                self.client
                    .attach_network_interface()
                    .network_interface_id(eni_id)
                    .instance_id(instance_id)
                    .device_index(device)
                    .network_card_index(card)
                    .send()
            })
            .await?;
        out.attachment_id()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| invalid(action, "missing AttachmentId"))
    }

    /// `ModifyNetworkInterfaceAttribute` setting the attachment's `DeleteOnTermination`.
    pub async fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
        delete: bool,
    ) -> Result<(), Ec2Error> {
        let action = Action::ModifyNetworkInterfaceAttribute;
        let change = sdk::NetworkInterfaceAttachmentChanges::builder()
            .attachment_id(attachment_id)
            .delete_on_termination(delete)
            .build();
        self.send(action, || {
            self.client
                .modify_network_interface_attribute()
                .network_interface_id(eni_id)
                .attachment(change.clone())
                .send()
        })
        .await?;
        Ok(())
    }

    /// `DetachNetworkInterface` (`force` detaches even if the OS has not released it).
    ///
    /// Errors: `InvalidAttachmentID.NotFound` when already detached.
    pub async fn detach_network_interface(
        &self,
        attachment_id: &str,
        force: bool,
    ) -> Result<(), Ec2Error> {
        let action = Action::DetachNetworkInterface;
        self.send(action, || {
            self.client
                .detach_network_interface()
                .attachment_id(attachment_id)
                .force(force)
                .send()
        })
        .await?;
        Ok(())
    }

    /// `DeleteNetworkInterface`.
    ///
    /// Errors: `InvalidNetworkInterfaceID.NotFound` (already deleted), `InvalidParameterValue`
    /// / `IncorrectState` while still attached or detaching.
    pub async fn delete_network_interface(&self, eni_id: &str) -> Result<(), Ec2Error> {
        let action = Action::DeleteNetworkInterface;
        self.send(action, || {
            self.client
                .delete_network_interface()
                .network_interface_id(eni_id)
                .send()
        })
        .await?;
        Ok(())
    }

    /// `AssignPrivateIpAddresses`: `n` secondary IPs or `n` /28 prefixes; returns what EC2
    /// assigned. A retry after a lost answer may assign twice: reconcile by describing.
    ///
    /// Errors: `PrivateIpAddressLimitExceeded` ([`Ec2Error::is_limit`]),
    /// `InsufficientFreeAddressesInSubnet` / `InsufficientCidrBlocks`.
    pub async fn assign_private_ips(
        &self,
        eni_id: &str,
        req: AddressRequest,
    ) -> Result<Assigned, Ec2Error> {
        let action = Action::AssignPrivateIpAddresses;
        let (ips, prefixes) = match req {
            AddressRequest::SecondaryIps(n) => {
                (Some(count_i32(action, n, "secondary IP count")?), None)
            }
            AddressRequest::Prefixes(n) => (None, Some(count_i32(action, n, "prefix count")?)),
        };
        let out = self
            .send(action, || {
                self.client
                    .assign_private_ip_addresses()
                    .network_interface_id(eni_id)
                    .set_secondary_private_ip_address_count(ips)
                    .set_ipv4_prefix_count(prefixes)
                    .send()
            })
            .await?;
        Ok(Assigned {
            ips: out
                .assigned_private_ip_addresses()
                .iter()
                .filter_map(|a| a.private_ip_address())
                .map(|s| convert::ipv4(action, s, "AssignedPrivateIpAddresses"))
                .collect::<Result<_, _>>()?,
            prefixes: out
                .assigned_ipv4_prefixes()
                .iter()
                .filter_map(|p| p.ipv4_prefix())
                .map(|s| convert::ipv4_net(action, s, "AssignedIpv4Prefixes"))
                .collect::<Result<_, _>>()?,
        })
    }

    /// `UnassignPrivateIpAddresses` for the given secondary IPs or prefixes.
    ///
    /// Errors: `InvalidParameterValue` when an address is not on the ENI.
    pub async fn unassign_private_ips(
        &self,
        eni_id: &str,
        release: &AddressRelease,
    ) -> Result<(), Ec2Error> {
        let action = Action::UnassignPrivateIpAddresses;
        let (ips, prefixes): (Option<Vec<String>>, Option<Vec<String>>) = match release {
            AddressRelease::SecondaryIps(v) => {
                (Some(v.iter().map(Ipv4Addr::to_string).collect()), None)
            }
            AddressRelease::Prefixes(v) => (None, Some(v.iter().map(|p| p.to_string()).collect())),
        };
        self.send(action, || {
            self.client
                .unassign_private_ip_addresses()
                .network_interface_id(eni_id)
                .set_private_ip_addresses(ips.clone())
                .set_ipv4_prefixes(prefixes.clone())
                .send()
        })
        .await?;
        Ok(())
    }

    /// `CreateTags` on `resource_ids` (ENIs, instances, ...).
    pub async fn create_tags<S: AsRef<str>>(
        &self,
        resource_ids: &[S],
        tags: &Tags,
    ) -> Result<(), Ec2Error> {
        let action = Action::CreateTags;
        let resource_ids = owned(resource_ids);
        let tags = sdk_tags(tags);
        self.send(action, || {
            self.client
                .create_tags()
                .set_resources(Some(resource_ids.clone()))
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await?;
        Ok(())
    }
}
