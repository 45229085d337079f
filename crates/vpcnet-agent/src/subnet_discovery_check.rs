//! `ENABLE_SUBNET_DISCOVERY` (the VPC CNI's default `true`, set by its v1.23 manifest) checked
//! at start. Without custom networking the VPC CNI then places a new ENI in the subnet with the
//! most free addresses among those of the node's VPC and zone that it considers valid: the
//! node's own subnet unless tagged `kubernetes.io/role/cni=0`, and any other subnet tagged
//! `kubernetes.io/role/cni` with a value other than `0` (and, when `CLUSTER_NAME` is set,
//! either no `kubernetes.io/cluster/*` tag or `kubernetes.io/cluster/<CLUSTER_NAME>`).
//! vpcnet always uses the node's subnet: the same placement exactly when no other subnet is
//! valid and the node's is not excluded, which is what [`conflict`] decides. When it is not
//! the same, the agent refuses to start, before any EC2 mutating call, rather than put ENIs
//! where the VPC CNI would not.
//!
//! One `DescribeSubnets` (filters `vpc-id`, `tag-key`): a VPC without the tag costs nothing
//! more. When the call fails (e.g. the role lacks `ec2:DescribeSubnets`), the VPC CNI falls
//! back to the node's subnet, as vpcnet does, so the agent logs a warning and goes on.

use vpcnet_ec2::Subnet;

use crate::cloud::Ec2Api;
use crate::config::{ConfigError, InvalidSetting};

/// The subnet tag the VPC CNI discovers subnets by.
pub const CNI_ROLE_TAG: &str = "kubernetes.io/role/cni";
/// Prefix of the cluster tags that restrict a subnet to clusters.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";

/// Whether the VPC CNI would use `s`, a subnet other than the node's, for ENIs.
fn discovered(s: &Subnet, cluster_name: &str) -> bool {
    let role = s.tags.get(CNI_ROLE_TAG).map(String::as_str).unwrap_or("");
    if role.is_empty() || role == "0" {
        return false;
    }
    let cluster_tags: Vec<&String> = s
        .tags
        .keys()
        .filter(|k| k.starts_with(CLUSTER_TAG_PREFIX))
        .collect();
    cluster_name.is_empty()
        || cluster_tags.is_empty()
        || cluster_tags
            .iter()
            .any(|k| k[CLUSTER_TAG_PREFIX.len()..] == *cluster_name)
}

/// Why the VPC CNI would place ENIs differently from vpcnet, given the node's subnet
/// (`node_subnet`, with its zone when known) and the subnets of its VPC tagged
/// [`CNI_ROLE_TAG`]; `None` when it would place them as vpcnet does.
pub fn conflict(
    node_subnet: &str,
    node_zone: Option<&str>,
    tagged: &[Subnet],
    cluster_name: &str,
) -> Option<String> {
    if let Some(own) = tagged.iter().find(|s| s.subnet_id == node_subnet) {
        if own.tags.get(CNI_ROLE_TAG).map(String::as_str) == Some("0") {
            return Some(format!(
                "the node's subnet {node_subnet} is tagged {CNI_ROLE_TAG}=0, so the VPC CNI \
                 would create no ENI in it; vpcnet places every ENI there"
            ));
        }
    }
    let zone = node_zone?;
    let others: Vec<String> = tagged
        .iter()
        .filter(|s| s.subnet_id != node_subnet && s.availability_zone == zone)
        .filter(|s| discovered(s, cluster_name))
        .map(|s| s.subnet_id.clone())
        .collect();
    (!others.is_empty()).then(|| {
        format!(
            "subnet {} of the node's VPC and zone {zone} is tagged {CNI_ROLE_TAG}, so the VPC \
             CNI would place ENIs there when it has more free addresses than the node's subnet \
             {node_subnet}; vpcnet places every ENI in the node's subnet and does not discover \
             subnets yet",
            others.join(", ")
        )
    })
}

/// The refusal of `ENABLE_SUBNET_DISCOVERY=true` for `why`.
pub fn refusal(why: String) -> ConfigError {
    ConfigError::from(InvalidSetting {
        var: "ENABLE_SUBNET_DISCOVERY",
        value: "true".into(),
        problem: why,
        accepted: "set ENABLE_SUBNET_DISCOVERY=false to keep ENIs in the node's subnet, or \
                   choose the subnet of the node's ENIs with custom networking \
                   (AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true and an ENIConfig)"
            .into(),
        refused: true,
    })
}

/// Runs the check against EC2: `Err` (a [`ConfigError`]) when the VPC CNI would place ENIs
/// elsewhere. EC2 errors are logged and let the agent start (see the module doc).
pub async fn check(
    ec2: &dyn Ec2Api,
    vpc_id: &str,
    node_subnet: &str,
    cluster_name: &str,
) -> Result<(), ConfigError> {
    let tagged = match ec2
        .describe_vpc_subnets_with_tag_key(vpc_id, CNI_ROLE_TAG)
        .await
    {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(
                "ENABLE_SUBNET_DISCOVERY: could not list the subnets of {vpc_id} tagged \
                 {CNI_ROLE_TAG} ({e}); the VPC CNI then uses the node's subnet too"
            );
            return Ok(());
        }
    };
    if tagged.is_empty() {
        return Ok(());
    }
    let zone = match tagged.iter().find(|s| s.subnet_id == node_subnet) {
        Some(s) => Some(s.availability_zone.clone()),
        None => match ec2.describe_subnets(&[node_subnet.to_string()]).await {
            Ok(v) => v.into_iter().next().map(|s| s.availability_zone),
            Err(e) => {
                tracing::warn!("ENABLE_SUBNET_DISCOVERY: could not describe {node_subnet}: {e}");
                None
            }
        },
    };
    match conflict(node_subnet, zone.as_deref(), &tagged, cluster_name) {
        Some(why) => Err(refusal(why)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(id: &str, zone: &str, tags: &[(&str, &str)]) -> Subnet {
        Subnet {
            subnet_id: id.into(),
            vpc_id: "vpc-1".into(),
            availability_zone: zone.into(),
            cidr_block: "10.0.0.0/24".parse().unwrap(),
            available_ip_address_count: 100,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    const A: &str = "us-east-1a";

    #[test]
    fn no_other_valid_subnet_means_the_same_placement() {
        let cases: Vec<Vec<Subnet>> = vec![
            vec![],
            // The node's own subnet tagged 1: included either way.
            vec![subnet("subnet-node", A, &[(CNI_ROLE_TAG, "1")])],
            // Excluded or untagged-valued others.
            vec![subnet("subnet-b", A, &[(CNI_ROLE_TAG, "0")])],
            vec![subnet("subnet-b", A, &[(CNI_ROLE_TAG, "")])],
            // Another zone.
            vec![subnet("subnet-b", "us-east-1b", &[(CNI_ROLE_TAG, "1")])],
            // Another cluster's.
            vec![subnet(
                "subnet-b",
                A,
                &[
                    (CNI_ROLE_TAG, "1"),
                    ("kubernetes.io/cluster/other", "shared"),
                ],
            )],
        ];
        for tagged in cases {
            assert_eq!(
                conflict("subnet-node", Some(A), &tagged, "prod"),
                None,
                "{tagged:?}"
            );
        }
    }

    #[test]
    fn a_discoverable_subnet_or_an_excluded_node_subnet_is_a_conflict() {
        let why = conflict(
            "subnet-node",
            Some(A),
            &[subnet("subnet-b", A, &[(CNI_ROLE_TAG, "1")])],
            "",
        )
        .unwrap();
        assert!(
            why.contains("subnet-b") && why.contains("subnet-node"),
            "{why}"
        );
        for tags in [
            vec![(CNI_ROLE_TAG, "1"), ("kubernetes.io/cluster/prod", "owned")],
            vec![(CNI_ROLE_TAG, "yes")],
        ] {
            assert!(
                conflict(
                    "subnet-node",
                    Some(A),
                    &[subnet("subnet-b", A, &tags)],
                    "prod"
                )
                .is_some(),
                "{tags:?}"
            );
        }
        // Without CLUSTER_NAME the cluster tags are not looked at.
        let other = subnet(
            "subnet-b",
            A,
            &[
                (CNI_ROLE_TAG, "1"),
                ("kubernetes.io/cluster/other", "shared"),
            ],
        );
        assert!(conflict("subnet-node", Some(A), &[other], "").is_some());
        let why = conflict(
            "subnet-node",
            None,
            &[subnet("subnet-node", A, &[(CNI_ROLE_TAG, "0")])],
            "",
        )
        .unwrap();
        assert!(why.contains("=0"), "{why}");
    }

    #[test]
    fn the_refusal_reads_like_the_others() {
        let e = refusal("why".into());
        assert_eq!(
            e.to_string(),
            "refused ENABLE_SUBNET_DISCOVERY=\"true\": why; instead: set \
             ENABLE_SUBNET_DISCOVERY=false to keep ENIs in the node's subnet, or choose the \
             subnet of the node's ENIs with custom networking \
             (AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true and an ENIConfig)"
        );
    }
}
