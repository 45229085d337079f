//! Network resource provisioning modes (`DISABLE_NETWORK_RESOURCE_PROVISIONING`,
//! `ENABLE_IMDS_ONLY_MODE`) and the two EC2 seams they put in front of the agent:
//!
//! - [`ReadOnlyEc2`] (provisioning disabled): describes go to EC2; every mutating call is
//!   refused without being sent, so nothing the agent does can create, attach, assign, tag,
//!   unassign, detach or delete anything, even by mistake.
//! - [`ImdsOnlyEc2`] (IMDS-only): no EC2 call at all. The instance's ENIs and the subnets of
//!   attached ENIs are answered from IMDS ([`network_interface`]: no tags, no attachment ID,
//!   no interface type, so no `no_manage` tag, trunk or EFA ENI can be recognised); every other
//!   action is refused without being sent.
//!
//! The core's pool does the rest ([`vpcnet_ipam::WarmConfig::provisioning`]): no plan, and a
//! clear error when every attached address is in use.

use std::sync::Arc;

use serde::Serialize;
use vpcnet_ec2::{
    Action, AddressRelease, AddressRequest, Assigned, CreateEni, Ec2Error, EniAttachment,
    NetworkInterface, Subnet, Tags,
};
use vpcnet_imds::ImdsInterface;
use vpcnet_limits::InstanceLimits;

use crate::cloud::{Ec2Api, Ec2Result, MetadataApi};

/// Whether and how the agent provisions ENIs and addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provisioning {
    /// The default: ENIs and addresses are created, attached, assigned and freed through EC2
    /// to keep the warm pool at its targets.
    #[default]
    Ec2,
    /// `DISABLE_NETWORK_RESOURCE_PROVISIONING=true`: the pool is what is attached; EC2 is
    /// only described.
    Disabled,
    /// `ENABLE_IMDS_ONLY_MODE=true`: the pool is what IMDS lists; no EC2 call at all.
    ImdsOnly,
}

impl Provisioning {
    /// The mode of the two settings (IMDS-only implies disabled provisioning, as in the VPC
    /// CNI).
    pub fn from_settings(disable_network_resource_provisioning: bool, imds_only: bool) -> Self {
        match (disable_network_resource_provisioning, imds_only) {
            (_, true) => Provisioning::ImdsOnly,
            (true, false) => Provisioning::Disabled,
            (false, false) => Provisioning::Ec2,
        }
    }

    /// Whether the agent adds and removes ENIs and addresses.
    pub fn provisions(self) -> bool {
        self == Provisioning::Ec2
    }

    /// Label for introspection, metrics and logs: `ec2`, `disabled`, `imds-only`.
    pub fn label(self) -> &'static str {
        match self {
            Provisioning::Ec2 => "ec2",
            Provisioning::Disabled => "disabled",
            Provisioning::ImdsOnly => "imds-only",
        }
    }

    /// The setting that turned provisioning off, as `NAME=true` (empty for [`Provisioning::Ec2`]).
    pub fn setting(self) -> &'static str {
        match self {
            Provisioning::Ec2 => "",
            Provisioning::Disabled => "DISABLE_NETWORK_RESOURCE_PROVISIONING=true",
            Provisioning::ImdsOnly => "ENABLE_IMDS_ONLY_MODE=true",
        }
    }

    /// The EC2 seam of this mode over the real one: itself with provisioning, read-only
    /// without. (IMDS-only mode has no real one: [`ImdsOnlyEc2`].)
    pub fn wrap(self, ec2: Arc<dyn Ec2Api>) -> Arc<dyn Ec2Api> {
        match self {
            Provisioning::Ec2 => ec2,
            Provisioning::Disabled | Provisioning::ImdsOnly => Arc::new(ReadOnlyEc2 { ec2 }),
        }
    }
}

/// The error of a call a mode does not make: not sent, not retryable.
fn not_sent(action: Action, mode: Provisioning) -> Ec2Error {
    let why = match mode {
        Provisioning::ImdsOnly => "the agent makes no EC2 call at all",
        _ => "the agent creates, attaches, assigns, tags and frees nothing",
    };
    Ec2Error::Request {
        action,
        message: format!("not sent: {} ({why})", mode.setting()),
        source: None,
    }
}

fn refuse<'a, T: Send + 'a>(action: Action, mode: Provisioning) -> Ec2Result<'a, T> {
    Box::pin(async move { Err(not_sent(action, mode)) })
}

/// EC2 with every mutating action refused (provisioning disabled).
pub struct ReadOnlyEc2 {
    ec2: Arc<dyn Ec2Api>,
}

/// The mutating actions, refused the same way by both seams.
macro_rules! refuse_mutations {
    ($mode:expr) => {
        fn create_network_interface<'a>(
            &'a self,
            _req: &'a CreateEni,
        ) -> Ec2Result<'a, NetworkInterface> {
            refuse(Action::CreateNetworkInterface, $mode)
        }
        fn attach_network_interface<'a>(
            &'a self,
            _eni_id: &'a str,
            _instance_id: &'a str,
            _device_index: u32,
            _network_card_index: u32,
        ) -> Ec2Result<'a, String> {
            refuse(Action::AttachNetworkInterface, $mode)
        }
        fn set_delete_on_termination<'a>(
            &'a self,
            _eni_id: &'a str,
            _attachment_id: &'a str,
            _delete: bool,
        ) -> Ec2Result<'a, ()> {
            refuse(Action::ModifyNetworkInterfaceAttribute, $mode)
        }
        fn detach_network_interface<'a>(
            &'a self,
            _attachment_id: &'a str,
            _force: bool,
        ) -> Ec2Result<'a, ()> {
            refuse(Action::DetachNetworkInterface, $mode)
        }
        fn delete_network_interface<'a>(&'a self, _eni_id: &'a str) -> Ec2Result<'a, ()> {
            refuse(Action::DeleteNetworkInterface, $mode)
        }
        fn assign_private_ips<'a>(
            &'a self,
            _eni_id: &'a str,
            _req: AddressRequest,
        ) -> Ec2Result<'a, Assigned> {
            refuse(Action::AssignPrivateIpAddresses, $mode)
        }
        fn unassign_private_ips<'a>(
            &'a self,
            _eni_id: &'a str,
            _release: &'a AddressRelease,
        ) -> Ec2Result<'a, ()> {
            refuse(Action::UnassignPrivateIpAddresses, $mode)
        }
        fn create_tags<'a>(
            &'a self,
            _resource_ids: &'a [String],
            _tags: &'a Tags,
        ) -> Ec2Result<'a, ()> {
            refuse(Action::CreateTags, $mode)
        }
    };
}

impl Ec2Api for ReadOnlyEc2 {
    fn describe_instance_network_interfaces<'a>(
        &'a self,
        instance_id: &'a str,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        self.ec2.describe_instance_network_interfaces(instance_id)
    }
    fn describe_network_interfaces_by_id<'a>(
        &'a self,
        eni_ids: &'a [String],
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        self.ec2.describe_network_interfaces_by_id(eni_ids)
    }
    fn describe_network_interfaces_by_tag<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        status: Option<&'a str>,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        self.ec2
            .describe_network_interfaces_by_tag(key, value, status)
    }
    fn describe_subnets<'a>(&'a self, subnet_ids: &'a [String]) -> Ec2Result<'a, Vec<Subnet>> {
        self.ec2.describe_subnets(subnet_ids)
    }
    fn describe_zone_subnets<'a>(
        &'a self,
        vpc_id: &'a str,
        zone: &'a str,
    ) -> Ec2Result<'a, Vec<Subnet>> {
        self.ec2.describe_zone_subnets(vpc_id, zone)
    }
    fn describe_instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> Ec2Result<'a, Vec<InstanceLimits>> {
        self.ec2.describe_instance_types(types)
    }
    refuse_mutations!(Provisioning::Disabled);
}

/// The EC2 seam answered from IMDS (IMDS-only mode): no EC2 call at all.
pub struct ImdsOnlyEc2 {
    imds: Arc<dyn MetadataApi>,
}

impl ImdsOnlyEc2 {
    pub fn new(imds: Arc<dyn MetadataApi>) -> Self {
        ImdsOnlyEc2 { imds }
    }
}

/// The error of a describe IMDS cannot answer.
fn imds_failed(action: Action, e: vpcnet_imds::ImdsError) -> Ec2Error {
    Ec2Error::Request {
        action,
        message: format!(
            "ENABLE_IMDS_ONLY_MODE=true: answered from IMDS, which failed: {}",
            crate::errors::chain(&e)
        ),
        source: None,
    }
}

/// IMDS's ENI as EC2 would describe it, with what IMDS cannot tell left empty: no tags (so
/// no `node.k8s.amazonaws.com/no_manage`), no attachment ID, no interface type (trunk and
/// EFA ENIs look like plain ones), not requester-managed. `local-ipv4s` lists the ENI's
/// primary address first.
pub fn network_interface(i: &ImdsInterface) -> Option<NetworkInterface> {
    let (primary_ip, secondary) = i.local_ipv4s.split_first()?;
    Some(NetworkInterface {
        eni_id: i.interface_id.clone(),
        mac: i.mac.to_ascii_lowercase(),
        description: String::new(),
        subnet_id: i.subnet_id.clone(),
        vpc_id: i.vpc_id.clone(),
        availability_zone: String::new(),
        primary_ip: *primary_ip,
        secondary_ips: secondary.to_vec(),
        prefixes: i.ipv4_prefixes.clone(),
        attachment: Some(EniAttachment {
            attachment_id: String::new(),
            instance_id: None,
            device_index: i.device_number,
            network_card_index: i.network_card,
            status: "attached".into(),
            delete_on_termination: false,
        }),
        status: "in-use".into(),
        security_group_ids: i.security_group_ids.clone(),
        interface_type: String::new(),
        requester_managed: false,
        tags: Tags::new(),
    })
}

/// The subnets of `ids` that an attached ENI is in, from IMDS (CIDR and VPC; no tags, no
/// free-address count).
pub fn subnets_of(interfaces: &[ImdsInterface], ids: &[String]) -> Vec<Subnet> {
    let mut out: Vec<Subnet> = Vec::new();
    for i in interfaces {
        if ids.contains(&i.subnet_id) && !out.iter().any(|s| s.subnet_id == i.subnet_id) {
            out.push(Subnet {
                subnet_id: i.subnet_id.clone(),
                vpc_id: i.vpc_id.clone(),
                availability_zone: String::new(),
                cidr_block: i.subnet_cidr,
                available_ip_address_count: 0,
                tags: Tags::new(),
            });
        }
    }
    out
}

impl Ec2Api for ImdsOnlyEc2 {
    fn describe_instance_network_interfaces<'a>(
        &'a self,
        _instance_id: &'a str,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(async move {
            let interfaces = self
                .imds
                .interfaces()
                .await
                .map_err(|e| imds_failed(Action::DescribeNetworkInterfaces, e))?;
            Ok(interfaces.iter().filter_map(network_interface).collect())
        })
    }
    fn describe_network_interfaces_by_id<'a>(
        &'a self,
        eni_ids: &'a [String],
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(async move {
            let all = self.describe_instance_network_interfaces("").await?;
            Ok(all
                .into_iter()
                .filter(|n| eni_ids.contains(&n.eni_id))
                .collect())
        })
    }
    fn describe_network_interfaces_by_tag<'a>(
        &'a self,
        _key: &'a str,
        _value: &'a str,
        _status: Option<&'a str>,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        refuse(Action::DescribeNetworkInterfaces, Provisioning::ImdsOnly)
    }
    fn describe_subnets<'a>(&'a self, subnet_ids: &'a [String]) -> Ec2Result<'a, Vec<Subnet>> {
        Box::pin(async move {
            let interfaces = self
                .imds
                .interfaces()
                .await
                .map_err(|e| imds_failed(Action::DescribeSubnets, e))?;
            Ok(subnets_of(&interfaces, subnet_ids))
        })
    }
    fn describe_zone_subnets<'a>(
        &'a self,
        _vpc_id: &'a str,
        _zone: &'a str,
    ) -> Ec2Result<'a, Vec<Subnet>> {
        refuse(Action::DescribeSubnets, Provisioning::ImdsOnly)
    }
    fn describe_instance_types<'a>(
        &'a self,
        _types: &'a [String],
    ) -> Ec2Result<'a, Vec<InstanceLimits>> {
        refuse(Action::DescribeInstanceTypes, Provisioning::ImdsOnly)
    }
    refuse_mutations!(Provisioning::ImdsOnly);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn imds_eni(device: u32, card: u32, ips: &[[u8; 4]], prefixes: &[&str]) -> ImdsInterface {
        ImdsInterface {
            mac: format!("0A:00:00:00:00:{device:02X}"),
            device_number: device,
            network_card: card,
            interface_id: format!("eni-{device}"),
            subnet_id: format!("subnet-{device}"),
            subnet_cidr: format!("10.0.{device}.0/24").parse().unwrap(),
            vpc_id: "vpc-1".into(),
            vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
            security_group_ids: vec!["sg-1".into()],
            local_ipv4s: ips.iter().map(|o| Ipv4Addr::from(*o)).collect(),
            ipv4_prefixes: prefixes.iter().map(|p| p.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn the_mode_of_the_two_settings() {
        use Provisioning::*;
        assert_eq!(Provisioning::from_settings(false, false), Ec2);
        assert_eq!(Provisioning::from_settings(true, false), Disabled);
        assert_eq!(Provisioning::from_settings(false, true), ImdsOnly);
        assert_eq!(Provisioning::from_settings(true, true), ImdsOnly);
        assert!(Ec2.provisions() && !Disabled.provisions() && !ImdsOnly.provisions());
        assert_eq!(
            [Ec2.label(), Disabled.label(), ImdsOnly.label()],
            ["ec2", "disabled", "imds-only"]
        );
    }

    #[test]
    fn an_imds_eni_reads_as_ec2_would_describe_it_without_what_imds_cannot_tell() {
        let i = imds_eni(
            1,
            0,
            &[[10, 0, 1, 5], [10, 0, 1, 6], [10, 0, 1, 7]],
            &["10.0.1.32/28"],
        );
        let n = network_interface(&i).unwrap();
        assert_eq!(n.eni_id, "eni-1");
        assert_eq!(n.mac, "0a:00:00:00:00:01");
        assert_eq!(n.primary_ip, Ipv4Addr::new(10, 0, 1, 5));
        assert_eq!(
            n.secondary_ips,
            [Ipv4Addr::new(10, 0, 1, 6), Ipv4Addr::new(10, 0, 1, 7)]
        );
        assert_eq!(n.prefixes, ["10.0.1.32/28".parse().unwrap()]);
        let a = n.attachment.as_ref().unwrap();
        assert_eq!((a.device_index, a.network_card_index), (1, 0));
        assert!(n.tags.is_empty() && n.interface_type.is_empty() && !n.requester_managed);
        assert!(crate::reconciler::manageable(&n, &[0]));
        // An ENI on another network card is not the agent's, as with EC2's answer, unless
        // ENABLE_MULTI_NIC manages that card.
        let card1 = network_interface(&imds_eni(2, 1, &[[10, 0, 2, 5]], &[])).unwrap();
        assert!(!crate::reconciler::manageable(&card1, &[0]));
        assert!(crate::reconciler::manageable(&card1, &[0, 1]));
        // No address at all (IMDS mid-attach): not an ENI yet.
        assert_eq!(network_interface(&imds_eni(3, 0, &[], &[])), None);
    }

    #[test]
    fn subnets_come_from_the_attached_enis() {
        let enis = [
            imds_eni(0, 0, &[[10, 0, 0, 5]], &[]),
            imds_eni(1, 0, &[[10, 0, 1, 5]], &[]),
        ];
        let got = subnets_of(&enis, &["subnet-1".into(), "subnet-9".into()]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].subnet_id, "subnet-1");
        assert_eq!(got[0].cidr_block, "10.0.1.0/24".parse().unwrap());
        assert!(got[0].tags.is_empty());
    }

    struct NoImds;
    impl MetadataApi for NoImds {
        fn instance_id(&self) -> crate::cloud::ImdsResult<'_, String> {
            unreachable!()
        }
        fn instance_type(&self) -> crate::cloud::ImdsResult<'_, String> {
            unreachable!()
        }
        fn mac(&self) -> crate::cloud::ImdsResult<'_, String> {
            unreachable!()
        }
        fn region(&self) -> crate::cloud::ImdsResult<'_, String> {
            unreachable!()
        }
        fn availability_zone(&self) -> crate::cloud::ImdsResult<'_, String> {
            unreachable!()
        }
        fn local_ipv4(&self) -> crate::cloud::ImdsResult<'_, Ipv4Addr> {
            unreachable!()
        }
        fn interface<'a>(&'a self, _mac: &'a str) -> crate::cloud::ImdsResult<'a, ImdsInterface> {
            unreachable!()
        }
        fn interfaces(&self) -> crate::cloud::ImdsResult<'_, Vec<ImdsInterface>> {
            unreachable!()
        }
    }

    #[tokio::test]
    async fn mutating_calls_are_refused_without_being_sent() {
        // Both seams over an IMDS (and, read-only, an EC2) that must never be reached.
        let imds: Arc<dyn MetadataApi> = Arc::new(NoImds);
        let inner: Arc<dyn Ec2Api> = Arc::new(ImdsOnlyEc2 { imds: imds.clone() });
        for (mode, ec2) in [
            (
                Provisioning::Disabled,
                Provisioning::Disabled.wrap(inner.clone()),
            ),
            (Provisioning::ImdsOnly, inner.clone()),
        ] {
            let e = ec2
                .assign_private_ips("eni-1", AddressRequest::SecondaryIps(2))
                .await
                .unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(mode.setting()), "{msg}");
            assert!(msg.contains("AssignPrivateIpAddresses"), "{msg}");
            assert!(!e.is_retryable());
            assert!(ec2.delete_network_interface("eni-1").await.is_err());
            assert!(ec2
                .create_tags(&["eni-1".to_string()], &Tags::new())
                .await
                .is_err());
            assert!(ec2
                .attach_network_interface("eni-1", "i-1", 1, 0)
                .await
                .is_err());
        }
    }
}
