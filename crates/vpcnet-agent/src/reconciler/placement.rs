//! Where a new secondary ENI goes: subnet and security groups.
//!
//! Without custom networking: the node's security groups (the primary ENI's, from IMDS, or
//! the agent's overrides) and the node's subnet, or the one subnet discovery picks
//! ([`super::subnet_discovery`]). With custom networking (the VPC CNI's
//! `AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true`): the subnet and security groups of the node's
//! resolved ENIConfig ([`crate::kubernetes::eniconfig_watch`]), and none at all while no valid
//! ENIConfig is resolved: no ENI is created then, never one in the node's subnet.

use ipnet::Ipv4Net;
use vpcnet_ec2::Ec2Error;

use crate::cloud::Ec2Api;

use crate::state::{KubeView, Shared};

pub use super::new_eni::EniPlacement;

/// The placement of the next new ENI, or `None` while custom networking has no valid
/// ENIConfig (the reason is in `/v1/eniconfig`).
pub fn eni_placement(shared: &Shared) -> Option<EniPlacement> {
    let Some(tx) = shared.kube().eniconfig() else {
        return Some(EniPlacement {
            subnet_id: shared.facts.subnet_id.clone(),
            security_group_ids: shared.facts.security_groups.clone(),
            eniconfig: None,
        });
    };
    let t = tx.borrow();
    let c = t.choice()?;
    Some(EniPlacement {
        subnet_id: c.subnet.clone(),
        security_group_ids: c.security_groups.clone(),
        eniconfig: Some(c.name.clone()),
    })
}

/// [`eni_placement`], or an error saying that custom networking has no valid ENIConfig.
pub fn required(shared: &Shared) -> Result<EniPlacement, Ec2Error> {
    eni_placement(shared).ok_or_else(|| Ec2Error::Request {
        action: vpcnet_ec2::Action::CreateNetworkInterface,
        message: "custom networking has no valid ENIConfig for this node: no ENI is created (see /v1/eniconfig or `vpcnet inspect eniconfig`)".into(),
        source: None,
    })
}

/// The subnets (with their CIDRs) a new ENI may be created in, in the order to try: with
/// custom networking the ENIConfig's, checked ([`checked_subnet_cidr`]; an error is recorded
/// for the ENIConfig's status); without, the node's or those subnet discovery finds
/// ([`super::subnet_discovery::candidates`]).
pub async fn candidates(
    shared: &Shared,
    ec2: &dyn Ec2Api,
) -> Result<Vec<super::new_eni::Candidate>, Ec2Error> {
    if shared.kube().eniconfig().is_none() {
        return super::subnet_discovery::candidates(shared, ec2).await;
    }
    let placement = required(shared)?;
    let checked = checked_subnet_cidr(shared, ec2, &placement).await;
    if checked.is_err() {
        record_outcome(shared.kube(), &placement, &checked);
    }
    Ok(vec![super::new_eni::Candidate {
        cidr: checked?,
        placement,
    }])
}

/// The CIDR of `p`'s subnet, checked: without an ENIConfig, the node's (known from IMDS);
/// with one, `DescribeSubnets` of its subnet and the node's, and the two must be in the same
/// availability zone (an ENI attaches only to instances in its subnet's zone).
///
/// Errors: the subnet does not exist, or is in another zone than the node; both name the
/// ENIConfig and the fix.
pub async fn checked_subnet_cidr(
    shared: &Shared,
    ec2: &dyn Ec2Api,
    p: &EniPlacement,
) -> Result<Ipv4Net, Ec2Error> {
    let Some(name) = &p.eniconfig else {
        return Ok(shared.facts.subnet_cidr);
    };
    let node_subnet = &shared.facts.subnet_id;
    let found = match ec2
        .describe_subnets(&[p.subnet_id.clone(), node_subnet.clone()])
        .await
    {
        Ok(v) => v,
        Err(e) => return Err(for_eniconfig(e, p)),
    };
    let get = |id: &str| found.iter().find(|s| s.subnet_id == id);
    let Some(subnet) = get(&p.subnet_id) else {
        return Err(refused(
            p,
            format!(
                "ENIConfig {name:?}: subnet {} does not exist: set spec.subnet to a subnet of this VPC in the node's availability zone",
                p.subnet_id
            ),
        ));
    };
    if let Some(node) = get(node_subnet) {
        if node.availability_zone != subnet.availability_zone {
            return Err(refused(
                p,
                format!(
                    "ENIConfig {name:?}: subnet {} is in {}, but the node is in {} (its subnet {}): an ENI attaches only in its own zone; choose an ENIConfig with a subnet in {} for this node (e.g. one ENIConfig per zone with ENI_CONFIG_LABEL_DEF=topology.kubernetes.io/zone)",
                    p.subnet_id,
                    subnet.availability_zone,
                    node.availability_zone,
                    node_subnet,
                    node.availability_zone
                ),
            ));
        }
    }
    Ok(subnet.cidr_block)
}

/// How the message of an ENI placement refused by the check before the call starts.
const REFUSED: &str = "refused before the call: ";

/// EC2 error codes of CreateNetworkInterface/DescribeSubnets caused by the ENIConfig's subnet
/// or security groups (EC2 API reference, "Error codes").
const ENICONFIG_CODES: [&str; 6] = [
    "InvalidSubnetID.NotFound",
    "InvalidSubnetID.Malformed",
    "InvalidGroup.NotFound",
    "InvalidGroupId.Malformed",
    "InvalidGroupId.NotFound",
    "InsufficientFreeAddressesInSubnet",
];

fn refused(p: &EniPlacement, message: String) -> Ec2Error {
    Ec2Error::Request {
        action: vpcnet_ec2::Action::CreateNetworkInterface,
        message: format!("{REFUSED}{message}; subnet {}", p.subnet_id),
        source: None,
    }
}

/// Whether `e` says the ENIConfig itself is wrong (subnet unknown, in another zone, full; a
/// security group unknown) rather than a passing EC2 problem (throttling, an outage).
pub fn is_eniconfig_fault(e: &Ec2Error) -> bool {
    match e {
        Ec2Error::Api { code, .. } => ENICONFIG_CODES.contains(&code.as_str()),
        Ec2Error::Request { message, .. } => message.starts_with(REFUSED),
        _ => false,
    }
}

/// Records in the ENIConfig channel how placing a new ENI with `p` ended, so the Node
/// condition, an Event and `/v1/eniconfig` show an ENIConfig that EC2 refuses
/// ([`crate::kubernetes::eniconfig_watch::REJECTED`]): an error [`is_eniconfig_fault`] sets
/// it, an ENI created clears it; other errors leave it as it is. Nothing without custom
/// networking, or when the node's choice changed meanwhile.
pub fn record_outcome<T>(kube: &KubeView, p: &EniPlacement, outcome: &Result<T, Ec2Error>) {
    let (Some(tx), Some(name)) = (kube.eniconfig(), &p.eniconfig) else {
        return;
    };
    let error = match outcome {
        Ok(_) => None,
        Err(e) if is_eniconfig_fault(e) => Some(e.to_string()),
        Err(_) => return,
    };
    tx.send_if_modified(|t| {
        let same_choice = t
            .choice()
            .is_some_and(|c| &c.name == name && c.subnet == p.subnet_id);
        if !same_choice || t.placement_error == error {
            return false;
        }
        t.placement_error = error;
        true
    });
}

/// `e` with the ENIConfig and the fix added to EC2's message when the ENIConfig's subnet or
/// security groups caused it (`InvalidSubnetID.NotFound`, `InvalidGroup.NotFound`,
/// `InsufficientFreeAddressesInSubnet`); other errors unchanged.
pub fn for_eniconfig(e: Ec2Error, p: &EniPlacement) -> Ec2Error {
    let Some(name) = &p.eniconfig else {
        return e;
    };
    match e {
        Ec2Error::Api {
            action,
            code,
            message,
            status,
            retryable,
            source,
        } => {
            let fix = match code.as_str() {
                "InvalidSubnetID.NotFound" | "InvalidSubnetID.Malformed" => format!(
                    "ENIConfig {name:?}: subnet {} does not exist: set spec.subnet to a subnet of this VPC in the node's availability zone",
                    p.subnet_id
                ),
                "InvalidGroup.NotFound" | "InvalidGroupId.Malformed" | "InvalidGroupId.NotFound" => format!(
                    "ENIConfig {name:?}: a security group of {:?} does not exist in the subnet's VPC: fix spec.securityGroups",
                    p.security_group_ids
                ),
                "InsufficientFreeAddressesInSubnet" => format!(
                    "ENIConfig {name:?}: subnet {} has no free addresses: free addresses there, or point the ENIConfig at a larger subnet (e.g. in a secondary VPC CIDR such as 100.64.0.0/16)",
                    p.subnet_id
                ),
                _ => {
                    return Ec2Error::Api {
                        action,
                        code,
                        message,
                        status,
                        retryable,
                        source,
                    }
                }
            };
            Ec2Error::Api {
                action,
                code,
                message: format!("{message}; {fix}"),
                status,
                retryable,
                source,
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str) -> Ec2Error {
        Ec2Error::Api {
            action: vpcnet_ec2::Action::CreateNetworkInterface,
            code: code.into(),
            message: "EC2 says no".into(),
            status: Some(400),
            retryable: false,
            source: None,
        }
    }

    #[test]
    fn subnet_and_group_errors_name_the_eniconfig_and_the_fix() {
        let p = EniPlacement {
            subnet_id: "subnet-9".into(),
            security_group_ids: vec!["sg-1".into()],
            eniconfig: Some("pods-a".into()),
        };
        for (code, says) in [
            ("InvalidSubnetID.NotFound", "subnet subnet-9 does not exist"),
            ("InvalidGroup.NotFound", "fix spec.securityGroups"),
            ("InsufficientFreeAddressesInSubnet", "has no free addresses"),
        ] {
            let e = for_eniconfig(api(code), &p).to_string();
            assert!(e.contains("ENIConfig \"pods-a\""), "{e}");
            assert!(e.contains(says), "{e}");
            assert!(
                e.contains(code) && e.contains("EC2 says no"),
                "EC2's own words kept: {e}"
            );
        }
        let e = for_eniconfig(api("AttachmentLimitExceeded"), &p).to_string();
        assert!(!e.contains("ENIConfig"), "{e}");
        // Without custom networking nothing is added.
        let plain = EniPlacement {
            eniconfig: None,
            ..p
        };
        let e = for_eniconfig(api("InvalidSubnetID.NotFound"), &plain).to_string();
        assert!(!e.contains("ENIConfig"), "{e}");
    }

    #[test]
    fn only_subnet_and_group_problems_are_the_eniconfigs_fault() {
        let p = EniPlacement {
            subnet_id: "subnet-9".into(),
            security_group_ids: vec![],
            eniconfig: Some("pods-a".into()),
        };
        assert!(is_eniconfig_fault(&api("InvalidSubnetID.NotFound")));
        assert!(is_eniconfig_fault(&api(
            "InsufficientFreeAddressesInSubnet"
        )));
        assert!(is_eniconfig_fault(&refused(&p, "wrong zone".into())));
        assert!(!is_eniconfig_fault(&api("RequestLimitExceeded")));
        assert!(!is_eniconfig_fault(&api("AttachmentLimitExceeded")));
        assert!(!is_eniconfig_fault(&required_error()));
    }

    fn required_error() -> Ec2Error {
        Ec2Error::Request {
            action: vpcnet_ec2::Action::CreateNetworkInterface,
            message: "custom networking has no valid ENIConfig for this node".into(),
            source: None,
        }
    }
}
