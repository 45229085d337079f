//! ELBv2 resources: load balancers (with one ENI per subnet, taken from the EC2 model),
//! listeners, target groups and target registrations, the quotas, and the rules shared by all
//! (names, tags). Pure and synchronous: time is passed in, EC2 state is read from (and ELB ENIs
//! are made in) the [`crate::model::Cloud`] given to each call.
//!
//! Load balancers and listeners are made in [`super::balancers`], target groups and targets in
//! [`super::targets`]; health is [`super::health`].

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::error::{self, ElbError};
use crate::model::Tags;

/// `application` or `network` (ELBv2 `Type`; `gateway` is not served).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LbType {
    Application,
    Network,
}

impl LbType {
    /// ELBv2 spelling: `application`, `network`.
    pub fn as_str(self) -> &'static str {
        match self {
            LbType::Application => "application",
            LbType::Network => "network",
        }
    }
    /// The type's part of ARNs and ENI descriptions: `app`, `net`.
    pub fn arn_kind(self) -> &'static str {
        match self {
            LbType::Application => "app",
            LbType::Network => "net",
        }
    }
    /// Listener protocols the type accepts.
    pub fn listener_protocols(self) -> &'static [Protocol] {
        match self {
            LbType::Application => &[Protocol::Http, Protocol::Https],
            LbType::Network => &[
                Protocol::Tcp,
                Protocol::Tls,
                Protocol::Udp,
                Protocol::TcpUdp,
            ],
        }
    }
}

/// ELBv2 protocols (listener, target group, health check).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Protocol {
    Http,
    Https,
    Tcp,
    Tls,
    Udp,
    TcpUdp,
}

impl Protocol {
    pub const ALL: [Protocol; 6] = [
        Protocol::Http,
        Protocol::Https,
        Protocol::Tcp,
        Protocol::Tls,
        Protocol::Udp,
        Protocol::TcpUdp,
    ];
    /// ELBv2 spelling: `HTTP`, `HTTPS`, `TCP`, `TLS`, `UDP`, `TCP_UDP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "HTTP",
            Protocol::Https => "HTTPS",
            Protocol::Tcp => "TCP",
            Protocol::Tls => "TLS",
            Protocol::Udp => "UDP",
            Protocol::TcpUdp => "TCP_UDP",
        }
    }
    /// Parse the ELBv2 spelling. Error: `ValidationError` naming `field` and the enum values.
    pub fn parse(field: &str, v: &str) -> Result<Protocol, ElbError> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.as_str() == v)
            .ok_or_else(|| error::enum_value(field, v, &Protocol::ALL.map(|p| p.as_str())))
    }
    /// HTTP or HTTPS: an application load balancer's protocols.
    pub fn is_http(self) -> bool {
        matches!(self, Protocol::Http | Protocol::Https)
    }
}

/// `instance` or `ip` (ELBv2 `TargetType`; `lambda` and `alb` are not served).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetType {
    Instance,
    Ip,
}

impl TargetType {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetType::Instance => "instance",
            TargetType::Ip => "ip",
        }
    }
}

/// Quotas enforced per emulated region (ELBv2's "Quotas for your load balancers"). JSON shape of
/// the control API's `PUT /_emu/elbv2/limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Load balancers per region (AWS default 50) → `TooManyLoadBalancers`.
    pub load_balancers: u32,
    /// Target groups per region (AWS default 3,000) → `TooManyTargetGroups`.
    pub target_groups: u32,
    /// Listeners per load balancer (AWS default 50) → `TooManyListeners`.
    pub listeners_per_load_balancer: u32,
    /// Registered targets per target group (default 1,000) → `TooManyTargets`.
    pub targets_per_target_group: u32,
    /// Tags per resource (AWS: 50) → `TooManyTags`.
    pub tags_per_resource: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            load_balancers: 50,
            target_groups: 3000,
            listeners_per_load_balancer: 50,
            targets_per_target_group: 1000,
            tags_per_resource: 50,
        }
    }
}

/// The load balancer's node in one subnet: an ENI (description `ELB <net|app>/<name>/<id>`)
/// whose primary private IPv4 address is where the load balancer listens in that zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbAddress {
    pub subnet_id: String,
    pub availability_zone: String,
    pub eni_id: String,
    pub ip: Ipv4Addr,
}

/// Data-plane state of a load balancer (ELBv2 `State.Code`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LbState {
    /// Created, data plane not programmed yet.
    Provisioning,
    /// The data plane serves it.
    Active,
    /// The data plane could not be built; the reason is reported as `State.Reason`.
    Failed(String),
}

#[derive(Debug, Clone)]
pub struct LoadBalancer {
    pub arn: String,
    /// 16 hex digits, the last part of the ARN.
    pub id: String,
    pub name: String,
    pub lb_type: LbType,
    /// Always `internal` (an internet-facing scheme needs an internet gateway, which the
    /// emulated VPCs do not have).
    pub scheme: &'static str,
    pub vpc_id: String,
    pub addresses: Vec<LbAddress>,
    pub security_groups: Vec<String>,
    pub created: Instant,
    pub dns_name: String,
    pub state: LbState,
    pub tags: Tags,
}

/// A listener and its one `forward` default action.
#[derive(Debug, Clone)]
pub struct Listener {
    pub arn: String,
    pub lb_arn: String,
    pub protocol: Protocol,
    pub port: u16,
    pub target_group_arn: String,
    pub tags: Tags,
}

/// `HealthCheckPort`: the port targets receive traffic on, or a fixed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthCheckPort {
    TrafficPort,
    Port(u16),
}

/// A target group's health check (ELBv2 `HealthCheck*` fields), with ELBv2's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    pub enabled: bool,
    /// HTTP, HTTPS or TCP.
    pub protocol: Protocol,
    pub port: HealthCheckPort,
    /// Request path of HTTP(S) checks (`/` by default); None for TCP checks.
    pub path: Option<String>,
    /// Seconds between checks of one target (5..=300).
    pub interval_seconds: u32,
    /// Seconds without an answer that fail a check (2..=120).
    pub timeout_seconds: u32,
    /// Consecutive passes that make a target healthy (2..=10).
    pub healthy_threshold: u32,
    /// Consecutive failures that make a target unhealthy (2..=10).
    pub unhealthy_threshold: u32,
    /// HTTP codes that pass (`Matcher.HttpCode`: `200`, `200,202`, `200-399`); None for TCP.
    pub matcher: Option<String>,
}

/// One registered target: `id` is an IPv4 address (target type `ip`) or an instance ID
/// (`instance`); `ip` is where traffic goes (the instance's primary private IP for instances).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub id: String,
    pub port: u16,
    /// The zone as registered or detected: a zone name, `all`, or None (instance targets report
    /// their instance's zone).
    pub availability_zone: Option<String>,
    pub ip: Ipv4Addr,
    pub registered_at: Instant,
    /// Set by DeregisterTargets while the target group is in use: the target drains until then.
    pub draining_until: Option<Instant>,
}

#[derive(Debug, Clone)]
pub struct TargetGroup {
    pub arn: String,
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub vpc_id: String,
    pub target_type: TargetType,
    pub health: HealthCheck,
    /// Target group attributes (`deregistration_delay.timeout_seconds`, ...), all of them with
    /// their values as strings.
    pub attributes: BTreeMap<String, String>,
    pub targets: Vec<Registration>,
    pub tags: Tags,
}

impl TargetGroup {
    /// `deregistration_delay.timeout_seconds` (default 300).
    pub fn deregistration_delay(&self) -> u64 {
        self.attributes
            .get(super::attributes::DEREGISTRATION_DELAY)
            .and_then(|v| v.parse().ok())
            .unwrap_or(300)
    }
}

/// Every ELBv2 resource of the emulated region.
pub struct Elbv2Model {
    rng: ChaCha8Rng,
    pub region: String,
    pub account_id: String,
    pub load_balancers: BTreeMap<String, LoadBalancer>,
    pub listeners: BTreeMap<String, Listener>,
    pub target_groups: BTreeMap<String, TargetGroup>,
    pub limits: Limits,
}

/// ELBv2 names (load balancers, target groups): 1..=32 letters, digits and hyphens, no hyphen
/// at either end, not starting with `internal-`.
pub fn check_name(kind: &str, name: &str) -> Result<(), ElbError> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if name.is_empty() || name.len() > 32 || !ok_chars {
        return Err(error::validation(format!(
            "{kind} name '{name}' must be 1 to 32 characters of letters, digits and hyphens"
        )));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(error::validation(format!(
            "{kind} name '{name}' cannot begin or end with '-'"
        )));
    }
    if name.starts_with("internal-") {
        return Err(error::validation(format!(
            "{kind} name '{name}' cannot begin with 'internal-'"
        )));
    }
    Ok(())
}

/// Add `tags` to `t`, enforcing ELBv2's tag rules: keys 1..=128 characters, not starting with
/// `aws:`, no key twice in one request (`DuplicateTagKeys`), at most `limit` tags
/// (`TooManyTags`).
pub fn add_tags(t: &mut Tags, tags: &[(String, String)], limit: u32) -> Result<(), ElbError> {
    let mut seen = std::collections::HashSet::new();
    for (k, v) in tags {
        if k.is_empty() || k.len() > 128 || v.len() > 256 {
            return Err(error::validation(format!(
                "Tag key '{k}' must be 1 to 128 characters and its value at most 256"
            )));
        }
        if k.starts_with("aws:") {
            return Err(error::validation(format!(
                "Tag key '{k}' cannot start with 'aws:' (reserved)"
            )));
        }
        if !seen.insert(k.as_str()) {
            return Err(ElbError::new(
                "DuplicateTagKeys",
                format!("Tag key was specified more than once: '{k}'"),
            ));
        }
    }
    let new_keys = tags.iter().filter(|(k, _)| t.get(k).is_none()).count();
    if t.0.len() + new_keys > limit as usize {
        return Err(ElbError::new(
            "TooManyTags",
            format!("The quota for the number of tags per resource ({limit}) has been reached"),
        ));
    }
    for (k, v) in tags {
        t.set(k, v);
    }
    Ok(())
}

impl Elbv2Model {
    /// An empty region; ARN IDs drawn from a ChaCha8 RNG seeded with `seed`.
    pub fn new(seed: u64, region: &str, account_id: &str) -> Self {
        Elbv2Model {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x00e1_b0e1_b0e1),
            region: region.to_string(),
            account_id: account_id.to_string(),
            load_balancers: BTreeMap::new(),
            listeners: BTreeMap::new(),
            target_groups: BTreeMap::new(),
            limits: Limits::default(),
        }
    }

    /// 16 lowercase hex digits.
    pub(crate) fn new_hex_id(&mut self) -> String {
        format!("{:016x}", self.rng.random::<u64>())
    }

    pub(crate) fn arn(&self, resource: &str) -> String {
        format!(
            "arn:aws:elasticloadbalancing:{}:{}:{resource}",
            self.region, self.account_id
        )
    }

    pub fn load_balancer(&self, arn: &str) -> Result<&LoadBalancer, ElbError> {
        self.load_balancers
            .get(arn)
            .ok_or_else(error::load_balancer_not_found)
    }

    pub fn target_group(&self, arn: &str) -> Result<&TargetGroup, ElbError> {
        self.target_groups
            .get(arn)
            .ok_or_else(|| error::target_group_not_found(arn))
    }

    pub(crate) fn target_group_mut(&mut self, arn: &str) -> Result<&mut TargetGroup, ElbError> {
        self.target_groups
            .get_mut(arn)
            .ok_or_else(|| error::target_group_not_found(arn))
    }

    /// Load balancers whose listeners forward to target group `tg_arn` (ELBv2
    /// `LoadBalancerArns` of a target group).
    pub fn load_balancers_of(&self, tg_arn: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .listeners
            .values()
            .filter(|l| l.target_group_arn == tg_arn)
            .map(|l| l.lb_arn.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Drop registrations whose deregistration delay has passed at `now`. Returns whether any
    /// was dropped.
    pub fn prune_drained(&mut self, now: Instant) -> bool {
        let mut changed = false;
        for tg in self.target_groups.values_mut() {
            let before = tg.targets.len();
            tg.targets
                .retain(|r| r.draining_until.is_none_or(|until| until > now));
            changed |= tg.targets.len() != before;
        }
        changed
    }

    /// The earliest end of a deregistration delay still running.
    pub fn next_drain_deadline(&self) -> Option<Instant> {
        self.target_groups
            .values()
            .flat_map(|tg| tg.targets.iter().filter_map(|r| r.draining_until))
            .min()
    }

    /// ELBv2 DeleteTargetGroup. Errors: `ResourceInUse` (a listener forwards to it). Deleting a
    /// target group that does not exist succeeds.
    pub fn delete_target_group(&mut self, arn: &str) -> Result<(), ElbError> {
        if !self.load_balancers_of(arn).is_empty() {
            return Err(ElbError::new(
                "ResourceInUse",
                format!("Target group '{arn}' is currently in use by a listener or a rule"),
            ));
        }
        self.target_groups.remove(arn);
        Ok(())
    }

    /// The tags of any ELBv2 resource by ARN. Errors: `LoadBalancerNotFound`,
    /// `TargetGroupNotFound`, `ListenerNotFound` (by the ARN's resource type), `ValidationError`
    /// (not an ELBv2 ARN).
    pub fn tags_mut(&mut self, arn: &str) -> Result<&mut Tags, ElbError> {
        let kind = arn
            .split(':')
            .nth(5)
            .and_then(|r| r.split('/').next())
            .unwrap_or("");
        match kind {
            "loadbalancer" => self
                .load_balancers
                .get_mut(arn)
                .map(|l| &mut l.tags)
                .ok_or_else(error::load_balancer_not_found),
            "targetgroup" => self
                .target_groups
                .get_mut(arn)
                .map(|t| &mut t.tags)
                .ok_or_else(|| error::target_group_not_found(arn)),
            "listener" => self
                .listeners
                .get_mut(arn)
                .map(|l| &mut l.tags)
                .ok_or_else(error::listener_not_found),
            _ => Err(error::validation(format!(
                "'{arn}' is not a valid load balancer, target group or listener ARN"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_elbv2_rules() {
        assert!(check_name("Target group", "web-1").is_ok());
        assert!(check_name("Target group", &"a".repeat(32)).is_ok());
        for bad in ["", "-web", "web-", "we_b", "internal-web", &"a".repeat(33)] {
            let e = check_name("Target group", bad).unwrap_err();
            assert_eq!(e.code, "ValidationError", "{bad}");
        }
    }

    #[test]
    fn tags_limits_and_duplicates() {
        let mut t = Tags::default();
        let kv = |k: &str| (k.to_string(), "v".to_string());
        add_tags(&mut t, &[kv("a"), kv("b")], 3).unwrap();
        // overwriting a key does not count against the quota
        add_tags(&mut t, &[kv("a"), kv("c")], 3).unwrap();
        assert_eq!(
            add_tags(&mut t, &[kv("d")], 3).unwrap_err().code,
            "TooManyTags"
        );
        assert_eq!(
            add_tags(&mut t, &[kv("x"), kv("x")], 10).unwrap_err().code,
            "DuplicateTagKeys"
        );
        assert_eq!(
            add_tags(&mut t, &[kv("aws:x")], 10).unwrap_err().code,
            "ValidationError"
        );
        assert_eq!(t.0.len(), 3);
    }
}
