//! The binary's setup file: VPCs with subnets, security groups and instances, extra instance
//! types, faults and the account's rate limits. Example:
//!
//! ```json
//! {
//!   "region": "us-east-1",
//!   "instance_types": [],
//!   "faults": { "actions": { "AssignPrivateIpAddresses": { "throttle": { "capacity": 10, "refill_per_sec": 1.0 } } } },
//!   "account_limits": { "enabled": true, "ec2": { "eni_mutating": { "capacity": 20 } } },
//!   "vpcs": [{
//!     "name": "lab", "cidr": "10.0.0.0/16", "extra_cidrs": ["100.64.0.0/16"],
//!     "ipv6_cidr": "2600:1f18:1234:ab00::/56",
//!     "security_groups": ["nodes"],
//!     "subnets": [{ "name": "a", "cidr": "10.0.0.0/24", "availability_zone": "us-east-1a",
//!                   "ipv6_cidr": "2600:1f18:1234:ab00::/64", "assign_ipv6_address_on_creation": true }],
//!     "instances": [{ "name": "node1", "instance_type": "m5.large", "subnet": "a", "security_groups": ["nodes"] }]
//!   }]
//! }
//! ```

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use anyhow::{anyhow, Context};
use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::account_limits::AccountLimits;
use crate::control::InstanceTypeSpec;
use crate::emulator::{Emulator, InstanceInfo, RunInstance};
use crate::faults::Faults;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabConfig {
    /// Defaults to `us-east-1`.
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub instance_types: Vec<InstanceTypeSpec>,
    #[serde(default)]
    pub faults: Option<Faults>,
    /// The account's EC2 and ELBv2 rate limits ([`crate::account_limits`]); off unless given
    /// with `"enabled": true`.
    #[serde(default)]
    pub account_limits: Option<AccountLimits>,
    #[serde(default)]
    pub vpcs: Vec<VpcConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VpcConfig {
    pub name: String,
    pub cidr: Ipv4Net,
    #[serde(default)]
    pub extra_cidrs: Vec<Ipv4Net>,
    /// The VPC's IPv6 CIDR block, a /56 (e.g. `2600:1f18:1234:ab00::/56`).
    #[serde(default)]
    pub ipv6_cidr: Option<Ipv6Net>,
    /// Security group names to create.
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub subnets: Vec<SubnetConfig>,
    #[serde(default)]
    pub instances: Vec<InstanceConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubnetConfig {
    pub name: String,
    pub cidr: Ipv4Net,
    pub availability_zone: String,
    /// The subnet's IPv6 CIDR block, a /64 inside the VPC's `ipv6_cidr`.
    #[serde(default)]
    pub ipv6_cidr: Option<Ipv6Net>,
    /// EC2 `AssignIpv6AddressOnCreation`: ENIs created in the subnet (instances' primary ENIs
    /// included) get one IPv6 address. Needs `ipv6_cidr`.
    #[serde(default)]
    pub assign_ipv6_address_on_creation: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    pub name: String,
    pub instance_type: String,
    /// Subnet name (from `subnets`).
    pub subnet: String,
    /// Security group names (from `security_groups`, or `default`).
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub private_ip: Option<Ipv4Addr>,
}

/// IDs created for one VPC of the config, by the names the config gave.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VpcIds {
    pub vpc_id: String,
    pub default_security_group_id: String,
    pub subnets: BTreeMap<String, String>,
    pub security_groups: BTreeMap<String, String>,
    pub instances: BTreeMap<String, InstanceInfo>,
}

/// Everything [`apply`] created, by VPC name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LabIds {
    pub vpcs: BTreeMap<String, VpcIds>,
}

/// Build the cloud `cfg` describes in `emu`. Errors name the config item at fault.
pub async fn apply(emu: &Emulator, cfg: &LabConfig) -> anyhow::Result<LabIds> {
    for t in &cfg.instance_types {
        emu.register_instance_type(t.to_limits().map_err(|e| anyhow!("instance_types: {e}"))?);
    }
    if let Some(f) = &cfg.faults {
        emu.set_faults(f.clone())
            .map_err(|e| anyhow!("faults: {e}"))?;
    }
    if let Some(l) = &cfg.account_limits {
        emu.set_account_limits(l.clone())
            .map_err(|e| anyhow!("account_limits.{}", e.message))?;
    }
    let mut out = LabIds::default();
    for v in &cfg.vpcs {
        let ctx = |what: &str| format!("vpcs[{}].{what}", v.name);
        let info = emu
            .create_vpc_with_ipv6(v.cidr, &v.extra_cidrs, v.ipv6_cidr)
            .map_err(|e| anyhow!("{}: {e}", ctx("cidr")))?;
        let mut ids = VpcIds {
            vpc_id: info.vpc_id.clone(),
            default_security_group_id: info.default_security_group_id.clone(),
            ..Default::default()
        };
        ids.security_groups
            .insert("default".into(), info.default_security_group_id.clone());
        for g in &v.security_groups {
            let id = emu
                .create_security_group(&info.vpc_id, g)
                .map_err(|e| anyhow!("{}: {e}", ctx(&format!("security_groups[{g}]"))))?;
            ids.security_groups.insert(g.clone(), id);
        }
        for s in &v.subnets {
            let id = emu
                .create_subnet_with_ipv6(
                    &info.vpc_id,
                    s.cidr,
                    &s.availability_zone,
                    s.ipv6_cidr,
                    s.assign_ipv6_address_on_creation,
                )
                .map_err(|e| anyhow!("{}: {e}", ctx(&format!("subnets[{}]", s.name))))?;
            ids.subnets.insert(s.name.clone(), id);
        }
        for i in &v.instances {
            let what = ctx(&format!("instances[{}]", i.name));
            let subnet_id = ids
                .subnets
                .get(&i.subnet)
                .cloned()
                .with_context(|| format!("{what}: no subnet named {:?}", i.subnet))?;
            let mut groups = Vec::new();
            for g in &i.security_groups {
                groups.push(
                    ids.security_groups
                        .get(g)
                        .cloned()
                        .with_context(|| format!("{what}: no security group named {g:?}"))?,
                );
            }
            let info = emu
                .run_instance(RunInstance {
                    instance_type: i.instance_type.clone(),
                    subnet_id,
                    security_group_ids: groups,
                    private_ip: i.private_ip,
                    tags: vec![("Name".into(), i.name.clone())],
                    user_data: None,
                })
                .await
                .map_err(|e| anyhow!("{what}: {e}"))?;
            ids.instances.insert(i.name.clone(), info);
        }
        out.vpcs.insert(v.name.clone(), ids);
    }
    Ok(out)
}
