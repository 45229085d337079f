//! [`Emulator`]: the cheaply cloneable handle to one emulated cloud, with the in-process control
//! methods the lab and other crates' tests use (mirrored by the HTTP control API under `/_emu/`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use vpcnet_limits::InstanceLimits;

use crate::account_limits::{
    filtered_or_paginated, AccountLimitState, AccountLimits, AccountLimitsView, MeteredCall,
};
use crate::error::Ec2Error;
use crate::faults::{ActionFaults, Admission, CallCounts, FaultState, Faults};
use crate::hooks::{deliver, FabricEvent, FabricHooks, NoHooks};
use crate::model::{Cloud, InstanceState, RunInstanceRequest};
use crate::query::actions::{self, Ctx};
use crate::query::error_body;
use crate::query::params::Params;
use crate::query::render::Clock;
use info::{eni_info, instance_info};

mod info;
mod ipv6;

pub use info::{AttachmentInfo, EniInfo, InstanceInfo, RunInstance, VpcInfo};

/// Settings fixed at creation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulatorOptions {
    /// Seed of every random choice (IDs, MACs, addresses, fault draws): a run reproduces.
    pub seed: u64,
    /// Region, e.g. `us-east-1`; availability zones must start with it.
    #[serde(default = "default_region")]
    pub region: String,
    /// The 12-digit owner ID reported on resources.
    #[serde(default = "default_account")]
    pub account_id: String,
}

fn default_region() -> String {
    "us-east-1".into()
}
fn default_account() -> String {
    "123456789012".into()
}

pub(crate) struct ImdsTokens {
    pub(crate) tokens: HashMap<String, (String, Instant)>,
    pub(crate) endpoints: HashMap<String, String>,
    pub(crate) seq: u64,
}

pub(crate) struct Inner {
    seed: u64,
    cloud: Mutex<Cloud>,
    pub(crate) faults: Mutex<FaultState>,
    pub(crate) account_limits: Mutex<AccountLimitState>,
    pub(crate) counts: Mutex<CallCounts>,
    pub(crate) requests: Mutex<crate::request_log::Log>,
    hooks: RwLock<Arc<dyn FabricHooks>>,
    /// Serializes mutations with their hook calls, so hooks see changes in order.
    mutation: tokio::sync::Mutex<()>,
    base_instant: Instant,
    base_wall: DateTime<Utc>,
    request_seq: AtomicU64,
    pub(crate) imds: Mutex<ImdsTokens>,
    pub(crate) elbv2: crate::elbv2::Elbv2State,
}

/// The emulated cloud. Cheap to clone (an `Arc` inside); every clone is the same cloud.
///
/// Mutating methods that the lab's fabric must see (`run_instance`, `terminate_instance`,
/// `unassign_behind_back`, `detach_behind_back`, and every mutating EC2 call) are `async`:
/// they return after the [`FabricHooks`] have run.
#[derive(Clone)]
pub struct Emulator {
    pub(crate) inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // a panic while holding the lock cannot leave the model half-changed in a way worth
    // refusing service for; keep serving
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Emulator {
    /// An empty cloud in us-east-1 with account 123456789012, randomness seeded by `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_options(EmulatorOptions {
            seed,
            region: default_region(),
            account_id: default_account(),
        })
    }

    pub fn with_options(o: EmulatorOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                seed: o.seed,
                cloud: Mutex::new(Cloud::new(o.seed, &o.region, &o.account_id)),
                faults: Mutex::new(FaultState::new(o.seed)),
                account_limits: Mutex::new(AccountLimitState::default()),
                counts: Mutex::new(CallCounts::default()),
                requests: Mutex::new(Default::default()),
                hooks: RwLock::new(Arc::new(NoHooks)),
                mutation: tokio::sync::Mutex::new(()),
                base_instant: Instant::now(),
                base_wall: Utc::now(),
                request_seq: AtomicU64::new(0),
                imds: Mutex::new(ImdsTokens {
                    tokens: HashMap::new(),
                    endpoints: HashMap::new(),
                    seq: 0,
                }),
                elbv2: crate::elbv2::Elbv2State::new(o.seed, &o.region, &o.account_id),
            }),
        }
    }

    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    pub fn region(&self) -> String {
        lock(&self.inner.cloud).region.clone()
    }

    /// Install the lab's hooks (replacing any before).
    pub fn set_hooks(&self, hooks: Arc<dyn FabricHooks>) {
        *self.inner.hooks.write().unwrap_or_else(|e| e.into_inner()) = hooks;
    }

    /// Read the model directly (tests and the lab): `f` runs under the state lock.
    pub fn with_cloud<R>(&self, f: impl FnOnce(&Cloud) -> R) -> R {
        f(&lock(&self.inner.cloud))
    }

    pub(crate) fn with_cloud_mut<R>(&self, f: impl FnOnce(&mut Cloud) -> R) -> R {
        f(&mut lock(&self.inner.cloud))
    }

    pub(crate) fn clock(&self, now: Instant) -> Clock {
        Clock {
            now,
            base_instant: self.inner.base_instant,
            base_wall: self.inner.base_wall,
        }
    }

    pub(crate) fn next_request_id(&self) -> String {
        let n = self.inner.request_seq.fetch_add(1, Ordering::Relaxed);
        let s = self.inner.seed;
        format!(
            "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
            (s >> 32) as u32,
            (s >> 16) as u16,
            (s & 0xfff) as u16,
            (n >> 48) as u16 & 0xfff,
            n & 0xffff_ffff_ffff
        )
    }

    /// Run a state change, refresh IMDS's view, then deliver the hooks in order (outside the
    /// state lock, inside the mutation lock). An attachment to complete later is scheduled.
    pub(crate) async fn mutate<R>(
        &self,
        f: impl FnOnce(&mut Cloud, Instant) -> Result<(R, Option<(String, String, Instant)>), Ec2Error>,
    ) -> Result<R, Ec2Error> {
        let order = self.inner.mutation.lock().await;
        let now = Instant::now();
        let result = self.apply_and_collect(now, |cloud| {
            let result = f(cloud, now);
            if let Ok((_, Some((eni, att, at)))) = &result {
                if *at <= now {
                    cloud.complete_attachment(eni, att);
                }
            }
            result
        });
        let (result, events) = result;
        self.deliver_all(events).await;
        drop(order);
        let (r, pending) = result?;
        if let Some((eni, att, at)) = pending {
            if at > now {
                let emu = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    emu.finish_attachment(&eni, &att).await;
                });
            }
        }
        Ok(r)
    }

    /// Complete a delayed attachment (status `attached`, visible to IMDS, reported to hooks).
    async fn finish_attachment(&self, eni: &str, att: &str) {
        let _order = self.inner.mutation.lock().await;
        let (_, events) =
            self.apply_and_collect(Instant::now(), |c| c.complete_attachment(eni, att));
        self.deliver_all(events).await;
    }

    /// Run `f` under the state lock, refresh IMDS's view, and take the queued fabric events.
    fn apply_and_collect<T>(
        &self,
        now: Instant,
        f: impl FnOnce(&mut Cloud) -> T,
    ) -> (T, Vec<FabricEvent>) {
        let faults = lock(&self.inner.faults).config().clone();
        let mut cloud = lock(&self.inner.cloud);
        let out = f(&mut cloud);
        cloud.refresh_imds(now, &|id| faults.imds_lag(id));
        (out, cloud.take_events())
    }

    async fn deliver_all(&self, events: Vec<FabricEvent>) {
        if events.is_empty() {
            return;
        }
        let hooks = self
            .inner
            .hooks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for ev in events {
            deliver(hooks.as_ref(), ev).await;
        }
    }

    /// Create a VPC with primary CIDR `cidr` and secondary CIDRs `extra` (each /16../28), plus
    /// its default security group. Errors: `InvalidParameterValue` (size, overlap).
    pub fn create_vpc(&self, cidr: Ipv4Net, extra: &[Ipv4Net]) -> Result<VpcInfo, Ec2Error> {
        let (vpc_id, sg) = lock(&self.inner.cloud).create_vpc(cidr, extra)?;
        Ok(VpcInfo {
            vpc_id,
            default_security_group_id: sg,
        })
    }

    /// Create a subnet (`cidr` /16../28 inside a VPC CIDR) in availability zone `az`, which must
    /// start with the region (e.g. `us-east-1a`). Returns the subnet ID.
    pub fn create_subnet(&self, vpc_id: &str, cidr: Ipv4Net, az: &str) -> Result<String, Ec2Error> {
        lock(&self.inner.cloud).create_subnet(vpc_id, cidr, az)
    }

    /// Create security group `name` in `vpc_id`. Returns the group ID (`sg-...`).
    pub fn create_security_group(&self, vpc_id: &str, name: &str) -> Result<String, Ec2Error> {
        lock(&self.inner.cloud).create_security_group(vpc_id, name, name)
    }

    /// Make an instance type not in the compiled-in table known to this cloud (EC2 answers it in
    /// DescribeInstanceTypes and launches it), or override a known type's limits.
    pub fn register_instance_type(&self, limits: InstanceLimits) {
        lock(&self.inner.cloud).register_instance_type(limits);
    }

    /// Launch an instance with its primary ENI (device index 0, DeleteOnTermination=true),
    /// reported to the hooks as attached. Errors: `InvalidInstanceType`,
    /// `InvalidSubnetID.NotFound`, `InvalidGroup.NotFound`, `InsufficientFreeAddressesInSubnet`,
    /// `PrivateIpAddressInUse`.
    pub async fn run_instance(&self, req: RunInstance) -> Result<InstanceInfo, Ec2Error> {
        let id = self
            .mutate(|c, now| {
                let id = c.run_instance(
                    RunInstanceRequest {
                        instance_type: req.instance_type,
                        subnet_id: req.subnet_id,
                        groups: req.security_group_ids,
                        private_ip: req.private_ip,
                        tags: req.tags,
                        user_data: req.user_data,
                    },
                    now,
                )?;
                Ok((id, None))
            })
            .await?;
        Ok(self.instance(&id).expect("launched"))
    }

    /// Terminate an instance as TerminateInstances does.
    pub async fn terminate_instance(&self, instance_id: &str) -> Result<(), Ec2Error> {
        let ids = [instance_id.to_string()];
        self.mutate(|c, _| c.terminate_instances(&ids).map(|_| ((), None)))
            .await
    }

    /// Unassign secondary IPs / prefixes from an ENI behind the agent's back (as another actor
    /// or a console user would). Same checks and hooks as UnassignPrivateIpAddresses.
    pub async fn unassign_behind_back(
        &self,
        eni_id: &str,
        ips: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
    ) -> Result<(), Ec2Error> {
        self.mutate(|c, _| c.unassign(eni_id, ips, prefixes).map(|_| ((), None)))
            .await
    }

    /// Detach an ENI (any device index, even the primary) behind the agent's back.
    /// Errors: `InvalidNetworkInterfaceID.NotFound`, `InvalidAttachmentID.NotFound` (not attached).
    pub async fn detach_behind_back(&self, eni_id: &str) -> Result<(), Ec2Error> {
        self.mutate(|c, _| c.force_detach(eni_id).map(|_| ((), None)))
            .await
    }

    /// Replace every fault setting (token buckets restart full).
    /// Errors: `InvalidParameterValue` naming the bad field.
    pub fn set_faults(&self, faults: Faults) -> Result<(), Ec2Error> {
        faults.validate().map_err(Ec2Error::invalid_value)?;
        lock(&self.inner.faults).set(faults);
        Ok(())
    }

    /// Set (Some) or clear (None) the faults of one EC2 action, or of every action (`*`).
    pub fn set_action_faults(
        &self,
        action: &str,
        faults: Option<ActionFaults>,
    ) -> Result<(), Ec2Error> {
        if let Some(f) = &faults {
            let mut probe = Faults::default();
            probe.actions.insert(action.to_string(), f.clone());
            probe.validate().map_err(Ec2Error::invalid_value)?;
        }
        lock(&self.inner.faults).set_action(action, faults);
        Ok(())
    }

    /// Replace the account's rate limits ([`crate::account_limits`]); every account bucket
    /// restarts full. Errors: `InvalidParameterValue` naming the bad field and the fix.
    pub fn set_account_limits(&self, limits: AccountLimits) -> Result<(), Ec2Error> {
        limits.validate().map_err(Ec2Error::invalid_value)?;
        lock(&self.inner.account_limits).set(limits);
        Ok(())
    }

    /// The account's rate limits in force and every live bucket's level and counts.
    pub fn account_limits(&self) -> AccountLimitsView {
        lock(&self.inner.account_limits).view(tokio::time::Instant::now())
    }

    /// IMDS lag for one instance (Some) or the default for all (None). Applies to changes made
    /// from now on.
    pub fn set_imds_lag(&self, instance_id: Option<&str>, lag: Duration) {
        lock(&self.inner.faults).set_imds_lag(instance_id, lag);
    }

    /// The next `calls` DescribeInstances calls answer an empty `PrivateDnsName`.
    pub fn set_empty_private_dns_names(&self, calls: u32) {
        lock(&self.inner.faults).set_empty_private_dns_names(calls);
    }

    pub fn faults(&self) -> Faults {
        lock(&self.inner.faults).config().clone()
    }

    /// Call counters since start or the last [`Emulator::reset_calls`].
    pub fn calls(&self) -> CallCounts {
        lock(&self.inner.counts).clone()
    }

    pub fn reset_calls(&self) {
        *lock(&self.inner.counts) = CallCounts::default();
    }

    /// The request log's records with `seq > since` ([`crate::request_log`]).
    pub fn requests(&self, since: u64) -> crate::request_log::RequestLog {
        lock(&self.inner.requests).snapshot(since)
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        lock(&self.inner.requests).clear();
    }

    /// Appends one answered request to the log (its `seq` and `at_ms` are set here).
    pub(crate) fn log_request(&self, mut r: crate::request_log::RequestRecord) {
        r.at_ms = self.inner.base_instant.elapsed().as_millis() as u64;
        lock(&self.inner.requests).push(r);
    }

    /// The running or stopped instance whose primary private IP is `ip`.
    pub(crate) fn instance_at(&self, ip: Option<IpAddr>) -> Option<String> {
        match ip {
            Some(IpAddr::V4(ip)) => {
                self.with_cloud(|c| c.instance_by_primary_ip(ip).map(|i| i.id.clone()))
            }
            _ => None,
        }
    }

    pub(crate) fn count_imds(&self, instance_id: &str) {
        lock(&self.inner.counts)
            .per_instance
            .entry(instance_id.to_string())
            .or_default()
            .imds += 1;
    }

    pub fn eni(&self, eni_id: &str) -> Option<EniInfo> {
        let now = Instant::now();
        self.with_cloud(|c| c.eni(eni_id).map(|e| eni_info(e, now)))
    }

    /// Every ENI, sorted by ID.
    pub fn enis(&self) -> Vec<EniInfo> {
        let now = Instant::now();
        self.with_cloud(|c| c.enis().map(|e| eni_info(e, now)).collect())
    }

    pub fn instance(&self, instance_id: &str) -> Option<InstanceInfo> {
        let now = Instant::now();
        self.with_cloud(|c| c.instance(instance_id).map(|i| instance_info(c, i, now)))
    }

    pub fn instances(&self) -> Vec<InstanceInfo> {
        let now = Instant::now();
        self.with_cloud(|c| c.instances().map(|i| instance_info(c, i, now)).collect())
    }

    /// EC2 `AvailableIpAddressCount` of a subnet.
    /// EC2 AuthorizeSecurityGroupIngress in-process: add `rules` to `group_id` (all or
    /// nothing); the fabric hooks see the new ingress view before this returns.
    /// Errors: `InvalidGroup.NotFound`, `InvalidPermission.Duplicate`.
    pub async fn authorize_ingress(
        &self,
        group_id: &str,
        rules: Vec<crate::model::IngressRule>,
    ) -> Result<(), Ec2Error> {
        self.mutate(|c, _| c.authorize_ingress(group_id, rules).map(|()| ((), None)))
            .await
    }

    /// EC2 CreateTags in-process: set `tags` on every resource in `resources` (all or nothing).
    /// Errors: the NotFound code of the first unknown resource.
    pub fn create_tags(
        &self,
        resources: &[String],
        tags: &[(String, String)],
    ) -> Result<(), Ec2Error> {
        lock(&self.inner.cloud).create_tags(resources, tags)
    }

    /// Fragments subnet `subnet_id` ([`crate::model::Subnet::fragment`]): one address taken
    /// in every free aligned /28, so prefix requests there fail with `InsufficientCidrBlocks`
    /// while single addresses can still be assigned. Returns the addresses taken. Errors:
    /// `InvalidSubnetID.NotFound`.
    pub fn fragment_subnet(&self, subnet_id: &str) -> Result<Vec<Ipv4Addr>, Ec2Error> {
        self.with_cloud_mut(|c| {
            c.subnets
                .get_mut(subnet_id)
                .map(|s| s.fragment())
                .ok_or_else(|| Ec2Error::subnet_not_found(subnet_id))
        })
    }

    /// Undoes [`Emulator::fragment_subnet`]. Returns the addresses given back.
    pub fn defragment_subnet(&self, subnet_id: &str) -> Result<Vec<Ipv4Addr>, Ec2Error> {
        self.with_cloud_mut(|c| {
            c.subnets
                .get_mut(subnet_id)
                .map(|s| s.defragment())
                .ok_or_else(|| Ec2Error::subnet_not_found(subnet_id))
        })
    }

    pub fn subnet_available(&self, subnet_id: &str) -> Option<u32> {
        self.with_cloud(|c| c.subnet(subnet_id).map(|s| s.available()))
    }

    /// Answer one EC2 Query call: returns (HTTP status, XML body). `peer` attributes the call to
    /// an instance when it is that instance's primary private IP. The call is unsigned: the
    /// account limits count it in the default account.
    pub async fn ec2_call(&self, params: Params, peer: Option<IpAddr>) -> (u16, String) {
        self.ec2_call_from(params, peer, None).await
    }

    /// [`Emulator::ec2_call`] signed with `access_key`, whose account's rate limits apply.
    pub async fn ec2_call_from(
        &self,
        params: Params,
        peer: Option<IpAddr>,
        access_key: Option<&str>,
    ) -> (u16, String) {
        let request_id = self.next_request_id();
        let fail = |e: Ec2Error| (e.status(), error_body(&e, &request_id));
        let action = match params.required("Action") {
            Ok(a) => a.to_string(),
            Err(e) => return fail(e),
        };
        let Some(mutating) = actions::is_mutating(&action) else {
            return fail(actions::invalid_action(&action));
        };
        let caller = match peer {
            Some(IpAddr::V4(ip)) => {
                self.with_cloud(|c| c.instance_by_primary_ip(ip).map(|i| i.id.clone()))
            }
            _ => None,
        };
        if let Some(i) = &caller {
            *lock(&self.inner.counts)
                .per_instance
                .entry(i.clone())
                .or_default()
                .ec2
                .entry(action.clone())
                .or_default() += 1;
        }
        let metered = MeteredCall {
            api: crate::request_log::Api::Ec2,
            action: &action,
            filtered: filtered_or_paginated(&params),
            access_key,
        };
        let admission = self.admit_call(&action, mutating, &metered);
        let attach_delay = if action == "AttachNetworkInterface" {
            admission.latency
        } else {
            if !admission.latency.is_zero() {
                tokio::time::sleep(admission.latency).await;
            }
            Duration::ZERO
        };
        if let Some(e) = admission.error {
            return fail(e);
        }
        let empty_dns = action == "DescribeInstances" && lock(&self.inner.faults).take_empty_dns();
        let run = |cloud: &mut Cloud, now: Instant| {
            let mut ctx = Ctx {
                cloud,
                clock: self.clock(now),
                attach_delay,
                empty_dns,
                request_id: request_id.clone(),
            };
            actions::handle(&action, &params, &mut ctx).map(|d| (d.body, d.attachment))
        };
        let result = if mutating {
            self.mutate(run).await
        } else {
            let now = Instant::now();
            self.with_cloud_mut(|c| run(c, now).map(|(b, _)| b))
        };
        match result {
            Ok(body) => (200, body),
            Err(e) => fail(e),
        }
    }

    /// Count one call of `action` (its key in [`CallCounts`] and [`Faults`]: the EC2 action
    /// name, or `elbv2:` + the ELBv2 action name), take its account's token (`metered`), then
    /// decide its faults. A call its account's bucket throttles takes no fault token.
    pub(crate) fn admit_call(
        &self,
        action: &str,
        mutating: bool,
        metered: &MeteredCall,
    ) -> Admission {
        {
            let mut counts = lock(&self.inner.counts);
            *counts.per_action.entry(action.to_string()).or_default() += 1;
            if mutating {
                counts.mutating += 1;
            }
        }
        let admitted = lock(&self.inner.account_limits).admit(metered, tokio::time::Instant::now());
        let admission = if admitted {
            lock(&self.inner.faults).admit(action, Instant::now())
        } else {
            Admission {
                error: Some(Ec2Error::throttled()),
                latency: Duration::ZERO,
                throttled: true,
            }
        };
        if admission.throttled {
            *lock(&self.inner.counts)
                .throttled
                .entry(action.to_string())
                .or_default() += 1;
        }
        admission
    }

    pub(crate) fn instance_state(&self, instance_id: &str) -> Option<InstanceState> {
        self.with_cloud(|c| c.instance(instance_id).map(|i| i.state))
    }
}
