//! Does kubelet's pod capacity fit the addresses this node can ever get? A node whose
//! `capacity.pods` (kubelet `maxPods`) exceeds what its ENIs can hold schedules pods that never
//! get an address and stay `ContainerCreating` (a long-standing VPC CNI pain point). Pure.

use vpcnet_limits::{max_pods, InstanceLimits, MaxPodsOptions};

/// The comparison for one node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CapacityCheck {
    /// The Node's `status.capacity.pods` (kubelet `maxPods`), a count of pods.
    pub capacity_pods: u32,
    /// Pods the node can run with an address: ENIs × (IPv4 per ENI − 1) (× 16 with prefix
    /// delegation) + 2 host-network pods, the max-pods formula without the recommended cap.
    pub supported_pods: u32,
    /// ENIs that carry pod addresses (after `MAX_ENI` and custom networking).
    pub enis: u32,
    /// Prefix delegation in effect.
    pub prefix_delegation: bool,
}

impl CapacityCheck {
    /// Computes the check for `limits` in the agent's mode (the same inputs as
    /// `vpcnet max-pods --show-max-allowed`).
    pub fn new(capacity_pods: u32, limits: &InstanceLimits, opts: MaxPodsOptions) -> Self {
        let r = max_pods(
            limits,
            MaxPodsOptions {
                show_max_allowed: true,
                ..opts
            },
        );
        CapacityCheck {
            capacity_pods,
            supported_pods: r.uncapped,
            enis: r.enis,
            prefix_delegation: r.prefix_delegation,
        }
    }

    /// Whether kubelet may schedule more pods than can get an address.
    pub fn exceeded(&self) -> bool {
        self.capacity_pods > self.supported_pods
    }

    /// The operator-facing warning (for the Node Event and the log), naming the fix.
    pub fn message(&self, instance_type: &str) -> String {
        format!(
            "kubelet maxPods is {} but this {instance_type} can give addresses to at most {} pods \
             ({} ENIs{}, + 2 host-network pods): pods beyond that stay ContainerCreating. Set \
             kubelet maxPods to {} (`vpcnet max-pods {instance_type} --show-max-allowed`{}) or \
             enable prefix delegation on a Nitro instance",
            self.capacity_pods,
            self.supported_pods,
            self.enis,
            if self.prefix_delegation {
                " of /28 prefixes"
            } else {
                " of secondary IPs"
            },
            self.supported_pods,
            if self.prefix_delegation {
                " --cni-prefix-delegation-enabled"
            } else {
                ""
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m5_large() -> &'static InstanceLimits {
        vpcnet_limits::lookup("m5.large").unwrap()
    }

    #[test]
    fn the_published_max_pods_fits() {
        // eni-max-pods.txt: m5.large 29 = 3 × (10 − 1) + 2.
        let c = CapacityCheck::new(29, m5_large(), MaxPodsOptions::default());
        assert_eq!(c.supported_pods, 29);
        assert!(!c.exceeded());
    }

    #[test]
    fn kubelet_default_110_exceeds_secondary_ip_mode() {
        let c = CapacityCheck::new(110, m5_large(), MaxPodsOptions::default());
        assert!(c.exceeded());
        let m = c.message("m5.large");
        assert!(m.contains("maxPods is 110"), "{m}");
        assert!(m.contains("at most 29 pods"), "{m}");
    }

    #[test]
    fn prefix_delegation_and_custom_networking_change_the_ceiling() {
        let pd = CapacityCheck::new(
            110,
            m5_large(),
            MaxPodsOptions {
                prefix_delegation: true,
                ..Default::default()
            },
        );
        assert_eq!(pd.supported_pods, 3 * 9 * 16 + 2);
        assert!(!pd.exceeded());
        let cn = CapacityCheck::new(
            29,
            m5_large(),
            MaxPodsOptions {
                custom_networking: true,
                ..Default::default()
            },
        );
        assert_eq!(cn.supported_pods, 2 * 9 + 2);
        assert!(cn.exceeded());
    }
}
