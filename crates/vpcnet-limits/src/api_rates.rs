//! The account's API rate limits: the request-token buckets with which EC2 and ELBv2 meter
//! every AWS account per Region, as data. Pure: no I/O, no clock.
//!
//! Both services use the token bucket algorithm: a bucket holds at most `capacity` tokens
//! and starts full, every request takes one token or is throttled, and `refill_per_sec`
//! tokens come back each second up to the capacity. Every caller of the account (every
//! access key, every node) draws from the same buckets.
//!
//! # EC2
//!
//! Source: "Request throttling for the Amazon EC2 API", section "Request token limits"
//! ([`EC2_SOURCE`]). EC2 evaluates each API action individually: each action has buckets
//! of its own, and a filtered or paginated describe draws from a different bucket than an
//! unfiltered and unpaginated one of the same action.
//!
//! | [`Ec2Category`] | actions | capacity | refill / s |
//! |---|---|---|---|
//! | `eni_mutating` | CreateNetworkInterface, DeleteNetworkInterface, AssignPrivateIpAddresses, UnassignPrivateIpAddresses, ModifyNetworkInterfaceAttribute, AssignIpv6Addresses, UnassignIpv6Addresses | 100 | 5 |
//! | `mutating` | every other action that is not a describe (AttachNetworkInterface, DetachNetworkInterface, ...) | 50 | 5 |
//! | `describe_filtered` | `Describe*` with a filter, explicit IDs, `MaxResults` or `NextToken` | 100 | 20 |
//! | `describe_unfiltered` | `Describe*` with none of those | 50 | 10 |
//! | `tags` | CreateTags, DeleteTags | 100 | 10 |
//!
//! # ELBv2
//!
//! Source: "Request throttling for the ELB API" ([`ELBV2_SOURCE`]); ELB API version 2 has
//! buckets of its own, apart from version 1 (Classic Load Balancers). ELBv2 answers an
//! empty bucket with `Throttling` ("Rate exceeded").
//!
//! | [`Elbv2Category`] | actions | capacity | refill / s |
//! |---|---|---|---|
//! | `describe` | non-mutating actions (`Describe*`) | 40 | 10 |
//! | `registration` | RegisterTargets, DeregisterTargets | 20 | 4 |
//! | `mutating` | every other action (Create*, Delete*, Modify*, AddTags, RemoveTags, Set*) | 40 | 10 |
//!
//! The describe figures (40 tokens, 10 per second) are stated in the page's text. The
//! registration figures and the `mutating` ones are those aws-load-balancer-controller's
//! default client-side limits take from the same page (`RegisterTargets|DeregisterTargets`
//! 4/s burst 20, every other action 10/s burst 40; its issue #2809 and pull request #4641).
//! That pull request notes the page gives `Modify*` actions a rule of their own; its size is
//! not in this table: override `mutating`, or the action, where it matters.

use std::time::Duration;

/// The EC2 page the [`Ec2Category`] defaults come from.
pub const EC2_SOURCE: &str =
    "https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html";

/// The ELB page the [`Elbv2Category`] defaults come from.
pub const ELBV2_SOURCE: &str =
    "https://docs.aws.amazon.com/elasticloadbalancing/latest/userguide/elb-api-throttling.html";

/// One token bucket's size and refill rate.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BucketSpec {
    /// Tokens the bucket holds when full (and at the start): the longest burst of calls.
    pub capacity: u32,
    /// Tokens added back per second, up to `capacity`.
    pub refill_per_sec: f64,
}

impl BucketSpec {
    /// A bucket of `capacity` tokens refilled with `refill_per_sec` tokens per second.
    pub const fn new(capacity: u32, refill_per_sec: f64) -> Self {
        BucketSpec {
            capacity,
            refill_per_sec,
        }
    }

    /// Why this spec cannot be a bucket, if it cannot: `capacity` 0 (every call would be
    /// throttled), or a refill rate that is negative, infinite or NaN. The message names
    /// the field and the fix.
    pub fn problem(&self) -> Option<&'static str> {
        if self.capacity == 0 {
            Some("capacity must be at least 1 (a bucket of 0 tokens throttles every call)")
        } else if !(self.refill_per_sec.is_finite() && self.refill_per_sec >= 0.0) {
            Some("refill_per_sec must be a finite number >= 0 (0: the bucket never refills)")
        } else {
            None
        }
    }

    /// The level of a bucket that held `tokens` after `elapsed` more time: refilled at
    /// `refill_per_sec`, at most `capacity`.
    pub fn refilled(&self, tokens: f64, elapsed: Duration) -> f64 {
        (tokens + elapsed.as_secs_f64() * self.refill_per_sec).min(f64::from(self.capacity))
    }

    /// The least time in which `calls` calls get through a bucket that starts full:
    /// the first `capacity` at once, each further one after `1 / refill_per_sec`. None when
    /// they never do (more calls than the capacity and no refill).
    pub fn time_floor(&self, calls: u64) -> Option<Duration> {
        let beyond = calls.saturating_sub(u64::from(self.capacity));
        if beyond == 0 {
            return Some(Duration::ZERO);
        }
        if self.refill_per_sec <= 0.0 || !self.refill_per_sec.is_finite() {
            return None;
        }
        Duration::try_from_secs_f64(beyond as f64 / self.refill_per_sec).ok()
    }
}

/// EC2's request-token categories: which default bucket an action's calls draw from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ec2Category {
    /// The ENI and address actions (create, delete, assign, unassign, modify): 100 / 5.
    EniMutating,
    /// Other mutating actions (attach, detach, ...): 50 / 5.
    Mutating,
    /// A describe with a filter, explicit IDs, `MaxResults` or `NextToken`: 100 / 20.
    DescribeFiltered,
    /// A describe with none of those: 50 / 10.
    DescribeUnfiltered,
    /// CreateTags and DeleteTags: 100 / 10.
    Tags,
}

/// The EC2 actions of [`Ec2Category::EniMutating`].
pub const EC2_ENI_MUTATING_ACTIONS: &[&str] = &[
    "CreateNetworkInterface",
    "DeleteNetworkInterface",
    "AssignPrivateIpAddresses",
    "UnassignPrivateIpAddresses",
    "ModifyNetworkInterfaceAttribute",
    "AssignIpv6Addresses",
    "UnassignIpv6Addresses",
];

/// The EC2 actions of [`Ec2Category::Tags`].
pub const EC2_TAG_ACTIONS: &[&str] = &["CreateTags", "DeleteTags"];

impl Ec2Category {
    /// Every category, in table order.
    pub const ALL: [Ec2Category; 5] = [
        Ec2Category::EniMutating,
        Ec2Category::Mutating,
        Ec2Category::DescribeFiltered,
        Ec2Category::DescribeUnfiltered,
        Ec2Category::Tags,
    ];

    /// The category's name in settings: `eni_mutating`, `mutating`, `describe_filtered`,
    /// `describe_unfiltered`, `tags`.
    pub fn name(self) -> &'static str {
        match self {
            Ec2Category::EniMutating => "eni_mutating",
            Ec2Category::Mutating => "mutating",
            Ec2Category::DescribeFiltered => "describe_filtered",
            Ec2Category::DescribeUnfiltered => "describe_unfiltered",
            Ec2Category::Tags => "tags",
        }
    }

    /// The category named `name` (see [`Ec2Category::name`]).
    pub fn from_name(name: &str) -> Option<Ec2Category> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Whether an EC2 or ELBv2 action is a describe (`Describe*`), which both services meter as
/// non-mutating.
pub fn is_describe(action: &str) -> bool {
    action.starts_with("Describe")
}

/// The category of one call of EC2 `action`; `filtered_or_paginated` says whether the call
/// carries a `Filter.N`, explicit IDs, `MaxResults` or `NextToken` (it matters only for
/// describes). An action not named in the table counts as `mutating` unless it is a
/// `Describe*`.
pub fn ec2_category(action: &str, filtered_or_paginated: bool) -> Ec2Category {
    if is_describe(action) {
        if filtered_or_paginated {
            Ec2Category::DescribeFiltered
        } else {
            Ec2Category::DescribeUnfiltered
        }
    } else if EC2_ENI_MUTATING_ACTIONS.contains(&action) {
        Ec2Category::EniMutating
    } else if EC2_TAG_ACTIONS.contains(&action) {
        Ec2Category::Tags
    } else {
        Ec2Category::Mutating
    }
}

/// EC2's default bucket of a category (see the table at the top of this module).
pub fn ec2_default(category: Ec2Category) -> BucketSpec {
    match category {
        Ec2Category::EniMutating => BucketSpec::new(100, 5.0),
        Ec2Category::Mutating => BucketSpec::new(50, 5.0),
        Ec2Category::DescribeFiltered => BucketSpec::new(100, 20.0),
        Ec2Category::DescribeUnfiltered => BucketSpec::new(50, 10.0),
        Ec2Category::Tags => BucketSpec::new(100, 10.0),
    }
}

/// ELBv2's request-token categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elbv2Category {
    /// Non-mutating actions (`Describe*`): 40 / 10.
    Describe,
    /// RegisterTargets and DeregisterTargets: 20 / 4.
    Registration,
    /// Every other action: 40 / 10.
    Mutating,
}

/// The ELBv2 actions of [`Elbv2Category::Registration`].
pub const ELBV2_REGISTRATION_ACTIONS: &[&str] = &["RegisterTargets", "DeregisterTargets"];

impl Elbv2Category {
    /// Every category, in table order.
    pub const ALL: [Elbv2Category; 3] = [
        Elbv2Category::Describe,
        Elbv2Category::Registration,
        Elbv2Category::Mutating,
    ];

    /// The category's name in settings: `describe`, `registration`, `mutating`.
    pub fn name(self) -> &'static str {
        match self {
            Elbv2Category::Describe => "describe",
            Elbv2Category::Registration => "registration",
            Elbv2Category::Mutating => "mutating",
        }
    }

    /// The category named `name` (see [`Elbv2Category::name`]).
    pub fn from_name(name: &str) -> Option<Elbv2Category> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// The category of ELBv2 `action`.
pub fn elbv2_category(action: &str) -> Elbv2Category {
    if is_describe(action) {
        Elbv2Category::Describe
    } else if ELBV2_REGISTRATION_ACTIONS.contains(&action) {
        Elbv2Category::Registration
    } else {
        Elbv2Category::Mutating
    }
}

/// ELBv2's default bucket of a category (see the table at the top of this module).
pub fn elbv2_default(category: Elbv2Category) -> BucketSpec {
    match category {
        Elbv2Category::Describe => BucketSpec::new(40, 10.0),
        Elbv2Category::Registration => BucketSpec::new(20, 4.0),
        Elbv2Category::Mutating => BucketSpec::new(40, 10.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ec2_actions_fall_in_the_documented_categories() {
        for a in EC2_ENI_MUTATING_ACTIONS {
            assert_eq!(ec2_category(a, false), Ec2Category::EniMutating, "{a}");
            assert_eq!(ec2_category(a, true), Ec2Category::EniMutating, "{a}");
        }
        assert_eq!(
            ec2_category("AttachNetworkInterface", false),
            Ec2Category::Mutating
        );
        assert_eq!(
            ec2_category("DetachNetworkInterface", true),
            Ec2Category::Mutating
        );
        assert_eq!(ec2_category("CreateTags", false), Ec2Category::Tags);
        assert_eq!(ec2_category("DeleteTags", false), Ec2Category::Tags);
        assert_eq!(
            ec2_category("DescribeNetworkInterfaces", true),
            Ec2Category::DescribeFiltered
        );
        assert_eq!(
            ec2_category("DescribeNetworkInterfaces", false),
            Ec2Category::DescribeUnfiltered
        );
    }

    #[test]
    fn ec2_defaults_are_the_documented_figures() {
        let d = |c| {
            let s = ec2_default(c);
            (s.capacity, s.refill_per_sec)
        };
        assert_eq!(d(Ec2Category::EniMutating), (100, 5.0));
        assert_eq!(d(Ec2Category::Mutating), (50, 5.0));
        assert_eq!(d(Ec2Category::DescribeFiltered), (100, 20.0));
        assert_eq!(d(Ec2Category::DescribeUnfiltered), (50, 10.0));
        assert_eq!(d(Ec2Category::Tags), (100, 10.0));
    }

    #[test]
    fn elbv2_actions_and_defaults() {
        assert_eq!(
            elbv2_category("DescribeTargetHealth"),
            Elbv2Category::Describe
        );
        assert_eq!(
            elbv2_category("RegisterTargets"),
            Elbv2Category::Registration
        );
        assert_eq!(
            elbv2_category("DeregisterTargets"),
            Elbv2Category::Registration
        );
        assert_eq!(
            elbv2_category("CreateLoadBalancer"),
            Elbv2Category::Mutating
        );
        assert_eq!(
            elbv2_default(Elbv2Category::Describe),
            BucketSpec::new(40, 10.0)
        );
        assert_eq!(
            elbv2_default(Elbv2Category::Registration),
            BucketSpec::new(20, 4.0)
        );
    }

    #[test]
    fn names_round_trip() {
        for c in Ec2Category::ALL {
            assert_eq!(Ec2Category::from_name(c.name()), Some(c));
        }
        for c in Elbv2Category::ALL {
            assert_eq!(Elbv2Category::from_name(c.name()), Some(c));
        }
        assert_eq!(Ec2Category::from_name("describe"), None);
        assert_eq!(Elbv2Category::from_name("tags"), None);
    }

    #[test]
    fn problems_name_the_field() {
        assert!(BucketSpec::new(0, 1.0)
            .problem()
            .unwrap()
            .contains("capacity"));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(BucketSpec::new(5, bad)
                .problem()
                .unwrap()
                .contains("refill_per_sec"));
        }
        assert_eq!(BucketSpec::new(1, 0.0).problem(), None);
    }

    #[test]
    fn refill_caps_at_capacity() {
        let s = BucketSpec::new(10, 2.0);
        assert_eq!(s.refilled(0.0, Duration::from_millis(500)), 1.0);
        assert_eq!(s.refilled(9.5, Duration::from_secs(5)), 10.0);
    }

    #[test]
    fn time_floor_of_a_scale_out() {
        let eni = ec2_default(Ec2Category::EniMutating);
        assert_eq!(eni.time_floor(100), Some(Duration::ZERO));
        assert_eq!(eni.time_floor(101), Some(Duration::from_millis(200)));
        assert_eq!(eni.time_floor(600), Some(Duration::from_secs(100)));
        assert_eq!(BucketSpec::new(1, 0.0).time_floor(2), None);
    }
}
