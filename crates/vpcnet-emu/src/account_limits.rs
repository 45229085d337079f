//! The account's rate limits: EC2's and ELBv2's request-token buckets per account and action,
//! shared by every caller of the account, as AWS meters them (defaults from
//! [`vpcnet_limits::api_rates`]). Off by default; separate from the injectable fault buckets
//! of [`crate::faults`], which still apply on top.
//!
//! - Each EC2 action has its own bucket, and a filtered or paginated describe (any parameter
//!   besides `Action`, `Version` and `DryRun`: `Filter.N`, explicit IDs, `MaxResults`,
//!   `NextToken`) draws from a different one than an unfiltered describe of the same action.
//!   Each ELBv2 action has its own bucket too.
//! - A bucket's size comes from, in order: the action's entry in `actions`, its category's
//!   entry in `ec2` or `elbv2`, the documented default of its category.
//! - Callers are told apart by the access key of their SigV4 signature. Every access key is
//!   in the account [`DEFAULT_ACCOUNT`] unless `accounts` maps it to another; unsigned
//!   requests are in the default account too. Each account has its own buckets.
//! - An empty bucket answers EC2's `RequestLimitExceeded` (HTTP 503) or ELBv2's `Throttling`
//!   (HTTP 400); the call takes no token from the fault buckets and counts in
//!   [`crate::CallCounts::throttled`].
//!
//! Time is tokio's clock ([`tokio::time::Instant`]), so tests run the buckets on a paused
//! clock. Setting the limits again restarts every bucket full.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use vpcnet_limits::api_rates::{
    ec2_category, ec2_default, elbv2_category, elbv2_default, BucketSpec, Ec2Category,
    Elbv2Category,
};

use crate::query::params::Params;
use crate::request_log::Api;
use crate::token_bucket::TokenBucket;

/// The account of access keys that `accounts` does not name, and of unsigned requests.
pub const DEFAULT_ACCOUNT: &str = "default";

/// The account's rate limits. JSON shape of `PUT /_emu/account-limits` and of the setup
/// file's `account_limits`:
///
/// ```json
/// {
///   "enabled": true,
///   "ec2": { "eni_mutating": { "capacity": 10, "refill_per_sec": 1.0 } },
///   "elbv2": { "registration": { "refill_per_sec": 2.0 } },
///   "actions": { "DescribeNetworkInterfaces": { "capacity": 5 }, "elbv2:DescribeTargetHealth": { "capacity": 5 } },
///   "accounts": { "AKIDNODES": "nodes", "AKIDCONTROLLER": "controller" }
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountLimits {
    /// Whether calls are metered at all (default false: no account limit applies).
    #[serde(default)]
    pub enabled: bool,
    /// Per EC2 category (`eni_mutating`, `mutating`, `describe_filtered`,
    /// `describe_unfiltered`, `tags`): the size of each of its actions' buckets.
    #[serde(default)]
    pub ec2: BTreeMap<String, BucketOverride>,
    /// Per ELBv2 category (`describe`, `registration`, `mutating`).
    #[serde(default)]
    pub elbv2: BTreeMap<String, BucketOverride>,
    /// Per action: an EC2 action name, or `elbv2:` + an ELBv2 action name. For an EC2
    /// describe it sizes both its filtered and its unfiltered bucket.
    #[serde(default)]
    pub actions: BTreeMap<String, BucketOverride>,
    /// Access key ID → account name; keys not named are in [`DEFAULT_ACCOUNT`].
    #[serde(default)]
    pub accounts: BTreeMap<String, String>,
}

/// A change to a bucket's documented size: the fields given replace the default's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketOverride {
    /// Tokens when full (at least 1).
    #[serde(default)]
    pub capacity: Option<u32>,
    /// Tokens added per second (finite, at least 0).
    #[serde(default)]
    pub refill_per_sec: Option<f64>,
}

impl BucketOverride {
    /// `capacity` tokens refilling `refill_per_sec` per second.
    pub fn new(capacity: u32, refill_per_sec: f64) -> Self {
        BucketOverride {
            capacity: Some(capacity),
            refill_per_sec: Some(refill_per_sec),
        }
    }

    fn over(&self, base: BucketSpec) -> BucketSpec {
        BucketSpec {
            capacity: self.capacity.unwrap_or(base.capacity),
            refill_per_sec: self.refill_per_sec.unwrap_or(base.refill_per_sec),
        }
    }
}

/// One call as the account buckets see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MeteredCall<'a> {
    pub(crate) api: Api,
    pub(crate) action: &'a str,
    /// EC2 describes: whether the call is filtered or paginated ([`filtered_or_paginated`]).
    pub(crate) filtered: bool,
    pub(crate) access_key: Option<&'a str>,
}

/// Whether an EC2 describe call is filtered or paginated: it carries any parameter besides
/// `Action`, `Version` and `DryRun`.
pub(crate) fn filtered_or_paginated(params: &Params) -> bool {
    params
        .names()
        .any(|n| !matches!(n, "Action" | "Version" | "DryRun"))
}

const ACTION_HINT: &str =
    "use an EC2 action name (e.g. AssignPrivateIpAddresses) or elbv2:<Action> (e.g. elbv2:RegisterTargets)";

fn served(key: &str) -> bool {
    match key.strip_prefix("elbv2:") {
        Some(a) => crate::elbv2::actions::is_mutating(a).is_some(),
        None => crate::query::actions::is_mutating(key).is_some(),
    }
}

fn names<T: Copy>(all: &[T], name: fn(T) -> &'static str) -> String {
    all.iter().map(|c| name(*c)).collect::<Vec<_>>().join(", ")
}

impl AccountLimits {
    /// Enabled with AWS's documented defaults and every access key in one account.
    pub fn aws_defaults() -> Self {
        AccountLimits {
            enabled: true,
            ..Default::default()
        }
    }

    /// Check every entry; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), String> {
        let ec2_names = names(&Ec2Category::ALL, Ec2Category::name);
        check_section(("ec2", "EC2", &ec2_names), &self.ec2, |n| {
            Ec2Category::from_name(n).map(ec2_default)
        })?;
        let elbv2_names = names(&Elbv2Category::ALL, Elbv2Category::name);
        check_section(("elbv2", "ELBv2", &elbv2_names), &self.elbv2, |n| {
            Elbv2Category::from_name(n).map(elbv2_default)
        })?;
        for (key, o) in &self.actions {
            if !served(key) {
                return Err(format!(
                    "actions.{key}: not an action the emulator serves; {ACTION_HINT}"
                ));
            }
            // the action's own entry must make a bucket whatever its category gives
            check(&format!("actions.{key}"), o, BucketSpec::new(1, 0.0))?;
        }
        for (key, account) in &self.accounts {
            if key.is_empty() || account.is_empty() {
                return Err(format!(
                    "accounts.{key:?}: access key and account name must not be empty; map an access key ID to an account name"
                ));
            }
        }
        Ok(())
    }

    fn account_of<'a>(&'a self, access_key: Option<&str>) -> &'a str {
        access_key
            .and_then(|k| self.accounts.get(k))
            .map_or(DEFAULT_ACCOUNT, String::as_str)
    }

    /// The bucket an EC2 action's calls draw from with these settings (`filtered`: a
    /// filtered or paginated describe), whether or not metering is enabled.
    pub fn ec2_bucket(&self, action: &str, filtered: bool) -> BucketSpec {
        self.bucket_of(&MeteredCall {
            api: Api::Ec2,
            action,
            filtered,
            access_key: None,
        })
        .1
    }

    /// The bucket of one call: its category's name and its size.
    fn bucket_of(&self, call: &MeteredCall) -> (&'static str, BucketSpec) {
        let (category, base, action_key) = match call.api {
            Api::Elbv2 => {
                let c = elbv2_category(call.action);
                let base = sized(&self.elbv2, c.name(), elbv2_default(c));
                (c.name(), base, crate::elbv2::fault_key(call.action))
            }
            _ => {
                let c = ec2_category(call.action, call.filtered);
                let base = sized(&self.ec2, c.name(), ec2_default(c));
                (c.name(), base, call.action.to_string())
            }
        };
        (category, sized(&self.actions, &action_key, base))
    }
}

/// `base` changed by the entry `key` of `entries`, if there is one.
fn sized(entries: &BTreeMap<String, BucketOverride>, key: &str, base: BucketSpec) -> BucketSpec {
    entries.get(key).map_or(base, |o| o.over(base))
}

/// An error naming `path` when `o` over `base` cannot be a bucket.
fn check(path: &str, o: &BucketOverride, base: BucketSpec) -> Result<(), String> {
    match o.over(base).problem() {
        Some(p) => Err(format!("{path}: {p}")),
        None => Ok(()),
    }
}

/// Check the category entries of a section: (its key `ec2` or `elbv2`, the service's name,
/// the known categories' names); `default_of` gives a known category's default.
fn check_section(
    (section, service, known): (&str, &str, &str),
    entries: &BTreeMap<String, BucketOverride>,
    default_of: impl Fn(&str) -> Option<BucketSpec>,
) -> Result<(), String> {
    for (name, o) in entries {
        let base = default_of(name).ok_or_else(|| {
            format!("{section}.{name}: no such {service} category; use one of {known}")
        })?;
        check(&format!("{section}.{name}"), o, base)?;
    }
    Ok(())
}

/// One live bucket, as `GET /_emu/account-limits` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketState {
    /// The account ([`DEFAULT_ACCOUNT`] or a name from `accounts`).
    pub account: String,
    /// `ec2` or `elbv2`.
    pub api: Api,
    /// The action name (ELBv2's without the `elbv2:` prefix).
    pub action: String,
    /// The category (e.g. `describe_filtered`), which also tells a describe's two buckets
    /// apart.
    pub category: String,
    /// The bucket's size.
    pub capacity: u32,
    /// Its refill rate, tokens per second.
    pub refill_per_sec: f64,
    /// Tokens in it now.
    pub tokens: f64,
    /// Calls it let through.
    pub admitted: u64,
    /// Calls it throttled.
    pub throttled: u64,
}

/// What `GET /_emu/account-limits` answers: the settings and every bucket a call has made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountLimitsView {
    /// The settings in force.
    pub config: AccountLimits,
    /// The live buckets, by account, API, action and category.
    pub buckets: Vec<BucketState>,
}

type Key = (String, &'static str, String, &'static str);

#[derive(Debug)]
struct Live {
    bucket: TokenBucket,
    admitted: u64,
    throttled: u64,
}

/// The settings and their buckets.
#[derive(Debug, Default)]
pub(crate) struct AccountLimitState {
    config: AccountLimits,
    buckets: BTreeMap<Key, Live>,
}

fn api_name(api: Api) -> &'static str {
    match api {
        Api::Elbv2 => "elbv2",
        Api::Imds => "imds",
        Api::Ec2 => "ec2",
    }
}

impl AccountLimitState {
    /// Replace the settings (already validated); every bucket restarts full.
    pub(crate) fn set(&mut self, config: AccountLimits) {
        self.config = config;
        self.buckets.clear();
    }

    /// Take a token for `call` at `now`: false when its bucket is empty (throttled).
    /// Always true while the limits are off.
    pub(crate) fn admit(&mut self, call: &MeteredCall, now: Instant) -> bool {
        if !self.config.enabled {
            return true;
        }
        let (category, spec) = self.config.bucket_of(call);
        let key = (
            self.config.account_of(call.access_key).to_string(),
            api_name(call.api),
            call.action.to_string(),
            category,
        );
        let b = self.buckets.entry(key).or_insert_with(|| Live {
            bucket: TokenBucket::full(spec, now.into_std()),
            admitted: 0,
            throttled: 0,
        });
        if !b.bucket.try_take(now.into_std()) {
            b.throttled += 1;
            return false;
        }
        b.admitted += 1;
        true
    }

    /// The settings and every live bucket's level at `now`.
    pub(crate) fn view(&self, now: Instant) -> AccountLimitsView {
        let buckets = self
            .buckets
            .iter()
            .map(|((account, api, action, category), b)| BucketState {
                account: account.clone(),
                api: if *api == "elbv2" {
                    Api::Elbv2
                } else {
                    Api::Ec2
                },
                action: action.clone(),
                category: category.to_string(),
                capacity: b.bucket.spec.capacity,
                refill_per_sec: b.bucket.spec.refill_per_sec,
                tokens: b.bucket.level(now.into_std()),
                admitted: b.admitted,
                throttled: b.throttled,
            })
            .collect();
        AccountLimitsView {
            config: self.config.clone(),
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn call<'a>(action: &'a str, filtered: bool, key: Option<&'a str>) -> MeteredCall<'a> {
        MeteredCall {
            api: Api::Ec2,
            action,
            filtered,
            access_key: key,
        }
    }

    #[test]
    fn off_admits_everything() {
        let mut s = AccountLimitState::default();
        let now = Instant::now();
        assert!((0..1000).all(|_| s.admit(&call("AttachNetworkInterface", false, None), now)));
        assert!(s.view(now).buckets.is_empty());
    }

    #[test]
    fn overrides_take_precedence_action_over_category_over_default() {
        let mut cfg = AccountLimits::aws_defaults();
        cfg.ec2
            .insert("eni_mutating".into(), BucketOverride::new(7, 1.0));
        cfg.actions.insert(
            "AssignPrivateIpAddresses".into(),
            BucketOverride {
                capacity: Some(3),
                refill_per_sec: None,
            },
        );
        let spec = |a: &str, f: bool| cfg.bucket_of(&call(a, f, None)).1;
        assert_eq!(
            spec("AssignPrivateIpAddresses", false),
            BucketSpec::new(3, 1.0)
        );
        assert_eq!(
            spec("CreateNetworkInterface", false),
            BucketSpec::new(7, 1.0)
        );
        assert_eq!(
            spec("AttachNetworkInterface", false),
            BucketSpec::new(50, 5.0)
        );
        assert_eq!(
            spec("DescribeNetworkInterfaces", true),
            BucketSpec::new(100, 20.0)
        );
    }

    #[test]
    fn validation_names_the_field_and_the_fix() {
        let bad = |f: fn(&mut AccountLimits)| {
            let mut c = AccountLimits::aws_defaults();
            f(&mut c);
            c.validate().unwrap_err()
        };
        let e = bad(|c| {
            c.ec2.insert(
                "tags".into(),
                BucketOverride {
                    capacity: Some(0),
                    refill_per_sec: None,
                },
            );
        });
        assert!(
            e.starts_with("ec2.tags: capacity must be at least 1"),
            "{e}"
        );
        let e = bad(|c| {
            c.actions.insert(
                "elbv2:RegisterTargets".into(),
                BucketOverride::new(5, f64::NAN),
            );
        });
        assert!(
            e.starts_with("actions.elbv2:RegisterTargets: refill_per_sec"),
            "{e}"
        );
        let e = bad(|c| {
            c.elbv2
                .insert("describes".into(), BucketOverride::default());
        });
        assert!(e.contains("elbv2.describes: no such ELBv2 category; use one of describe, registration, mutating"), "{e}");
        let e = bad(|c| {
            c.actions
                .insert("RunInstances".into(), BucketOverride::default());
        });
        assert!(e.contains("actions.RunInstances: not an action"), "{e}");
        let e = bad(|c| {
            c.accounts.insert("AKID".into(), String::new());
        });
        assert!(e.contains("accounts.\"AKID\""), "{e}");
        // an action entry without a capacity leaves the category's in force
        let mut ok = AccountLimits::aws_defaults();
        ok.actions.insert(
            "CreateTags".into(),
            BucketOverride {
                capacity: None,
                refill_per_sec: Some(0.0),
            },
        );
        assert_eq!(ok.validate(), Ok(()));
    }

    #[test]
    fn a_view_shows_the_refilled_level() {
        let mut cfg = AccountLimits::aws_defaults();
        cfg.actions
            .insert("DetachNetworkInterface".into(), BucketOverride::new(2, 4.0));
        let mut s = AccountLimitState::default();
        s.set(cfg);
        let t0 = Instant::now();
        let c = call("DetachNetworkInterface", false, Some("AKID"));
        assert!(s.admit(&c, t0) && s.admit(&c, t0));
        assert!(!s.admit(&c, t0));
        let v = s.view(t0 + Duration::from_millis(250));
        assert_eq!(v.buckets.len(), 1);
        let b = &v.buckets[0];
        assert_eq!(
            (
                b.account.as_str(),
                b.category.as_str(),
                b.admitted,
                b.throttled
            ),
            (DEFAULT_ACCOUNT, "mutating", 2, 1)
        );
        assert!((b.tokens - 1.0).abs() < 1e-9, "{}", b.tokens);
    }
}
