//! The emulated cloud's state and its rules: pure and synchronous (time is passed in), no I/O.
//!
//! [`Cloud`] holds VPCs, subnets, security groups, instances and ENIs, enforces EC2's limits and
//! returns EC2's error codes. Every change the lab's fabric must mirror is queued as a
//! [`FabricEvent`] for the caller to drain with [`Cloud::take_events`].

mod addresses;
mod cluster;
mod eni;
mod instance;
mod ipv6;
mod metadata;
mod security_group;
mod subnet;

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use vpcnet_limits::InstanceLimits;

use crate::error::Ec2Error;
use crate::hooks::FabricEvent;

pub use addresses::AssignRequest;
pub use cluster::{cluster_not_found, EksCluster, EksClusterSpec, CLUSTER_STATUSES};
pub use eni::{Attachment, CreateEniRequest, Eni, ModifyEniRequest};
pub use instance::{Instance, InstanceState, RunInstanceRequest};
pub use ipv6::{
    Ipv6Request, SubnetIpv6, VpcIpv6, ENI_IPV6_PREFIX_LEN, IPV6_IN_USE_CODE, IPV6_LIMIT_CODE,
    SUBNET_IPV6_PREFIX_LEN, VPC_IPV6_PREFIX_LEN,
};
pub use metadata::{ImdsInterface, ImdsNetwork};
pub use security_group::{IngressRule, Permission, Source};
pub use subnet::{Subnet, RESERVED_PER_SUBNET};

/// Resource tags in insertion order (EC2 keeps one value per key).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tags(pub Vec<(String, String)>);

impl Tags {
    pub fn set(&mut self, key: &str, value: &str) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.to_string(),
            None => self.0.push((key.to_string(), value.to_string())),
        }
    }
    /// Remove `key`; when `value` is given, only if the tag has that value (EC2 DeleteTags).
    pub fn remove(&mut self, key: &str, value: Option<&str>) {
        self.0
            .retain(|(k, v)| !(k == key && value.is_none_or(|want| want == v)));
    }
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone)]
pub struct Vpc {
    pub id: String,
    /// (association ID, CIDR); the first is the primary CIDR.
    pub cidrs: Vec<(String, Ipv4Net)>,
    /// The IPv6 CIDR block (a /56), if one is associated.
    pub ipv6: Option<VpcIpv6>,
    pub default_group: String,
    pub tags: Tags,
}

#[derive(Debug, Clone)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub description: String,
    pub vpc_id: String,
    pub tags: Tags,
    /// Ingress rules (see [`IngressRule`]); a VPC's `default` group admits all traffic from
    /// itself, as on EC2.
    pub ingress: Vec<IngressRule>,
}

/// The whole emulated cloud. See the module docs.
pub struct Cloud {
    pub(crate) region: String,
    pub(crate) account_id: String,
    rng: ChaCha8Rng,
    pub(crate) vpcs: BTreeMap<String, Vpc>,
    pub(crate) subnets: BTreeMap<String, Subnet>,
    pub(crate) groups: BTreeMap<String, SecurityGroup>,
    pub(crate) enis: BTreeMap<String, Eni>,
    pub(crate) instances: BTreeMap<String, Instance>,
    extra_types: BTreeMap<String, InstanceLimits>,
    /// CreateNetworkInterface `ClientToken` → the ENI it created (EC2's idempotency: a retry
    /// with the same token returns the same ENI instead of creating another).
    pub(crate) client_tokens: BTreeMap<String, String>,
    macs: HashSet<String>,
    events: Vec<FabricEvent>,
    /// EKS clusters by name.
    pub(crate) eks_clusters: BTreeMap<String, EksCluster>,
    /// The ingress view last reported ([`Cloud::ingress_view`]), to report only changes.
    last_ingress: crate::hooks::IngressRulesChanged,
}

impl Cloud {
    /// An empty cloud in `region` (e.g. `us-east-1`) owned by `account_id` (12 digits); IDs,
    /// MACs and addresses are drawn from a ChaCha8 RNG seeded with `seed`.
    pub fn new(seed: u64, region: &str, account_id: &str) -> Self {
        Self {
            region: region.to_string(),
            account_id: account_id.to_string(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            vpcs: BTreeMap::new(),
            subnets: BTreeMap::new(),
            groups: BTreeMap::new(),
            enis: BTreeMap::new(),
            instances: BTreeMap::new(),
            client_tokens: BTreeMap::new(),
            extra_types: BTreeMap::new(),
            macs: HashSet::new(),
            events: Vec::new(),
            eks_clusters: BTreeMap::new(),
            last_ingress: crate::hooks::IngressRulesChanged {
                groups: Vec::new(),
                enis: Vec::new(),
            },
        }
    }

    /// The fabric changes since the last call, oldest first; when the security-group view
    /// ([`Cloud::ingress_view`]) changed since the last call, an
    /// [`FabricEvent::IngressRulesChanged`] with the new view comes last.
    pub fn take_events(&mut self) -> Vec<FabricEvent> {
        let view = self.ingress_view();
        if view != self.last_ingress {
            self.last_ingress = view.clone();
            self.events.push(FabricEvent::IngressRulesChanged(view));
        }
        std::mem::take(&mut self.events)
    }

    pub(crate) fn push_event(&mut self, ev: FabricEvent) {
        self.events.push(ev);
    }

    pub(crate) fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// A fresh EC2-style ID: `prefix-` and 17 hex digits.
    pub(crate) fn new_id(&mut self, prefix: &str) -> String {
        let n: u128 = self.rng.random();
        format!("{prefix}-{:017x}", n & ((1u128 << 68) - 1))
    }

    /// A fresh unique locally administered MAC, `02:xx:xx:xx:xx:xx`.
    pub(crate) fn new_mac(&mut self) -> String {
        loop {
            let b: [u8; 5] = self.rng.random();
            let mac = format!(
                "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                b[0], b[1], b[2], b[3], b[4]
            );
            if self.macs.insert(mac.clone()) {
                return mac;
            }
        }
    }

    /// Register an instance type the compiled-in table does not know (or override one).
    pub fn register_instance_type(&mut self, limits: InstanceLimits) {
        self.extra_types
            .insert(limits.instance_type.clone(), limits);
    }

    /// Limits of `instance_type`: registered types first, then `vpcnet_limits::lookup`.
    pub fn instance_limits(&self, instance_type: &str) -> Option<InstanceLimits> {
        self.extra_types
            .get(instance_type)
            .cloned()
            .or_else(|| vpcnet_limits::lookup(instance_type).cloned())
    }

    /// Every known instance type (table and registered), sorted by name.
    pub fn all_instance_types(&self) -> Vec<InstanceLimits> {
        let mut all: BTreeMap<String, InstanceLimits> = vpcnet_limits::all()
            .into_iter()
            .map(|l| (l.instance_type.clone(), l.clone()))
            .collect();
        for (k, v) in &self.extra_types {
            all.insert(k.clone(), v.clone());
        }
        all.into_values().collect()
    }

    /// Create a VPC with `cidr` as its primary CIDR and `extra` as secondary CIDR blocks
    /// (each /16../28, not overlapping), and its `default` security group.
    /// Returns (VPC ID, default security group ID).
    pub fn create_vpc(
        &mut self,
        cidr: Ipv4Net,
        extra: &[Ipv4Net],
    ) -> Result<(String, String), Ec2Error> {
        let mut all: Vec<Ipv4Net> = Vec::new();
        for c in std::iter::once(&cidr).chain(extra) {
            if !(16..=28).contains(&c.prefix_len()) {
                return Err(Ec2Error::invalid_value(format!(
                    "Value ({c}) for parameter cidrBlock is invalid. The CIDR block must be between /16 and /28."
                )));
            }
            let c = c.trunc();
            if all
                .iter()
                .any(|o| o.contains(&c.network()) || c.contains(&o.network()))
            {
                return Err(Ec2Error::invalid_value(format!(
                    "The CIDR '{c}' overlaps another CIDR of the VPC"
                )));
            }
            all.push(c);
        }
        let id = self.new_id("vpc");
        let cidrs = all
            .into_iter()
            .map(|c| (self.new_id("vpc-cidr-assoc"), c))
            .collect();
        let sg = self.new_id("sg");
        self.groups.insert(
            sg.clone(),
            SecurityGroup {
                id: sg.clone(),
                name: "default".into(),
                description: "default VPC security group".into(),
                vpc_id: id.clone(),
                tags: Tags::default(),
                ingress: vec![IngressRule {
                    permission: Permission {
                        protocol: "-1".into(),
                        from_port: None,
                        to_port: None,
                    },
                    source: Source::Group(sg.clone()),
                }],
            },
        );
        self.vpcs.insert(
            id.clone(),
            Vpc {
                id: id.clone(),
                cidrs,
                ipv6: None,
                default_group: sg.clone(),
                tags: Tags::default(),
            },
        );
        Ok((id, sg))
    }

    /// Create a subnet of `vpc_id` in availability zone `az` (e.g. `us-east-1a`). `cidr` must be
    /// /16../28, inside one of the VPC's CIDRs and not overlap another subnet.
    /// Errors: `InvalidVpcID.NotFound`, `InvalidSubnet.Range`, `InvalidSubnet.Conflict`.
    pub fn create_subnet(
        &mut self,
        vpc_id: &str,
        cidr: Ipv4Net,
        az: &str,
    ) -> Result<String, Ec2Error> {
        let vpc = self
            .vpcs
            .get(vpc_id)
            .ok_or_else(|| Ec2Error::vpc_not_found(vpc_id))?;
        let cidr = cidr.trunc();
        if !(16..=28).contains(&cidr.prefix_len())
            || !vpc.cidrs.iter().any(|(_, c)| c.contains(&cidr))
        {
            return Err(Ec2Error::new(
                "InvalidSubnet.Range",
                format!("The CIDR '{cidr}' is invalid: it must be /16 to /28 and inside a CIDR of {vpc_id}"),
            ));
        }
        if self.subnets.values().any(|s| {
            s.vpc_id == vpc_id
                && (s.cidr.contains(&cidr.network()) || cidr.contains(&s.cidr.network()))
        }) {
            return Err(Ec2Error::new(
                "InvalidSubnet.Conflict",
                format!("The CIDR '{cidr}' conflicts with another subnet"),
            ));
        }
        if az.is_empty() || !az.starts_with(&self.region) {
            return Err(Ec2Error::new(
                "InvalidParameterValue",
                format!("Value ({az}) for parameter availabilityZone is invalid. Subnets can currently only be created in the {}* zones.", self.region),
            ));
        }
        let id = self.new_id("subnet");
        let az_id = az_id(&self.region, az);
        self.subnets.insert(
            id.clone(),
            Subnet::new(id.clone(), vpc_id.to_string(), cidr, az.to_string(), az_id),
        );
        Ok(id)
    }

    /// Create a security group named `name` in `vpc_id`. Errors: `InvalidVpcID.NotFound`,
    /// `InvalidGroup.Duplicate`.
    pub fn create_security_group(
        &mut self,
        vpc_id: &str,
        name: &str,
        description: &str,
    ) -> Result<String, Ec2Error> {
        if !self.vpcs.contains_key(vpc_id) {
            return Err(Ec2Error::vpc_not_found(vpc_id));
        }
        if self
            .groups
            .values()
            .any(|g| g.vpc_id == vpc_id && g.name == name)
        {
            return Err(Ec2Error::new(
                "InvalidGroup.Duplicate",
                format!("The security group '{name}' already exists for VPC '{vpc_id}'"),
            ));
        }
        let id = self.new_id("sg");
        self.groups.insert(
            id.clone(),
            SecurityGroup {
                id: id.clone(),
                name: name.to_string(),
                description: description.to_string(),
                vpc_id: vpc_id.to_string(),
                tags: Tags::default(),
                ingress: Vec::new(),
            },
        );
        Ok(id)
    }

    /// Check that every group exists in `vpc_id`; empty → the VPC's default group.
    pub(crate) fn resolve_groups(
        &self,
        vpc_id: &str,
        groups: &[String],
    ) -> Result<Vec<String>, Ec2Error> {
        if groups.is_empty() {
            return Ok(vec![self.vpcs[vpc_id].default_group.clone()]);
        }
        let mut out: Vec<String> = Vec::new();
        for g in groups {
            match self.groups.get(g) {
                Some(sg) if sg.vpc_id == vpc_id => {
                    if !out.contains(g) {
                        out.push(g.clone())
                    }
                }
                _ => return Err(Ec2Error::group_not_found(g, vpc_id)),
            }
        }
        Ok(out)
    }

    pub(crate) fn tags_mut(&mut self, id: &str) -> Result<&mut Tags, Ec2Error> {
        let not_found = || match id.split('-').next() {
            Some("eni") => Ec2Error::eni_not_found(id),
            Some("i") => Ec2Error::instance_not_found(id),
            Some("subnet") => Ec2Error::subnet_not_found(id),
            Some("vpc") => Ec2Error::vpc_not_found(id),
            Some("sg") => Ec2Error::new(
                "InvalidGroup.NotFound",
                format!("The security group '{id}' does not exist"),
            ),
            _ => Ec2Error::new("InvalidID", format!("The ID '{id}' is not valid")),
        };
        if let Some(e) = self.enis.get_mut(id) {
            return Ok(&mut e.tags);
        }
        if let Some(i) = self.instances.get_mut(id) {
            return Ok(&mut i.tags);
        }
        if let Some(s) = self.subnets.get_mut(id) {
            return Ok(&mut s.tags);
        }
        if let Some(v) = self.vpcs.get_mut(id) {
            return Ok(&mut v.tags);
        }
        if let Some(g) = self.groups.get_mut(id) {
            return Ok(&mut g.tags);
        }
        Err(not_found())
    }

    /// EC2 CreateTags: set `tags` on every resource (all-or-nothing).
    pub fn create_tags(
        &mut self,
        resources: &[String],
        tags: &[(String, String)],
    ) -> Result<(), Ec2Error> {
        for r in resources {
            self.tags_mut(r)?;
        }
        for r in resources {
            let t = self.tags_mut(r)?;
            for (k, v) in tags {
                t.set(k, v);
            }
        }
        Ok(())
    }

    /// EC2 DeleteTags: remove each key (only where the value matches, if one is given).
    pub fn delete_tags(
        &mut self,
        resources: &[String],
        tags: &[(String, Option<String>)],
    ) -> Result<(), Ec2Error> {
        for r in resources {
            self.tags_mut(r)?;
        }
        for r in resources {
            let t = self.tags_mut(r)?;
            for (k, v) in tags {
                t.remove(k, v.as_deref());
            }
        }
        Ok(())
    }

    pub fn vpc(&self, id: &str) -> Option<&Vpc> {
        self.vpcs.get(id)
    }
    pub fn subnet(&self, id: &str) -> Option<&Subnet> {
        self.subnets.get(id)
    }
    /// Subnet `id`, to change (fragment it, as tests do).
    pub fn subnet_mut(&mut self, id: &str) -> Option<&mut Subnet> {
        self.subnets.get_mut(id)
    }
    pub fn eni(&self, id: &str) -> Option<&Eni> {
        self.enis.get(id)
    }
    pub fn instance(&self, id: &str) -> Option<&Instance> {
        self.instances.get(id)
    }
    pub fn group(&self, id: &str) -> Option<&SecurityGroup> {
        self.groups.get(id)
    }
    pub fn vpcs(&self) -> impl Iterator<Item = &Vpc> {
        self.vpcs.values()
    }
    pub fn subnets(&self) -> impl Iterator<Item = &Subnet> {
        self.subnets.values()
    }
    pub fn enis(&self) -> impl Iterator<Item = &Eni> {
        self.enis.values()
    }
    pub fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.instances.values()
    }

    /// The books balance: every subnet's used addresses (its size less the 5 AWS reserves
    /// and the available count) equal what its ENIs hold (primary, secondary IPs and 16 per
    /// /28 prefix), every attached ENI is within its instance type's IPv4 slots, and every
    /// instance within its ENI limit. Errors: the first imbalance, in words. Checked by the
    /// property and fuzz tests after any sequence of calls. IPv6: see [`Cloud::check_ipv6_books`].
    pub fn check_books(&self) -> Result<(), String> {
        self.check_ipv6_books()?;
        for s in self.subnets() {
            let held: u32 = self
                .enis()
                .filter(|e| e.subnet_id == s.id)
                .map(|e| 1 + e.secondary_ips.len() as u32 + 16 * e.prefixes.len() as u32)
                .sum();
            let size = 1u32 << (32 - s.cidr.prefix_len());
            if size - 5 - s.available() != held {
                return Err(format!(
                    "subnet {} counts {} used, ENIs hold {held}",
                    s.id,
                    size - 5 - s.available()
                ));
            }
        }
        for i in self.instances() {
            let attached: Vec<_> = self
                .enis()
                .filter(|e| e.attachment.as_ref().is_some_and(|a| a.instance_id == i.id))
                .collect();
            if attached.len() as u32 > i.limits.total_enis() {
                return Err(format!("{} has {} ENIs", i.id, attached.len()));
            }
            for e in attached {
                if e.slots() > i.limits.ipv4_per_eni {
                    return Err(format!("{} holds {} IPv4 slots", e.id, e.slots()));
                }
            }
        }
        Ok(())
    }

    /// The running instance whose primary private IPv4 address is `ip` (IMDS caller lookup).
    pub fn instance_by_primary_ip(&self, ip: Ipv4Addr) -> Option<&Instance> {
        self.instances
            .values()
            .find(|i| i.state == InstanceState::Running && i.private_ip == ip)
    }

    /// The EC2 private DNS name for `ip`: `ip-10-0-0-5.ec2.internal` in us-east-1,
    /// `ip-10-0-0-5.REGION.compute.internal` elsewhere.
    pub fn private_dns_name(&self, ip: Ipv4Addr) -> String {
        let o = ip.octets();
        let host = format!("ip-{}-{}-{}-{}", o[0], o[1], o[2], o[3]);
        if self.region == "us-east-1" {
            format!("{host}.ec2.internal")
        } else {
            format!("{host}.{}.compute.internal", self.region)
        }
    }
}

impl Cloud {
    /// The region's availability zones as (zone name, zone ID): zones `a`, `b` and `c` of the
    /// region and every zone a subnet uses, sorted by name.
    pub fn availability_zones(&self) -> Vec<(String, String)> {
        let mut names: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|l| format!("{}{l}", self.region))
            .chain(self.subnets.values().map(|s| s.az.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|n| {
                let id = az_id(&self.region, &n);
                (n, id)
            })
            .collect()
    }

    /// The region name, e.g. `us-east-1`.
    pub fn region(&self) -> &str {
        &self.region
    }
}

/// Zone ID for a zone name: `us-east-1a` → `use1-az1` (a stable, plausible mapping).
fn az_id(region: &str, az: &str) -> String {
    let mut short = String::new();
    for (i, part) in region.split('-').enumerate() {
        match i {
            0 => short.push_str(part),
            1 => short.extend(part.chars().next()),
            _ => short.push_str(part),
        }
    }
    let letter = az.chars().last().unwrap_or('a');
    let n = (letter as u32).saturating_sub('a' as u32) + 1;
    format!("{short}-az{n}")
}
