//! Injectable faults: EC2's request-token buckets per action, latency per action, an error rate
//! per action, IMDS lag per instance, and an empty `PrivateDnsName` for the first N
//! DescribeInstances calls. Randomness comes from a seeded ChaCha8 RNG; time is wall-clock.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use vpcnet_limits::api_rates::BucketSpec;

use crate::error::Ec2Error;
use crate::token_bucket::TokenBucket;

/// The longest latency or IMDS lag accepted (one day), so no deadline can overflow.
pub const MAX_DELAY_MS: u64 = 24 * 3600 * 1000;

/// Every fault setting. JSON shape of the control API's `PUT /_emu/faults`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Per EC2 action name (e.g. `AssignPrivateIpAddresses`) or ELBv2 action as `elbv2:<Action>`
    /// (e.g. `elbv2:RegisterTargets`); the key `*` applies to every action without an entry of
    /// its own (each action still gets its own bucket).
    #[serde(default)]
    pub actions: BTreeMap<String, ActionFaults>,
    /// IMDS lag for every instance, in milliseconds.
    #[serde(default)]
    pub imds_lag_ms: u64,
    /// IMDS lag per instance ID, in milliseconds (overrides `imds_lag_ms`).
    #[serde(default)]
    pub imds_lag_ms_per_instance: BTreeMap<String, u64>,
    /// The first N DescribeInstances calls answer an empty `PrivateDnsName` (as EC2 does right
    /// after launch).
    #[serde(default)]
    pub empty_private_dns_name_calls: u32,
}

/// Faults of one action.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionFaults {
    /// EC2's request-token bucket: a call takes one token or fails with RequestLimitExceeded.
    #[serde(default)]
    pub throttle: Option<TokenBucketSpec>,
    /// Delay before the answer; for AttachNetworkInterface, the time until the attachment
    /// completes instead (the call answers at once with status `attaching`).
    #[serde(default)]
    pub latency: Option<LatencySpec>,
    /// Fail this fraction of admitted calls with `code`.
    #[serde(default)]
    pub error: Option<ErrorSpec>,
}

impl ActionFaults {
    /// A token bucket of `capacity` tokens refilling `refill_per_sec` tokens per second.
    pub fn throttle(mut self, capacity: u32, refill_per_sec: f64) -> Self {
        self.throttle = Some(TokenBucketSpec {
            capacity,
            refill_per_sec,
        });
        self
    }
    /// A fixed latency.
    pub fn latency(mut self, d: Duration) -> Self {
        let ms = d.as_millis() as u64;
        self.latency = Some(LatencySpec {
            min_ms: ms,
            max_ms: ms,
        });
        self
    }
    /// A latency drawn uniformly from `[min, max]`.
    pub fn latency_range(mut self, min: Duration, max: Duration) -> Self {
        self.latency = Some(LatencySpec {
            min_ms: min.as_millis() as u64,
            max_ms: max.as_millis() as u64,
        });
        self
    }
    /// Fail a fraction `rate` (0.0..=1.0) of calls with EC2 error `code` (e.g. `InternalError`,
    /// `Unavailable`, `UnauthorizedOperation`, `RequestLimitExceeded`).
    pub fn error(mut self, rate: f64, code: &str) -> Self {
        self.error = Some(ErrorSpec {
            rate,
            code: code.to_string(),
        });
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBucketSpec {
    /// Bucket size, in calls.
    pub capacity: u32,
    /// Tokens added per second.
    pub refill_per_sec: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    pub min_ms: u64,
    pub max_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorSpec {
    /// Fraction of calls that fail, 0.0..=1.0.
    pub rate: f64,
    /// EC2 error code; its HTTP status follows [`crate::error::status_for_code`].
    pub code: String,
}

impl Faults {
    /// Check ranges; the error names the bad field.
    pub fn validate(&self) -> Result<(), String> {
        for (action, f) in &self.actions {
            if let Some(t) = &f.throttle {
                if t.capacity == 0 || !(t.refill_per_sec.is_finite() && t.refill_per_sec >= 0.0) {
                    return Err(format!(
                        "actions.{action}.throttle: capacity must be >= 1 and refill_per_sec >= 0"
                    ));
                }
            }
            if let Some(l) = &f.latency {
                if l.min_ms > l.max_ms || l.max_ms > MAX_DELAY_MS {
                    return Err(format!(
                        "actions.{action}.latency: min_ms must be <= max_ms <= {MAX_DELAY_MS}"
                    ));
                }
            }
            if let Some(e) = &f.error {
                if !(0.0..=1.0).contains(&e.rate) || e.code.is_empty() {
                    return Err(format!(
                        "actions.{action}.error: rate must be in 0..=1 and code non-empty"
                    ));
                }
            }
        }
        let lags = std::iter::once(("imds_lag_ms".to_string(), self.imds_lag_ms)).chain(
            self.imds_lag_ms_per_instance
                .iter()
                .map(|(i, ms)| (format!("imds_lag_ms_per_instance.{i}"), *ms)),
        );
        for (name, ms) in lags {
            if ms > MAX_DELAY_MS {
                return Err(format!("{name}: at most {MAX_DELAY_MS} ms"));
            }
        }
        Ok(())
    }

    fn for_action(&self, action: &str) -> Option<&ActionFaults> {
        self.actions.get(action).or_else(|| self.actions.get("*"))
    }

    /// IMDS lag of `instance_id`.
    pub fn imds_lag(&self, instance_id: &str) -> Duration {
        Duration::from_millis(
            self.imds_lag_ms_per_instance
                .get(instance_id)
                .copied()
                .unwrap_or(self.imds_lag_ms),
        )
    }
}

/// What the faults decide for one call.
#[derive(Debug, Default)]
pub struct Admission {
    /// Throttled or injected error: answer this instead of running the action.
    pub error: Option<Ec2Error>,
    /// Sleep this long before answering (Attach: attachment completion delay).
    pub latency: Duration,
    /// The action's token bucket was empty (`error` is RequestLimitExceeded).
    pub throttled: bool,
}

/// Fault settings plus their running state (buckets, RNG, counters).
#[derive(Debug)]
pub struct FaultState {
    config: Faults,
    buckets: HashMap<String, TokenBucket>,
    rng: ChaCha8Rng,
    dns_empty_left: u32,
}

impl FaultState {
    pub fn new(seed: u64) -> Self {
        Self {
            config: Faults::default(),
            buckets: HashMap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fa17),
            dns_empty_left: 0,
        }
    }

    pub fn config(&self) -> &Faults {
        &self.config
    }

    /// Replace every setting; buckets restart full.
    pub fn set(&mut self, config: Faults) {
        self.dns_empty_left = config.empty_private_dns_name_calls;
        self.config = config;
        self.buckets.clear();
    }

    /// Replace one action's settings; its bucket restarts full.
    pub fn set_action(&mut self, action: &str, f: Option<ActionFaults>) {
        match f {
            Some(f) => self.config.actions.insert(action.to_string(), f),
            None => self.config.actions.remove(action),
        };
        if action == "*" {
            self.buckets.clear();
        } else {
            self.buckets.remove(action);
        }
    }

    /// Set the IMDS lag of one instance or of all (at most [`MAX_DELAY_MS`]; longer is clamped).
    pub fn set_imds_lag(&mut self, instance_id: Option<&str>, lag: Duration) {
        let ms = (lag.as_millis() as u64).min(MAX_DELAY_MS);
        match instance_id {
            Some(i) => {
                self.config
                    .imds_lag_ms_per_instance
                    .insert(i.to_string(), ms);
            }
            None => self.config.imds_lag_ms = ms,
        }
    }

    pub fn set_empty_private_dns_names(&mut self, calls: u32) {
        self.config.empty_private_dns_name_calls = calls;
        self.dns_empty_left = calls;
    }

    /// Whether this DescribeInstances call answers an empty `PrivateDnsName` (counts down).
    pub fn take_empty_dns(&mut self) -> bool {
        if self.dns_empty_left > 0 {
            self.dns_empty_left -= 1;
            true
        } else {
            false
        }
    }

    /// Decide throttling, latency and injected error for one call of `action` at `now`.
    /// A throttled call takes no token and gets no latency.
    pub fn admit(&mut self, action: &str, now: Instant) -> Admission {
        let Some(f) = self.config.for_action(action).cloned() else {
            return Admission::default();
        };
        if let Some(t) = f.throttle {
            let spec = BucketSpec::new(t.capacity, t.refill_per_sec);
            let b = self
                .buckets
                .entry(action.to_string())
                .or_insert_with(|| TokenBucket::full(spec, now));
            if b.spec != spec {
                *b = TokenBucket::full(spec, now);
            }
            if !b.try_take(now) {
                return Admission {
                    error: Some(Ec2Error::throttled()),
                    latency: Duration::ZERO,
                    throttled: true,
                };
            }
        }
        let latency = match f.latency {
            Some(l) if l.max_ms > l.min_ms => {
                Duration::from_millis(self.rng.random_range(l.min_ms..=l.max_ms))
            }
            Some(l) => Duration::from_millis(l.min_ms),
            None => Duration::ZERO,
        };
        let error = f.error.and_then(|e| {
            (self.rng.random::<f64>() < e.rate).then(|| {
                let msg = match e.code.as_str() {
                    "RequestLimitExceeded" => "Request limit exceeded.".to_string(),
                    "UnauthorizedOperation" => {
                        format!("You are not authorized to perform this operation ({action}).")
                    }
                    "InternalError" => "An internal error has occurred.".to_string(),
                    "Unavailable" => {
                        "The service is unavailable. Please try again shortly.".to_string()
                    }
                    other => format!("Injected fault {other} for {action}."),
                };
                Ec2Error::new(e.code, msg)
            })
        });
        Admission {
            error,
            latency,
            throttled: false,
        }
    }
}

/// Call counters, as read by the control API (`GET /_emu/calls`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounts {
    /// Calls per action (EC2 names; ELBv2 as `elbv2:<Action>`), throttled and failed ones
    /// included.
    pub per_action: BTreeMap<String, u64>,
    /// Calls per action answered RequestLimitExceeded by a token bucket.
    pub throttled: BTreeMap<String, u64>,
    /// Calls to mutating actions (Create*, Attach*, Detach*, Delete*, Modify*, Assign*,
    /// Unassign*, Terminate*; ELBv2's Register/Deregister/Add/Remove too), throttled and failed
    /// ones included.
    pub mutating: u64,
    /// Calls attributed to an instance: IMDS calls by the caller's instance, EC2 calls by a
    /// source address equal to an instance's primary private IP (the lab).
    pub per_instance: BTreeMap<String, InstanceCalls>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceCalls {
    pub ec2: BTreeMap<String, u64>,
    pub imds: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_admits_capacity_then_refills() {
        let mut s = FaultState::new(1);
        s.set_action("X", Some(ActionFaults::default().throttle(10, 1.0)));
        let t0 = Instant::now();
        let throttled = (0..30).filter(|_| s.admit("X", t0).error.is_some()).count();
        assert_eq!(throttled, 20);
        assert!(s
            .admit("X", t0 + Duration::from_millis(900))
            .error
            .is_some());
        assert!(s
            .admit("X", t0 + Duration::from_millis(1000))
            .error
            .is_none());
        assert!(s
            .admit("X", t0 + Duration::from_millis(1100))
            .error
            .is_some());
        assert!(s.admit("Y", t0).error.is_none());
    }

    #[test]
    fn validation_names_the_field() {
        let mut f = Faults::default();
        f.actions
            .insert("A".into(), ActionFaults::default().throttle(0, 1.0));
        assert!(f.validate().unwrap_err().contains("actions.A.throttle"));
        let mut f = Faults::default();
        f.actions.insert(
            "B".into(),
            ActionFaults::default().latency(Duration::from_secs(90_000)),
        );
        assert!(f.validate().unwrap_err().contains("actions.B.latency"));
        let f = Faults {
            imds_lag_ms: u64::MAX,
            ..Faults::default()
        };
        assert!(f.validate().unwrap_err().contains("imds_lag_ms"));
        let mut f = Faults::default();
        f.actions.insert(
            "C".into(),
            ActionFaults::default().error(1.5, "InternalError"),
        );
        assert!(f.validate().unwrap_err().contains("actions.C.error"));
    }

    #[test]
    fn error_rate_is_seeded() {
        let run = || {
            let mut s = FaultState::new(7);
            s.set_action(
                "*",
                Some(ActionFaults::default().error(0.5, "InternalError")),
            );
            (0..64)
                .map(|_| s.admit("A", Instant::now()).error.is_some())
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let n = a.iter().filter(|x| **x).count();
        assert!((16..48).contains(&n), "{n}");
    }
}
