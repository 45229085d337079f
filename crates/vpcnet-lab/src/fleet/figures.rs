//! A fleet run's figures (pure): the spread of each node's time to its first pod and to a full
//! warm pool ([`super::timeline`]), the EC2 requests its nodes made by action (from the lab
//! cloud's request log, retries included) and how many EC2 throttled, and the floors the
//! account's buckets impose on the calls that succeeded (`vpcnet-capacity`'s
//! [`vpcnet_capacity::rates`]), so a run reads as "the last node served its first pod at
//! 1.1× the floor".

use std::collections::BTreeMap;

use serde::Serialize;
use vpcnet_capacity::sim::Spread;
use vpcnet_emu::request_log::{Api, RequestRecord};
use vpcnet_emu::AccountLimits;
use vpcnet_limits::api_rates::BucketSpec;

use super::timeline::Timeline;

/// A floor: seconds, and the action whose bucket sets it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Floor {
    pub seconds: f64,
    pub limiting_action: Option<String>,
}

/// What a fleet run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetFigures {
    pub nodes: usize,
    /// From the start until each node's agent made its first EC2 request (how much at once
    /// "at once" was: process start-up, IMDS).
    pub first_call: Spread,
    /// From the start until each node could serve its first pod (agent serving and an address).
    pub first_pod: Spread,
    /// From the start until each node's ENIs and addresses stopped changing.
    pub warm_full: Spread,
    /// Attached ENIs and pod addresses over the fleet at the end.
    pub enis: usize,
    pub addresses: usize,
    /// Every EC2 request the nodes made, retries included, by action.
    pub calls: BTreeMap<String, u64>,
    /// Of those, answered `RequestLimitExceeded`.
    pub throttled: BTreeMap<String, u64>,
    /// Of those, answered with another error.
    pub failed: BTreeMap<String, u64>,
    /// The least time the account's buckets need for the calls that succeeded before each
    /// node's first pod.
    pub floor_first_pod: Floor,
    /// The same for every call that succeeded.
    pub floor_all: Floor,
    /// Other callers' share of every bucket's refill assumed by the floors.
    pub other_tools_share: f64,
}

impl FleetFigures {
    /// Every EC2 request.
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// Requests answered `RequestLimitExceeded`.
    pub fn total_throttled(&self) -> u64 {
        self.throttled.values().sum()
    }

    /// Throttled requests as a share (0..1) of all.
    pub fn throttled_share(&self) -> f64 {
        match self.total_calls() {
            0 => 0.0,
            n => self.total_throttled() as f64 / n as f64,
        }
    }

    /// The last node's first pod over its floor (`None` when the floor is 0: every call
    /// fit in the buckets' burst).
    pub fn last_over_floor(&self) -> Option<f64> {
        (self.floor_first_pod.seconds > 0.0)
            .then(|| self.first_pod.last_ms as f64 / 1000.0 / self.floor_first_pod.seconds)
    }
}

/// The fleet node that made `r`, when `r` is an EC2 request made at or after `start_ms` (on
/// the emulator's clock) by one of the fleet's instances (`node_of`: instance ID → node).
pub fn fleet_caller<'a>(
    r: &RequestRecord,
    start_ms: u64,
    node_of: &'a BTreeMap<String, String>,
) -> Option<&'a String> {
    if r.api != Api::Ec2 || r.at_ms < start_ms {
        return None;
    }
    r.instance_id.as_ref().and_then(|i| node_of.get(i))
}

/// Whether EC2 answered `r` with `RequestLimitExceeded`.
pub fn is_throttled(r: &RequestRecord) -> bool {
    r.error_code.as_deref() == Some("RequestLimitExceeded")
}

/// The figures of a run: `timeline` in milliseconds since the start, `records` the lab cloud's
/// request log (its `at_ms` on the emulator's clock, `start_ms` being the start on it), and
/// `node_of` each node's instance ID → node name. Requests of other callers (no instance, or
/// an instance not in the fleet) and before the start are left out.
pub fn figures(
    timeline: &Timeline,
    records: &[RequestRecord],
    start_ms: u64,
    node_of: &BTreeMap<String, String>,
    limits: &AccountLimits,
    other_tools_share: f64,
) -> FleetFigures {
    let mut calls = BTreeMap::<String, u64>::new();
    let mut throttled = BTreeMap::<String, u64>::new();
    let mut failed = BTreeMap::<String, u64>::new();
    let mut before_first = BTreeMap::<&str, u64>::new();
    let mut succeeded = BTreeMap::<&str, u64>::new();
    let mut first_call = BTreeMap::<&str, u64>::new();
    for r in records {
        let Some(node) = fleet_caller(r, start_ms, node_of) else {
            continue;
        };
        *calls.entry(r.action.clone()).or_default() += 1;
        first_call.entry(node).or_insert(r.at_ms - start_ms);
        if r.ok() {
            *succeeded.entry(&r.action).or_default() += 1;
            let first = timeline.nodes.get(node).and_then(|t| t.first_pod_ms());
            if first.is_none_or(|f| r.at_ms - start_ms <= f) {
                *before_first.entry(&r.action).or_default() += 1;
            }
        } else if is_throttled(r) {
            *throttled.entry(r.action.clone()).or_default() += 1;
        } else {
            *failed.entry(r.action.clone()).or_default() += 1;
        }
    }
    let floor = |c: &BTreeMap<&str, u64>| {
        let (seconds, limiting_action) = vpcnet_capacity::rates::floor_named(
            c.iter().map(|(a, n)| (*a, *n)),
            other_tools_share,
            |action| match limits.enabled {
                // The agents' describes are filtered (they name their instance or ENIs).
                true => limits.ec2_bucket(action, true),
                false => BucketSpec::new(u32::MAX, f64::INFINITY),
            },
        );
        Floor {
            seconds,
            limiting_action,
        }
    };
    let t = timeline.nodes.values();
    FleetFigures {
        nodes: timeline.nodes.len(),
        first_call: Spread::of(first_call.into_values().collect()),
        first_pod: Spread::of(t.clone().filter_map(|t| t.first_pod_ms()).collect()),
        warm_full: Spread::of(
            t.clone()
                .filter_map(|t| Some(t.first_pod_ms()?.max(t.last_change_ms.unwrap_or(0))))
                .collect(),
        ),
        enis: t.clone().map(|t| t.holdings.enis).sum(),
        addresses: t.map(|t| t.holdings.addresses).sum(),
        calls,
        throttled,
        failed,
        floor_first_pod: floor(&before_first),
        floor_all: floor(&succeeded),
        other_tools_share,
    }
}

#[cfg(test)]
mod tests {
    use super::super::timeline::Holdings;
    use super::*;

    fn on() -> AccountLimits {
        AccountLimits {
            enabled: true,
            ..Default::default()
        }
    }

    fn rec(at_ms: u64, instance: Option<&str>, action: &str, error: Option<&str>) -> RequestRecord {
        RequestRecord {
            seq: 0,
            at_ms,
            api: Api::Ec2,
            action: action.into(),
            mutating: false,
            instance_id: instance.map(str::to_string),
            source: None,
            user_agent: None,
            access_key: None,
            status: if error.is_some() { 503 } else { 200 },
            error_code: error.map(str::to_string),
        }
    }

    #[test]
    fn counts_the_fleets_calls_and_floors_what_succeeded() {
        let mut t = Timeline::new(["n1", "n2"]);
        t.observe_serving("n1", 500);
        t.observe_serving("n2", 500);
        let one = |a| {
            [(
                "n1".to_string(),
                Holdings {
                    enis: 1,
                    addresses: a,
                },
            )]
            .into_iter()
            .collect()
        };
        t.observe_cloud(1_000, &one(9));
        t.observe_cloud(
            3_000,
            &[
                (
                    "n1".to_string(),
                    Holdings {
                        enis: 2,
                        addresses: 18,
                    },
                ),
                (
                    "n2".to_string(),
                    Holdings {
                        enis: 1,
                        addresses: 9,
                    },
                ),
            ]
            .into_iter()
            .collect(),
        );
        let node_of = [("i-1", "n1"), ("i-2", "n2")]
            .map(|(i, n)| (i.to_string(), n.to_string()))
            .into_iter()
            .collect();
        // The emulator's clock is 10 s ahead of the fleet's.
        let records = vec![
            rec(9_000, Some("i-1"), "DescribeNetworkInterfaces", None), // before the start
            rec(10_100, Some("i-1"), "AssignPrivateIpAddresses", None),
            rec(
                10_200,
                Some("i-2"),
                "AssignPrivateIpAddresses",
                Some("RequestLimitExceeded"),
            ),
            rec(10_300, None, "DescribeNetworkInterfaces", None), // not a node
            rec(10_400, Some("i-9"), "DescribeNetworkInterfaces", None), // not in the fleet
            rec(12_000, Some("i-1"), "CreateNetworkInterface", None), // after n1's first pod
            rec(12_500, Some("i-2"), "AssignPrivateIpAddresses", None),
            rec(
                12_600,
                Some("i-2"),
                "AttachNetworkInterface",
                Some("InvalidParameterValue"),
            ),
        ];
        let f = figures(&t, &records, 10_000, &node_of, &on(), 0.0);
        assert_eq!(f.nodes, 2);
        assert_eq!((f.first_call.p50_ms, f.first_call.last_ms), (100, 200));
        assert_eq!(f.first_pod.last_ms, 3_000);
        assert_eq!(f.first_pod.p50_ms, 1_000);
        assert_eq!(f.warm_full.last_ms, 3_000);
        assert_eq!((f.enis, f.addresses), (3, 27));
        assert_eq!(f.total_calls(), 5);
        assert_eq!(f.calls["AssignPrivateIpAddresses"], 3);
        assert_eq!(f.total_throttled(), 1);
        assert_eq!(f.failed["AttachNetworkInterface"], 1);
        assert!((f.throttled_share() - 0.2).abs() < 1e-9);
        // Two assigns before first pods: well inside the burst.
        assert_eq!(f.floor_first_pod.seconds, 0.0);
        assert_eq!(f.last_over_floor(), None);
    }

    #[test]
    fn the_floor_counts_successes_before_each_first_pod() {
        let mut t = Timeline::new(["n1"]);
        t.observe_serving("n1", 0);
        t.observe_cloud(
            1_000,
            &[(
                "n1".to_string(),
                Holdings {
                    enis: 1,
                    addresses: 9,
                },
            )]
            .into_iter()
            .collect(),
        );
        let node_of = [("i-1".to_string(), "n1".to_string())]
            .into_iter()
            .collect();
        // 150 assigns succeed before the first pod (100 burst + 50 at 5/s = 10 s), 50 after.
        let mut records: Vec<_> = (0..150)
            .map(|_| rec(500, Some("i-1"), "AssignPrivateIpAddresses", None))
            .collect();
        records.extend((0..50).map(|_| rec(2_000, Some("i-1"), "AssignPrivateIpAddresses", None)));
        let f = figures(&t, &records, 0, &node_of, &on(), 0.0);
        assert_eq!(f.floor_first_pod.seconds, 10.0);
        assert_eq!(
            f.floor_first_pod.limiting_action.as_deref(),
            Some("AssignPrivateIpAddresses")
        );
        assert_eq!(f.floor_all.seconds, 20.0);
        assert_eq!(f.last_over_floor(), Some(0.1));
        // Other tools taking half of every refill double the wait.
        assert_eq!(
            figures(&t, &records, 0, &node_of, &on(), 0.5)
                .floor_first_pod
                .seconds,
            20.0
        );
        // The emulator's configured buckets set the floor; with metering off there is none.
        let mut small = on();
        small.actions.insert(
            "AssignPrivateIpAddresses".into(),
            vpcnet_emu::BucketOverride::new(50, 10.0),
        );
        assert_eq!(
            figures(&t, &records, 0, &node_of, &small, 0.0)
                .floor_first_pod
                .seconds,
            10.0
        );
        let off = AccountLimits::default();
        assert_eq!(
            figures(&t, &records, 0, &node_of, &off, 0.0)
                .floor_all
                .seconds,
            0.0
        );
    }
}
