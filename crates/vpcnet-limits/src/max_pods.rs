//! The kubelet `maxPods` formula (EKS AMI `max-pods-calculator.sh` semantics).

use crate::InstanceLimits;

/// Inputs to [`max_pods`] besides the instance type; flag names follow AWS's
/// `max-pods-calculator.sh`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaxPodsOptions {
    /// `--cni-custom-networking-enabled`: pods never use the primary ENI, so one ENI less.
    pub custom_networking: bool,
    /// `--cni-prefix-delegation-enabled`: each IPv4 slot holds a /28 (16 addresses); Nitro only,
    /// other hypervisors fall back to secondary-IP mode.
    pub prefix_delegation: bool,
    /// `--cni-max-eni N` (the VPC CNI's `MAX_ENI`): caps ENIs before the custom-networking
    /// subtraction.
    pub max_eni: Option<u32>,
    /// `--show-max-allowed`: skip the recommended cap (110 for ≤ 30 vCPUs, else 250).
    pub show_max_allowed: bool,
}

/// Result of [`max_pods`] with the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPodsReport {
    /// The value for kubelet `maxPods` (a count of pods).
    pub max_pods: u32,
    /// The uncapped value from the ENI formula.
    pub uncapped: u32,
    /// ENIs used for pods after `max_eni` and the custom-networking subtraction.
    pub enis: u32,
    /// Whether prefix delegation was applied (requested and supported).
    pub prefix_delegation: bool,
}

/// Max pods for an instance type.
///
/// Secondary-IP mode: `ENIs × (IPv4 per ENI − 1) + 2`; prefix delegation (Nitro only):
/// `ENIs × (IPv4 per ENI − 1) × 16 + 2`. ENIs are the default network card's, capped by
/// `max_eni`, minus one with custom networking. Unless `show_max_allowed`, the result is
/// capped by [`recommended_cap`].
pub fn max_pods(limits: &InstanceLimits, opts: MaxPodsOptions) -> MaxPodsReport {
    let mut enis = limits.eni_limit;
    if let Some(cap) = opts.max_eni {
        enis = enis.min(cap);
    }
    if opts.custom_networking {
        enis = enis.saturating_sub(1);
    }
    let slots = limits.ipv4_per_eni.saturating_sub(1);
    let pd = opts.prefix_delegation && limits.supports_prefix_delegation();
    let per_slot = if pd { 16 } else { 1 };
    let uncapped = enis * slots * per_slot + 2;
    let max_pods = if opts.show_max_allowed {
        uncapped
    } else {
        uncapped.min(recommended_cap(limits))
    };
    MaxPodsReport {
        max_pods,
        uncapped,
        enis,
        prefix_delegation: pd,
    }
}

/// The recommended max-pods ceiling: 110 for instance types with ≤ 30 vCPUs, else 250.
/// When the vCPU count is unknown, 110 (the kubelet default, the safe choice).
pub fn recommended_cap(limits: &InstanceLimits) -> u32 {
    match limits.vcpus {
        Some(v) if v > 30 => 250,
        _ => 110,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lookup;

    fn mp(t: &str, o: MaxPodsOptions) -> u32 {
        max_pods(lookup(t).unwrap(), o).max_pods
    }

    #[test]
    fn calculator_examples() {
        let d = MaxPodsOptions::default();
        let cn = MaxPodsOptions {
            custom_networking: true,
            ..d
        };
        let pd = MaxPodsOptions {
            prefix_delegation: true,
            ..d
        };
        let pdx = MaxPodsOptions {
            prefix_delegation: true,
            show_max_allowed: true,
            ..d
        };
        let all = MaxPodsOptions {
            show_max_allowed: true,
            ..d
        };
        assert_eq!(
            (
                mp("t3.medium", d),
                mp("t3.medium", cn),
                mp("t3.medium", pd),
                mp("t3.medium", pdx)
            ),
            (17, 12, 110, 242)
        );
        assert_eq!(
            (
                mp("m5.large", d),
                mp("m5.large", cn),
                mp("m5.large", pd),
                mp("m5.large", pdx)
            ),
            (29, 20, 110, 434)
        );
        assert_eq!(mp("m4.xlarge", pd), 58);
        assert_eq!(mp("c5.18xlarge", d), 250);
        assert_eq!(mp("c5.18xlarge", all), 737);
        assert_eq!(mp("c6in.32xlarge", all), 394);
        assert_eq!(mp("m5.metal", pdx), 737);
    }

    #[test]
    fn max_eni_caps_before_custom_networking() {
        let o = MaxPodsOptions {
            max_eni: Some(2),
            custom_networking: true,
            ..Default::default()
        };
        // m5.large: min(3,2) - 1 = 1 ENI × 9 + 2
        assert_eq!(mp("m5.large", o), 11);
    }
}
