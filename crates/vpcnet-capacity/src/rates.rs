//! The time the account's EC2 request-token buckets impose on a burst of calls
//! ([`vpcnet_limits::api_rates`]): each action has a bucket of its own that starts full, so
//! `n` calls of one action need at least `(n − capacity) / refill` seconds, and a scale-out
//! can finish no sooner than its slowest action allows. A floor, not a forecast: it assumes
//! no other caller in the account and no retry, and ignores the order the calls must come
//! in.

use serde::Serialize;
use vpcnet_limits::api_rates::{ec2_category, ec2_default, BucketSpec};

use crate::calls::CallCount;

/// The floor of a set of calls and the action that sets it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Floor {
    /// Seconds; `None` when no call is limited beyond its burst.
    pub seconds: f64,
    /// The action whose bucket takes longest, if any call waits at all.
    pub limiting_action: Option<&'static str>,
}

/// The floor of `calls` made by one account as fast as its buckets allow. The agent's
/// describes carry filters or IDs: they draw from the filtered-describe buckets.
pub fn floor(calls: &CallCount) -> Floor {
    floor_shared(calls, 0.0)
}

/// [`floor`] when other callers in the account use `others` (0..1) of every bucket's refill.
pub fn floor_shared(calls: &CallCount, others: f64) -> Floor {
    let (seconds, limiting_action) = slowest(calls.iter(), others, documented_bucket);
    Floor {
        seconds,
        limiting_action,
    }
}

/// The account's documented bucket of an EC2 action's calls (describes as the agent makes
/// them: filtered).
pub fn documented_bucket(action: &str) -> BucketSpec {
    ec2_default(ec2_category(action, true))
}

/// [`floor_shared`] of calls whose action names are only known at run time (counted in a
/// request log, say), against the buckets `bucket_of` gives each action (e.g.
/// [`documented_bucket`], or an emulator's configured ones): seconds, and the action whose
/// bucket takes longest.
pub fn floor_named<'a>(
    calls: impl IntoIterator<Item = (&'a str, u64)>,
    others: f64,
    bucket_of: impl Fn(&str) -> BucketSpec,
) -> (f64, Option<String>) {
    let (seconds, action) = slowest(calls, others, bucket_of);
    (seconds, action.map(str::to_string))
}

fn slowest<A: AsRef<str>>(
    calls: impl IntoIterator<Item = (A, u64)>,
    others: f64,
    bucket_of: impl Fn(&str) -> BucketSpec,
) -> (f64, Option<A>) {
    let left = (1.0 - others).clamp(0.0, 1.0);
    let mut worst = (0.0, None);
    for (action, n) in calls {
        let mut bucket = bucket_of(action.as_ref());
        bucket.refill_per_sec *= left;
        let secs = bucket
            .time_floor(n)
            .map_or(f64::INFINITY, |d| d.as_secs_f64());
        if secs > worst.0 {
            worst = (secs, Some(action));
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_bucket_sets_the_floor() {
        let mut c = CallCount::default();
        // 1,000 first assigns: 100 at once, 900 more at 5 per second.
        c.add("AssignPrivateIpAddresses", 1_000);
        // 1,000 attaches: 50 at once, 950 more at 5 per second.
        c.add("AttachNetworkInterface", 1_000);
        // 1,000 filtered describes: 100 at once, 900 at 20 per second.
        c.add("DescribeNetworkInterfaces", 1_000);
        let f = floor(&c);
        assert_eq!(f.seconds, 190.0);
        assert_eq!(f.limiting_action, Some("AttachNetworkInterface"));
        let named = [
            ("AssignPrivateIpAddresses", 1_000),
            ("AttachNetworkInterface", 1_000),
        ];
        assert_eq!(
            floor_named(named, 0.5, documented_bucket),
            (380.0, Some("AttachNetworkInterface".to_string())),
            "half the refill left: twice the wait"
        );
        let mut small = CallCount::default();
        small.add("AssignPrivateIpAddresses", 100);
        assert_eq!(floor(&small).limiting_action, None);
    }
}
