//! Subnet discovery's tag rule (the VPC CNI's `ENABLE_SUBNET_DISCOVERY`): which subnets of the
//! node's zone a new ENI may go to, by their `kubernetes.io/role/cni` and
//! `kubernetes.io/cluster/*` tags. Shared by the agent (which reads the tags from
//! `DescribeSubnets`) and the capacity planner (which reads them from its input).

use std::collections::BTreeMap;

/// The subnet tag the VPC CNI discovers subnets by.
pub const CNI_ROLE_TAG: &str = "kubernetes.io/role/cni";
/// Prefix of the cluster tags that restrict a subnet to clusters.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";

/// The subnet's `kubernetes.io/role/cni` value, empty when untagged.
pub fn role(tags: &BTreeMap<String, String>) -> &str {
    tags.get(CNI_ROLE_TAG).map(String::as_str).unwrap_or("")
}

/// Whether a subnet may get new ENIs: the node's own subnet unless tagged `…/role/cni=0`;
/// another one only when tagged `…/role/cni` with a value other than `0` and, when
/// `cluster_name` is set, either no `kubernetes.io/cluster/*` tag or this cluster's.
pub fn eligible(tags: &BTreeMap<String, String>, is_node_subnet: bool, cluster_name: &str) -> bool {
    match role(tags) {
        "0" => false,
        "" => is_node_subnet,
        _ => {
            let mut clusters = tags
                .keys()
                .filter_map(|k| k.strip_prefix(CLUSTER_TAG_PREFIX))
                .peekable();
            cluster_name.is_empty()
                || clusters.peek().is_none()
                || clusters.any(|c| c == cluster_name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_node_subnet_unless_excluded_and_tagged_others() {
        assert!(eligible(&tags(&[]), true, ""));
        assert!(!eligible(&tags(&[]), false, ""));
        assert!(!eligible(&tags(&[(CNI_ROLE_TAG, "0")]), true, ""));
        assert!(eligible(&tags(&[(CNI_ROLE_TAG, "1")]), false, ""));
        let other = tags(&[
            (CNI_ROLE_TAG, "1"),
            ("kubernetes.io/cluster/blue", "shared"),
        ]);
        assert!(eligible(&other, false, ""));
        assert!(eligible(&other, false, "blue"));
        assert!(!eligible(&other, false, "green"));
    }
}
