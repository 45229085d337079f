//! Warm-pool settings: the VPC CNI's WARM_ENI_TARGET, WARM_IP_TARGET, MINIMUM_IP_TARGET,
//! WARM_PREFIX_TARGET, ENABLE_PREFIX_DELEGATION and MAX_ENI, plus the instance limits.

use serde::{Deserialize, Serialize};
use vpcnet_limits::InstanceLimits;

/// Default cooldown after a release before an address is handed out again: 30 s
/// (the VPC CNI's `IP_COOLDOWN_PERIOD`).
pub const DEFAULT_COOLDOWN_MS: u64 = 30_000;

/// Addresses in one /28 prefix.
pub const IPS_PER_PREFIX: u32 = 16;

/// Inputs of the warm-pool decision.
///
/// Semantics (the VPC CNI's, see its `docs/eni-and-ip-target.md`), with vpcnet's fixes:
/// - `warm_ip_target` / `minimum_ip_target` set: IP mode. Keep at least `warm_ip_target` free
///   addresses and at least `minimum_ip_target` addresses attached in total;
///   `warm_eni_target` is ignored. When only `minimum_ip_target` is set the warm target is 1,
///   so the pool keeps growing with the pods instead of stopping at the floor (VPC CNI #2650).
/// - neither set: ENI mode. Keep at least `warm_eni_target` × (addresses per ENI) free
///   addresses, growing and shrinking by whole ENIs, each filled to its limit.
/// - `prefix_delegation`: addresses come in /28 prefixes (16 each). Without WARM_IP_TARGET /
///   MINIMUM_IP_TARGET, keep `warm_prefix_target` wholly free prefixes.
/// - Cooling-down addresses count as unavailable (VPC CNI #2896).
/// - Surplus is returned only once it has lasted: an address must have been free for
///   `surplus_hold_ms`, and in the IP target modes the surplus is counted from the fewest
///   assignable addresses any ADD left within that hold ([`crate::Pool::recent_low_available`]),
///   so a pod roll (the replacement takes an address while its predecessor's cools down) keeps
///   the addresses it needs instead of returning one and assigning one per roll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmConfig {
    /// WARM_ENI_TARGET: free ENIs' worth of addresses to keep (a count of ENIs). Default 1.
    pub warm_eni_target: u32,
    /// WARM_IP_TARGET: free addresses to keep (a count of IPv4 /32s).
    pub warm_ip_target: Option<u32>,
    /// MINIMUM_IP_TARGET: addresses to keep attached in total, assigned or not.
    pub minimum_ip_target: Option<u32>,
    /// WARM_PREFIX_TARGET: wholly free /28 prefixes to keep in prefix mode. Default 1.
    pub warm_prefix_target: u32,
    /// ENABLE_PREFIX_DELEGATION: assign /28 prefixes instead of secondary addresses.
    pub prefix_delegation: bool,
    /// MAX_ENI: cap on attached ENIs (the primary included), below the instance limit.
    pub max_eni: Option<u32>,
    /// Instance type limit: ENIs on the default network card.
    pub eni_limit: u32,
    /// Instance type limit: IPv4 addresses per ENI, the primary address included
    /// (each /28 prefix takes one of these slots).
    pub ipv4_per_eni: u32,
    /// Milliseconds a released address cools down before it can be handed out again.
    pub cooldown_ms: u64,
    /// Milliseconds an address must have been free (not assigned, not cooling) before it
    /// counts as surplus that may be returned to EC2. Damps assign/unassign churn under pod
    /// rolls (VPC CNI #730). Default 30 s.
    pub surplus_hold_ms: u64,
    /// Whether pods get addresses of the primary ENI (default true). False under custom
    /// networking (`AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true`, as in the VPC CNI): pods use
    /// only secondary ENIs (in the ENIConfig's subnet); the plan never assigns addresses to
    /// the primary ENI and [`crate::Pool::assign`] never hands one of its addresses out.
    /// Addresses already on it (from before) stay attached and unused.
    #[serde(default = "yes")]
    pub primary_eni_for_pods: bool,
    /// Whether a released address waits, besides its cooldown, for the node's connection
    /// tracking entries of it to be deleted before reuse ([`crate::Pool::conntrack_due`]).
    /// The agent sets it when it manages a node datapath that tracks connections; false
    /// (the default) leaves the cooldown alone in charge.
    #[serde(default)]
    pub conntrack_flush: bool,
    /// Whether the agent may add or remove ENIs, secondary addresses and prefixes (default
    /// true). False with `DISABLE_NETWORK_RESOURCE_PROVISIONING` or `ENABLE_IMDS_ONLY_MODE`:
    /// the pool is exactly what is attached to the node, the plan is always empty (the warm
    /// targets have no effect) and an ADD finding nothing free fails with
    /// [`crate::AssignError::ProvisioningDisabled`].
    #[serde(default = "yes")]
    pub provisioning: bool,
    /// Prefix delegation only: milliseconds after a prefix request failed for a fragmented
    /// subnet (`InsufficientCidrBlocks`) before prefixes are tried again; meanwhile the pool
    /// grows with secondary /32 addresses ([`crate::Pool::fall_back_to_ips`]). Doubles with
    /// each further failure, up to 16 times. Default 2 minutes.
    #[serde(default = "default_prefix_retry")]
    pub prefix_retry_ms: u64,
    /// ENABLE_MULTI_NIC: the network cards besides card 0 (the primary ENI's) whose ENIs the
    /// pool manages, each with its own ENI limit and its own warm targets, as the VPC CNI
    /// keeps one pool per card. Empty (the default): card 0 only.
    #[serde(default)]
    pub extra_cards: Vec<NetworkCardLimit>,
}

/// `WARM_IP_TARGET` and `MINIMUM_IP_TARGET` of every network card other than 0, fixed as in
/// the VPC CNI (`DefaultWarmIPTarget`, `DefaultMinimumIPTarget`).
pub const EXTRA_CARD_IP_TARGET: u32 = 1;

/// A network card other than card 0 that the pool manages (ENABLE_MULTI_NIC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkCardLimit {
    /// EC2 `NetworkCardIndex` (at least 1).
    pub index: u32,
    /// Instance type limit: ENIs on this card (`MaximumNetworkInterfaces`).
    pub max_enis: u32,
}

fn yes() -> bool {
    true
}

fn default_prefix_retry() -> u64 {
    DEFAULT_PREFIX_RETRY_MS
}

/// Default of [`WarmConfig::prefix_retry_ms`]: 2 minutes, the VPC CNI's back-off after a
/// subnet ran out of addresses.
pub const DEFAULT_PREFIX_RETRY_MS: u64 = 120_000;

/// Which target family drives the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmMode {
    /// WARM_ENI_TARGET: grow and shrink by whole ENIs.
    Eni { warm_enis: u32 },
    /// WARM_IP_TARGET / MINIMUM_IP_TARGET: grow and shrink by single addresses.
    Ip { warm_ips: u32, minimum_ips: u32 },
    /// Prefix delegation with WARM_PREFIX_TARGET.
    Prefix { warm_prefixes: u32 },
    /// Prefix delegation with WARM_IP_TARGET / MINIMUM_IP_TARGET (converted to prefixes).
    PrefixIp { warm_ips: u32, minimum_ips: u32 },
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("instance limits are unusable: {0}")]
    Limits(String),
    #[error("MAX_ENI={0} is invalid: it must be at least 1 (the primary ENI)")]
    MaxEni(u32),
    #[error("custom networking (AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true) puts pods on secondary ENIs only, but at most {0} ENI (the primary) can be attached: raise MAX_ENI or use an instance type with more ENIs")]
    NoSecondaryEni(u32),
}

impl WarmConfig {
    /// Defaults (WARM_ENI_TARGET=1, 30 s cooldown) for an instance type's limits.
    pub fn for_limits(limits: &InstanceLimits) -> Self {
        WarmConfig {
            warm_eni_target: 1,
            warm_ip_target: None,
            minimum_ip_target: None,
            warm_prefix_target: 1,
            prefix_delegation: false,
            max_eni: None,
            eni_limit: limits.eni_limit,
            ipv4_per_eni: limits.ipv4_per_eni,
            cooldown_ms: DEFAULT_COOLDOWN_MS,
            surplus_hold_ms: DEFAULT_COOLDOWN_MS,
            primary_eni_for_pods: true,
            conntrack_flush: false,
            provisioning: true,
            prefix_retry_ms: DEFAULT_PREFIX_RETRY_MS,
            extra_cards: Vec::new(),
        }
    }

    /// The network cards whose ENIs serve pods: 0, then [`WarmConfig::extra_cards`].
    pub fn cards(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(0).chain(self.extra_cards.iter().map(|c| c.index))
    }

    /// The settings one card's share of the pool is planned with: for card 0 these; for an
    /// extra card that card's ENI limit (MAX_ENI caps every card, as the VPC CNI applies it per
    /// card), no primary ENI, and the VPC CNI's fixed targets of the cards other than 0: one
    /// warm and one minimum address (`WARM_IP_TARGET=1`, `MINIMUM_IP_TARGET=1`) whatever the
    /// settings say, in /28 prefixes with prefix delegation.
    pub fn for_card(&self, card: u32) -> WarmConfig {
        let mut cfg = self.clone();
        cfg.extra_cards.clear();
        if let Some(c) = self.extra_cards.iter().find(|c| c.index == card) {
            cfg.eni_limit = c.max_enis;
            cfg.primary_eni_for_pods = true;
            cfg.warm_ip_target = Some(EXTRA_CARD_IP_TARGET);
            cfg.minimum_ip_target = Some(EXTRA_CARD_IP_TARGET);
        }
        cfg
    }

    /// Checks the limits and MAX_ENI.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.eni_limit == 0 || self.ipv4_per_eni < 2 {
            return Err(ConfigError::Limits(format!(
                "{} ENIs with {} IPv4 addresses each leaves no address for pods",
                self.eni_limit, self.ipv4_per_eni
            )));
        }
        if self.max_eni == Some(0) {
            return Err(ConfigError::MaxEni(0));
        }
        if !self.primary_eni_for_pods && self.max_enis() < 2 {
            return Err(ConfigError::NoSecondaryEni(self.max_enis()));
        }
        if let Some(c) = self
            .extra_cards
            .iter()
            .find(|c| c.index == 0 || c.max_enis == 0)
        {
            return Err(ConfigError::Limits(format!(
                "network card {} with {} ENIs cannot be managed besides card 0",
                c.index, c.max_enis
            )));
        }
        Ok(())
    }

    /// ENIs the pool may use: min(instance limit, MAX_ENI).
    pub fn max_enis(&self) -> u32 {
        self.max_eni
            .map_or(self.eni_limit, |m| m.min(self.eni_limit))
            .max(1)
    }

    /// Slots per ENI for pods: secondary addresses (or prefixes) per ENI, i.e. the
    /// instance's IPv4 per ENI minus the primary address.
    pub fn slots_per_eni(&self) -> u32 {
        self.ipv4_per_eni.saturating_sub(1)
    }

    /// Pod addresses one full ENI holds (slots × 16 in prefix mode).
    pub fn ips_per_eni(&self) -> u32 {
        if self.prefix_delegation {
            self.slots_per_eni() * IPS_PER_PREFIX
        } else {
            self.slots_per_eni()
        }
    }

    /// Pod addresses the whole node can hold (without the primary ENI's under custom
    /// networking), over every managed network card.
    pub fn max_ips(&self) -> u32 {
        let card0 = self
            .max_enis()
            .saturating_sub(u32::from(!self.primary_eni_for_pods))
            * self.ips_per_eni();
        card0
            + self
                .extra_cards
                .iter()
                .map(|c| self.for_card(c.index).max_enis() * self.ips_per_eni())
                .sum::<u32>()
    }

    /// Whether pods may use addresses of an ENI (`primary`: the instance's primary ENI).
    pub fn eni_for_pods(&self, primary: bool) -> bool {
        self.primary_eni_for_pods || !primary
    }

    /// The target family in force.
    pub fn mode(&self) -> WarmMode {
        let ip_mode = self.warm_ip_target.is_some() || self.minimum_ip_target.is_some();
        let warm_ips = self.warm_ip_target.unwrap_or(1);
        let minimum_ips = self.minimum_ip_target.unwrap_or(0);
        match (self.prefix_delegation, ip_mode) {
            (false, false) => WarmMode::Eni {
                warm_enis: self.warm_eni_target,
            },
            (false, true) => WarmMode::Ip {
                warm_ips,
                minimum_ips,
            },
            (true, false) => WarmMode::Prefix {
                warm_prefixes: self.warm_prefix_target,
            },
            (true, true) => WarmMode::PrefixIp {
                warm_ips,
                minimum_ips,
            },
        }
    }
}
