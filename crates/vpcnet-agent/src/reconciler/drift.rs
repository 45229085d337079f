//! The periodic pass's drift check: the instance's attached ENIs and their addresses as IMDS
//! lists them (local to the instance, not throttled, no EC2 call), compared with the pool by
//! the core ([`vpcnet_ipam::Pool::drift`]). Only a difference, an unreadable IMDS, an EC2
//! outcome left unknown, or the safety interval leads to a `DescribeNetworkInterfaces`; EC2's
//! answer, never IMDS's, is what the pool adopts (docs/architecture.md, principle 2).

use vpcnet_imds::{ImdsError, ImdsInterface};
use vpcnet_ipam::{Drift, EniInfo, EniObservation};

use crate::cloud::MetadataApi;
use crate::state::{NodeFacts, Shared};

/// Why a periodic pass describes the instance's ENIs in EC2 (log field and metric label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescribeReason {
    /// An EC2 call's outcome is unknown (a release timed out, a reply was lost).
    Unsettled,
    /// `VPCNET_EC2_RECONCILE_INTERVAL` passed since the last describe.
    SafetyInterval,
    /// IMDS disagrees with the pool.
    Drift(Drift),
    /// IMDS could not be read: EC2 is asked instead.
    ImdsUnreadable,
}

impl DescribeReason {
    /// Short label: `unsettled`, `interval`, `drift`, `imds_error`.
    pub fn label(&self) -> &'static str {
        match self {
            DescribeReason::Unsettled => "unsettled",
            DescribeReason::SafetyInterval => "interval",
            DescribeReason::Drift(_) => "drift",
            DescribeReason::ImdsUnreadable => "imds_error",
        }
    }
}

/// IMDS's ENI as the core's observation: its first `local-ipv4s` entry is the ENI's primary
/// address (IMDS lists it first), the rest are secondary.
pub fn from_imds(facts: &NodeFacts, i: &ImdsInterface) -> EniObservation {
    let primary_ip = i.local_ipv4s.first().copied().unwrap_or(facts.primary_ip);
    EniObservation {
        info: EniInfo {
            id: i.interface_id.clone(),
            mac: i.mac.to_ascii_lowercase(),
            device_number: i.device_number,
            network_card: i.network_card,
            subnet_id: i.subnet_id.clone(),
            subnet_cidr: i.subnet_cidr,
            primary: (i.device_number == 0 && i.network_card == 0)
                || i.mac.eq_ignore_ascii_case(&facts.primary_mac),
            primary_ip,
        },
        secondary_ips: i.local_ipv4s.iter().skip(1).copied().collect(),
        prefixes: i.ipv4_prefixes.clone(),
    }
}

/// Reads the attached ENIs from IMDS and compares them with the pool: `Ok(None)` when they
/// agree (no describe needed), `Ok(Some(drift))` with the first difference.
pub async fn imds_drift(
    shared: &Shared,
    imds: &dyn MetadataApi,
) -> Result<Option<Drift>, ImdsError> {
    let interfaces = imds.interfaces().await?;
    let view: Vec<EniObservation> = interfaces
        .iter()
        .map(|i| from_imds(&shared.facts, i))
        .collect();
    let foreign = shared.enis().foreign_enis();
    Ok(shared.pool().drift(&view, &foreign))
}
