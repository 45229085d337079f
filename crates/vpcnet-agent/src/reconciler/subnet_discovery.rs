//! Subnet discovery (`ENABLE_SUBNET_DISCOVERY`, the VPC CNI's default `true`), without custom
//! networking: which subnets a new ENI may go to, in the order to try them.
//!
//! As the VPC CNI decides it: the subnets of the node's VPC and availability zone (one
//! `DescribeSubnets`, filters `vpc-id` and `availability-zone`, per new ENI), most free
//! addresses first, keeping
//! - the node's own subnet unless it is tagged `kubernetes.io/role/cni=0`;
//! - any other subnet tagged `kubernetes.io/role/cni` with a value other than `0`, and, when
//!   `CLUSTER_NAME` is set, either no `kubernetes.io/cluster/*` tag or
//!   `kubernetes.io/cluster/<CLUSTER_NAME>`;
//!
//! every ENI with the node's security groups (the primary ENI's, or `SECURITY_GROUP_IDS`
//! overrides). With discovery off only the node's subnet is used, and not when it is tagged
//! `kubernetes.io/role/cni=0` (checked with one `DescribeSubnets` of it; when that call
//! fails the ENI is created anyway, as the VPC CNI does).

use vpcnet_ec2::{Action, Ec2Error, Subnet};

pub use super::new_eni::{Candidate, EniPlacement};
use crate::cloud::Ec2Api;
use crate::errors::chain;
use crate::state::{NodeFacts, Shared};

pub use vpcnet_ipam::subnet_role::{CLUSTER_TAG_PREFIX, CNI_ROLE_TAG};

fn role(s: &Subnet) -> &str {
    vpcnet_ipam::subnet_role::role(&s.tags)
}

/// Whether `s` may get ENIs ([`vpcnet_ipam::subnet_role::eligible`]).
pub fn valid(s: &Subnet, node_subnet: &str, cluster_name: &str) -> bool {
    vpcnet_ipam::subnet_role::eligible(&s.tags, s.subnet_id == node_subnet, cluster_name)
}

/// The valid subnets of `subnets` (those of the node's VPC and zone), most free addresses
/// first; equal counts keep EC2's order.
pub fn choose<'a>(subnets: &'a [Subnet], node_subnet: &str, cluster_name: &str) -> Vec<&'a Subnet> {
    let mut v: Vec<&Subnet> = subnets
        .iter()
        .filter(|s| valid(s, node_subnet, cluster_name))
        .collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.available_ip_address_count));
    v
}

/// Why no subnet of `subnets` is valid, and the fix.
pub fn none_valid(subnets: &[Subnet], node_subnet: &str, vpc_id: &str, zone: &str) -> String {
    let node_excluded = subnets
        .iter()
        .any(|s| s.subnet_id == node_subnet && role(s) == "0");
    let why = if node_excluded {
        format!("the node's subnet {node_subnet} is tagged {CNI_ROLE_TAG}=0")
    } else {
        format!("the node's subnet {node_subnet} is not among them")
    };
    format!(
        "subnet discovery found no subnet for a new ENI among the {} subnets of {vpc_id} in \
         {zone}: {why}, and no other is tagged {CNI_ROLE_TAG} (a value other than 0) for this \
         cluster; tag a subnet of {zone} {CNI_ROLE_TAG}=1, or remove the {CNI_ROLE_TAG}=0 tag \
         from {node_subnet}",
        subnets.len()
    )
}

fn no_subnet(message: String) -> Ec2Error {
    Ec2Error::Request {
        action: Action::CreateNetworkInterface,
        message,
        source: None,
    }
}

/// The node's subnet with its security groups.
fn node_candidate(f: &NodeFacts) -> Candidate {
    Candidate {
        placement: EniPlacement {
            subnet_id: f.subnet_id.clone(),
            security_group_ids: f.security_groups.clone(),
            eniconfig: None,
        },
        cidr: f.subnet_cidr,
    }
}

/// Where the next ENI may go without custom networking, in order (see the module doc).
///
/// Errors: `DescribeSubnets` failed (discovery on: the reconciler retries later); no valid
/// subnet (the message names the fix).
pub async fn candidates(shared: &Shared, ec2: &dyn Ec2Api) -> Result<Vec<Candidate>, Ec2Error> {
    let f = &shared.facts;
    if !shared.opts.subnet_discovery {
        return match ec2
            .describe_subnets(std::slice::from_ref(&f.subnet_id))
            .await
        {
            Ok(v) if v.iter().any(|s| role(s) == "0") => Err(no_subnet(format!(
                "the node's subnet {} is tagged {CNI_ROLE_TAG}=0 and ENABLE_SUBNET_DISCOVERY \
                 is false: no ENI is created; remove the tag, or set \
                 ENABLE_SUBNET_DISCOVERY=true and tag another subnet of {} {CNI_ROLE_TAG}=1",
                f.subnet_id, f.availability_zone
            ))),
            Ok(_) => Ok(vec![node_candidate(f)]),
            Err(e) => {
                tracing::warn!(
                    subnet = %f.subnet_id,
                    "could not check whether the node's subnet is tagged {CNI_ROLE_TAG}=0 \
                     ({}); creating the ENI there",
                    chain(&e)
                );
                Ok(vec![node_candidate(f)])
            }
        };
    }
    let subnets = ec2
        .describe_zone_subnets(&f.vpc_id, &f.availability_zone)
        .await?;
    let chosen = choose(&subnets, &f.subnet_id, &shared.opts.cluster_name);
    if chosen.is_empty() {
        return Err(no_subnet(none_valid(
            &subnets,
            &f.subnet_id,
            &f.vpc_id,
            &f.availability_zone,
        )));
    }
    Ok(chosen
        .into_iter()
        .map(|s| Candidate {
            placement: EniPlacement {
                subnet_id: s.subnet_id.clone(),
                security_group_ids: f.security_groups.clone(),
                eniconfig: None,
            },
            cidr: s.cidr_block,
        })
        .collect())
}

/// Whether pods may not use the primary ENI's addresses because subnet discovery is on and
/// the node's subnet is tagged `kubernetes.io/role/cni=0` (as the VPC CNI excludes ENIs in
/// such subnets from pod addresses). One `DescribeSubnets` at start, only with discovery on
/// and without custom networking (whose primary ENI serves no pods anyway); when it fails
/// the ENI is not excluded (logged), as in the VPC CNI.
pub async fn primary_eni_excluded(
    ec2: &dyn Ec2Api,
    opts: &crate::AgentOptions,
    node_subnet: &str,
) -> bool {
    if !opts.subnet_discovery || opts.custom_networking.is_some() {
        return false;
    }
    match ec2.describe_subnets(&[node_subnet.to_string()]).await {
        Ok(v) => {
            let excluded = v.iter().any(|s| role(s) == "0");
            if excluded {
                tracing::info!(subnet = node_subnet, "the node's subnet is tagged {CNI_ROLE_TAG}=0: pods get no addresses of the primary ENI, only of ENIs in discovered subnets");
            }
            excluded
        }
        Err(e) => {
            tracing::warn!(subnet = node_subnet, "could not check whether the node's subnet is tagged {CNI_ROLE_TAG}=0 ({}); pods may use the primary ENI's addresses", chain(&e));
            false
        }
    }
}

/// Whether a failed `CreateNetworkInterface` in one subnet should move on to the next
/// candidate: the subnet is full or gone. Anything else (throttling, an outage, a bad
/// security group) would fail in every subnet alike.
pub fn try_next_subnet(e: &Ec2Error) -> bool {
    matches!(e, Ec2Error::Api { code, .. } if matches!(
        code.as_str(),
        "InsufficientFreeAddressesInSubnet" | "InsufficientCidrBlocks" | "InvalidSubnetID.NotFound"
    ))
}

/// Whether a failed `AssignPrivateIpAddresses` says the ENI's subnet has no room left
/// ([`vpcnet_ipam::Pool::mark_subnet_full`]).
pub fn subnet_full(e: &Ec2Error) -> bool {
    matches!(e, Ec2Error::Api { code, .. } if matches!(
        code.as_str(),
        "InsufficientFreeAddressesInSubnet" | "InsufficientCidrBlocks"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(id: &str, free: u32, tags: &[(&str, &str)]) -> Subnet {
        Subnet {
            subnet_id: id.into(),
            vpc_id: "vpc-1".into(),
            availability_zone: "us-east-1a".into(),
            cidr_block: "10.0.0.0/24".parse().unwrap(),
            available_ip_address_count: free,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn ids(v: Vec<&Subnet>) -> Vec<&str> {
        v.into_iter().map(|s| s.subnet_id.as_str()).collect()
    }

    #[test]
    fn the_node_subnet_and_tagged_subnets_most_free_first() {
        let subnets = [
            subnet("subnet-node", 10, &[]),
            subnet("subnet-big", 200, &[(CNI_ROLE_TAG, "1")]),
            subnet("subnet-mid", 50, &[(CNI_ROLE_TAG, "shared")]),
            subnet("subnet-untagged", 999, &[]),
            subnet("subnet-excluded", 999, &[(CNI_ROLE_TAG, "0")]),
            subnet("subnet-empty-value", 999, &[(CNI_ROLE_TAG, "")]),
        ];
        assert_eq!(
            ids(choose(&subnets, "subnet-node", "")),
            ["subnet-big", "subnet-mid", "subnet-node"]
        );
    }

    #[test]
    fn the_node_subnet_tagged_0_is_left_out_and_ties_keep_ec2_order() {
        let subnets = [
            subnet("subnet-node", 100, &[(CNI_ROLE_TAG, "0")]),
            subnet("subnet-b", 5, &[(CNI_ROLE_TAG, "1")]),
            subnet("subnet-c", 5, &[(CNI_ROLE_TAG, "1")]),
        ];
        assert_eq!(
            ids(choose(&subnets, "subnet-node", "")),
            ["subnet-b", "subnet-c"]
        );
        // Tagged 1, the node's subnet is in like any other.
        let subnets = [subnet("subnet-node", 100, &[(CNI_ROLE_TAG, "1")])];
        assert_eq!(ids(choose(&subnets, "subnet-node", "")), ["subnet-node"]);
    }

    #[test]
    fn cluster_tags_reserve_a_subnet_when_cluster_name_is_set() {
        let subnets = [
            subnet(
                "subnet-ours",
                10,
                &[(CNI_ROLE_TAG, "1"), ("kubernetes.io/cluster/prod", "owned")],
            ),
            subnet(
                "subnet-theirs",
                20,
                &[(CNI_ROLE_TAG, "1"), ("kubernetes.io/cluster/dev", "shared")],
            ),
            subnet(
                "subnet-both",
                30,
                &[
                    (CNI_ROLE_TAG, "1"),
                    ("kubernetes.io/cluster/dev", "shared"),
                    ("kubernetes.io/cluster/prod", "shared"),
                ],
            ),
            subnet("subnet-any", 5, &[(CNI_ROLE_TAG, "1")]),
        ];
        assert_eq!(
            ids(choose(&subnets, "subnet-node", "prod")),
            ["subnet-both", "subnet-ours", "subnet-any"]
        );
        // Without CLUSTER_NAME cluster tags are not looked at.
        assert_eq!(choose(&subnets, "subnet-node", "").len(), 4);
    }

    #[test]
    fn none_valid_names_the_subnet_the_zone_and_the_fix() {
        let subnets = [
            subnet("subnet-node", 100, &[(CNI_ROLE_TAG, "0")]),
            subnet("subnet-b", 5, &[]),
        ];
        assert!(choose(&subnets, "subnet-node", "").is_empty());
        let m = none_valid(&subnets, "subnet-node", "vpc-1", "us-east-1a");
        assert!(
            m.contains("subnet-node is tagged kubernetes.io/role/cni=0")
                && m.contains("2 subnets of vpc-1 in us-east-1a")
                && m.contains("tag a subnet of us-east-1a kubernetes.io/role/cni=1"),
            "{m}"
        );
    }

    #[test]
    fn only_subnet_capacity_errors_move_on() {
        let api = |code: &str| Ec2Error::Api {
            action: Action::CreateNetworkInterface,
            code: code.into(),
            message: "no".into(),
            status: Some(400),
            retryable: false,
            source: None,
        };
        assert!(try_next_subnet(&api("InsufficientFreeAddressesInSubnet")));
        assert!(try_next_subnet(&api("InsufficientCidrBlocks")));
        assert!(try_next_subnet(&api("InvalidSubnetID.NotFound")));
        assert!(!try_next_subnet(&api("RequestLimitExceeded")));
        assert!(!try_next_subnet(&api("InvalidGroup.NotFound")));
        assert!(subnet_full(&api("InsufficientCidrBlocks")));
        assert!(!subnet_full(&api("InvalidSubnetID.NotFound")));
    }
}
