//! kube-reserved and eviction thresholds (the EKS AMI's formulas, after GKE's node allocatable).

/// Memory kept for kubelet and the runtime, in MiB: `11 × maxPods + 255`, where `max_pods` is
/// the value kubelet actually runs with.
pub fn memory_mebibytes_to_reserve(max_pods: u32) -> u64 {
    11 * u64::from(max_pods) + 255
}

/// CPU kept for kubelet and the runtime, in millicores, from the CPU count: 6 % of the first
/// core, 1 % of the second, 0.5 % of the third and fourth, 0.25 % of every further core.
/// Integer arithmetic per range, rounding down (2 CPUs → 70m, 32 CPUs → 150m).
pub fn cpu_millicores_to_reserve(vcpus: u32) -> u64 {
    let total = u64::from(vcpus) * 1000;
    // (range start, range end, hundredths of a percent)
    let ranges = [
        (0, 1000, 600),
        (1000, 2000, 100),
        (2000, 4000, 50),
        (4000, u64::MAX, 25),
    ];
    ranges
        .iter()
        .filter(|(start, _, _)| total > *start)
        .map(|(start, end, pct)| (total.min(*end) - start) * pct / 10_000)
        .sum()
}

/// kube-reserved ephemeral storage.
pub const EPHEMERAL_STORAGE_TO_RESERVE: &str = "1Gi";

/// evictionHard thresholds: `(signal, threshold)`.
pub const EVICTION_HARD: [(&str, &str); 3] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_examples() {
        // 1: 60; 2: 60+10; 4: 60+10+10; 32: 60+10+10+70; 96: 60+10+10+230.
        let got: Vec<u64> = [0, 1, 2, 3, 4, 8, 32, 96]
            .iter()
            .map(|&c| cpu_millicores_to_reserve(c))
            .collect();
        assert_eq!(got, vec![0, 60, 70, 75, 80, 90, 150, 310]);
    }

    #[test]
    fn memory_examples() {
        assert_eq!(memory_mebibytes_to_reserve(29), 574);
        assert_eq!(memory_mebibytes_to_reserve(110), 1465);
        assert_eq!(memory_mebibytes_to_reserve(737), 8362);
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// More CPUs never reserve less, and past 4 CPUs every CPU adds 2.5m (rounded down).
        #[test]
        fn cpu_reserve_monotonic(n in 0u32..1024) {
            prop_assert!(cpu_millicores_to_reserve(n + 1) >= cpu_millicores_to_reserve(n));
            if n >= 4 {
                prop_assert_eq!(cpu_millicores_to_reserve(n), 80 + u64::from(n - 4) * 1000 * 25 / 10_000);
            }
        }
    }
}
