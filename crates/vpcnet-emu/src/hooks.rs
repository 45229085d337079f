//! Hooks the lab implements to mirror EC2's network changes into its VPC fabric.
//!
//! The emulator calls a [`FabricHooks`] implementation after each state change, outside its
//! internal state lock, in the order the changes happened (mutations are serialized while their
//! hooks run, so the fabric never sees an unassign before the matching assign). The EC2 call that
//! caused a change answers only after its hooks have returned, so when the agent sees success the
//! fabric is already programmed — except for an attachment with an injected attach latency, whose
//! [`FabricHooks::eni_attached`] runs when the attachment completes (status `attached`).

use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;

use ipnet::{Ipv4Net, Ipv6Net};
use serde::Serialize;

/// The future a hook returns; hooks may await (e.g. netlink requests).
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// An ENI became attached (EC2 attachment status `attached`) to an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EniAttached {
    /// `eni-...`
    pub eni_id: String,
    /// The ENI's MAC address, `02:xx:xx:xx:xx:xx`, unique in the emulator.
    pub mac: String,
    /// `i-...`
    pub instance_id: String,
    /// EC2 `DeviceIndex` (0 = the instance's primary ENI).
    pub device_index: u32,
    /// EC2 `NetworkCardIndex`.
    pub network_card: u32,
    pub subnet_id: String,
    /// The subnet's IPv4 CIDR.
    pub subnet_cidr: Ipv4Net,
    /// The subnet's router: network address + 1.
    pub gateway: Ipv4Addr,
    /// The ENI's primary private IPv4 address.
    pub primary_ip: Ipv4Addr,
    /// Secondary addresses and prefixes already on the ENI at attach time, as /32s and /28s.
    pub secondary: Vec<Ipv4Net>,
    /// IPv6 addresses (/128) and prefixes (/80) already on the ENI at attach time.
    #[serde(default)]
    pub ipv6: Vec<Ipv6Net>,
}

/// An ENI was detached from an instance (by the API, behind the agent's back, or by
/// terminating the instance). Only reported for attachments that were reported attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EniDetached {
    pub eni_id: String,
    pub mac: String,
    pub instance_id: String,
    pub device_index: u32,
    pub network_card: u32,
}

/// Secondary private IPv4 addresses (/32) or prefixes (/28), or IPv6 addresses (/128) or
/// prefixes (/80), were assigned to, or unassigned from, an ENI. Reported whether or not the ENI is attached (then `instance_id` is `None`);
/// deleting an ENI that still holds secondary addresses reports them unassigned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AddressesChanged {
    pub eni_id: String,
    /// The instance the ENI is attached to at the time of the change, if any.
    pub instance_id: Option<String>,
    /// /32 host addresses and /28 prefixes, in the order EC2 assigned them.
    pub cidrs: Vec<Ipv4Net>,
    /// IPv6 /128 host addresses and /80 prefixes (AssignIpv6Addresses and the like), in the
    /// order EC2 assigned them; empty for an IPv4 change.
    #[serde(default)]
    pub ipv6: Vec<Ipv6Net>,
}

/// One security group's ingress rules (sources are CIDRs or other groups, see
/// [`crate::model::Source`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupIngress {
    /// `sg-...`
    pub group_id: String,
    pub rules: Vec<crate::model::IngressRule>,
}

/// One ENI as security groups see it: its `addresses` (primary and secondary IPs as /32,
/// prefixes as /28) and its `groups`. Traffic to those addresses is admitted when it belongs to
/// a connection the ENI's side opened or matches a rule of one of the groups; a rule whose
/// source is a group matches the addresses of every ENI carrying that group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EniIngress {
    pub eni_id: String,
    pub addresses: Vec<Ipv4Net>,
    pub groups: Vec<String>,
}

/// The security-group view changed (a rule was authorized or revoked, a group created, an ENI
/// created or deleted, its groups or addresses changed): the whole new view, sorted by ID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IngressRulesChanged {
    pub groups: Vec<GroupIngress>,
    pub enis: Vec<EniIngress>,
}

/// One change the fabric must mirror, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum FabricEvent {
    EniAttached(EniAttached),
    EniDetached(EniDetached),
    AddressesAssigned(AddressesChanged),
    AddressesUnassigned(AddressesChanged),
    IngressRulesChanged(IngressRulesChanged),
}

/// Callbacks for the lab's VPC fabric. Every method has a no-op default.
///
/// Called after the state change, outside the emulator's state lock, one at a time and in the
/// order the changes happened. A hook must not call back into mutating methods of the same
/// [`crate::Emulator`] (that would wait on the mutation in progress); reads are fine.
pub trait FabricHooks: Send + Sync + 'static {
    /// An ENI is attached: create its interface (with `mac`) in the instance's namespace and
    /// route `primary_ip` and `secondary` to it.
    fn eni_attached(&self, _ev: EniAttached) -> HookFuture<'_> {
        Box::pin(async {})
    }
    /// An ENI is detached: remove its interface and every route to its addresses.
    fn eni_detached(&self, _ev: EniDetached) -> HookFuture<'_> {
        Box::pin(async {})
    }
    /// Secondary IPs or prefixes were assigned (AssignPrivateIpAddresses, or
    /// CreateNetworkInterface with secondary addresses).
    fn addresses_assigned(&self, _ev: AddressesChanged) -> HookFuture<'_> {
        Box::pin(async {})
    }
    /// Secondary IPs or prefixes were unassigned (UnassignPrivateIpAddresses, the control API,
    /// reassignment to another ENI, or deletion of the ENI).
    fn addresses_unassigned(&self, _ev: AddressesChanged) -> HookFuture<'_> {
        Box::pin(async {})
    }
    /// The security-group view changed: enforce `ev` (replaces the previous view whole).
    /// Delivered after the address and attachment events of the same change.
    fn ingress_rules_changed(&self, _ev: IngressRulesChanged) -> HookFuture<'_> {
        Box::pin(async {})
    }
}

/// Hooks that do nothing (the default).
pub struct NoHooks;
impl FabricHooks for NoHooks {}

pub(crate) async fn deliver(hooks: &dyn FabricHooks, ev: FabricEvent) {
    match ev {
        FabricEvent::EniAttached(e) => hooks.eni_attached(e).await,
        FabricEvent::EniDetached(e) => hooks.eni_detached(e).await,
        FabricEvent::AddressesAssigned(e) => hooks.addresses_assigned(e).await,
        FabricEvent::AddressesUnassigned(e) => hooks.addresses_unassigned(e).await,
        FabricEvent::IngressRulesChanged(e) => hooks.ingress_rules_changed(e).await,
    }
}
