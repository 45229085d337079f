//! An in-process fake cloud for agent tests: the emulator's pure model
//! (`vpcnet_emu::model::Cloud`, EC2's rules, limits and error codes) behind the agent's cloud
//! seams ([`Ec2Api`], [`MetadataApi`]), with no HTTP and no SDK in between, on tokio's clock
//! (so tests run paused). Every call can be given an [`Outcome`]: success, throttling,
//! 5xx/unavailable, an EC2 client error, "applied, reply lost", a delay, or a hang. Outcomes
//! come from a per-action script first, then from seeded random rates.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use vpcnet_agent::cloud::{CloudApis, Ec2Api, Ec2Result, ImdsResult, MetadataApi};
use vpcnet_ec2::{
    Action, AddressRelease, AddressRequest, Assigned, CreateEni, Ec2Error, EniAttachment,
    NetworkInterface, Subnet, Tags,
};
use vpcnet_emu::model::{self, AssignRequest, CreateEniRequest, ModifyEniRequest};
use vpcnet_imds::{ImdsError, ImdsInterface};
use vpcnet_limits::InstanceLimits;

/// What one EC2 call does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Applied, answered.
    Ok,
    /// `RequestLimitExceeded` (HTTP 503), not applied.
    Throttle,
    /// `Unavailable` (HTTP 503), not applied.
    Unavailable,
    /// An EC2 client error with this code (HTTP 400), not applied, e.g.
    /// `InsufficientFreeAddressesInSubnet`, `AttachmentLimitExceeded`.
    Client(&'static str),
    /// Applied, but the reply is lost: the caller gets a timeout.
    LostReply,
    /// Waits this long (tokio's clock), then applied and answered.
    Delay(Duration),
    /// Applied at once, answered after this long.
    SlowReply(Duration),
    /// Never answers (and is not applied).
    Hang,
    /// The request never reached EC2: a transport error whose source is an I/O error with
    /// this text (not applied).
    Transport(&'static str),
}

/// Random faults for calls without a scripted outcome: each call draws once.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    pub throttle: f64,
    pub unavailable: f64,
    pub lost_reply: f64,
}

/// One call as the fake saw it.
#[derive(Debug, Clone)]
pub struct Call {
    pub action: Action,
    pub outcome: Outcome,
    pub at: tokio::time::Instant,
}

/// Outcomes queued for an action once a trigger action is called.
type Armed = (Action, Vec<Outcome>);

struct Inner {
    model: Mutex<model::Cloud>,
    instance_id: String,
    region: String,
    script: Mutex<BTreeMap<Action, VecDeque<Outcome>>>,
    /// trigger → (action, outcomes): once a call of the trigger is made, the action's next
    /// calls get these outcomes first.
    after: Mutex<BTreeMap<Action, Vec<Armed>>>,
    rates: Mutex<(Rates, rand_chacha::ChaCha8Rng)>,
    calls: Mutex<Vec<Call>>,
    attach_delay: Mutex<Duration>,
    /// Reads of every attached ENI from IMDS (the reconciler's drift check).
    imds_reads: std::sync::atomic::AtomicUsize,
}

/// The fake cloud: one VPC (10.0.0.0/16), one subnet (10.0.0.0/20, us-east-1a), one running
/// instance the agent runs on. Cheap to clone (shared state).
#[derive(Clone)]
pub struct FakeCloud(Arc<Inner>);

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

impl FakeCloud {
    /// A cloud with one instance of `instance_type`.
    pub fn new(instance_type: &str) -> Self {
        let mut m = model::Cloud::new(7, "us-east-1", "123456789012");
        let (vpc, _) = m.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
        let subnet = m
            .create_subnet(&vpc, "10.0.0.0/20".parse().unwrap(), "us-east-1a")
            .unwrap();
        let instance_id = m
            .run_instance(
                model::RunInstanceRequest {
                    instance_type: instance_type.into(),
                    subnet_id: subnet,
                    ..Default::default()
                },
                now(),
            )
            .unwrap();
        m.take_events();
        FakeCloud(Arc::new(Inner {
            model: Mutex::new(m),
            instance_id,
            region: "us-east-1".into(),
            script: Mutex::new(BTreeMap::new()),
            after: Mutex::new(BTreeMap::new()),
            rates: Mutex::new((Rates::default(), rand_chacha::ChaCha8Rng::seed_from_u64(13))),
            calls: Mutex::new(Vec::new()),
            attach_delay: Mutex::new(Duration::from_millis(500)),
            imds_reads: Default::default(),
        }))
    }

    /// The seams to hand to the agent ([`vpcnet_agent::AgentOptions::cloud`]).
    pub fn apis(&self) -> CloudApis {
        CloudApis {
            ec2: Arc::new(self.clone()),
            metadata: Arc::new(self.clone()),
        }
    }

    pub fn instance_id(&self) -> &str {
        &self.0.instance_id
    }

    /// The next calls of `action` have these outcomes, in order (after those already queued).
    pub fn script(&self, action: Action, outcomes: impl IntoIterator<Item = Outcome>) {
        self.0
            .script
            .lock()
            .unwrap()
            .entry(action)
            .or_default()
            .extend(outcomes);
    }

    /// Once the next call of `trigger` is made, the next calls of `action` have `outcomes`
    /// first (e.g. the describe after a lost reply is slow).
    pub fn after(&self, trigger: Action, action: Action, outcomes: Vec<Outcome>) {
        self.0
            .after
            .lock()
            .unwrap()
            .entry(trigger)
            .or_default()
            .push((action, outcomes));
    }

    /// Random faults for unscripted calls, drawn from a ChaCha8 RNG seeded with `seed`.
    pub fn set_rates(&self, rates: Rates, seed: u64) {
        *self.0.rates.lock().unwrap() = (rates, rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    }

    /// How long an attachment stays `attaching`.
    pub fn set_attach_delay(&self, d: Duration) {
        *self.0.attach_delay.lock().unwrap() = d;
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.0.calls.lock().unwrap().clone()
    }

    /// How often the agent read every attached ENI from IMDS so far.
    pub fn imds_reads(&self) -> usize {
        self.0.imds_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Calls of `action` so far.
    pub fn count(&self, action: Action) -> usize {
        self.calls().iter().filter(|c| c.action == action).count()
    }

    /// Reads or changes the model directly (the test's view of EC2).
    pub fn with_model<T>(&self, f: impl FnOnce(&mut model::Cloud) -> T) -> T {
        f(&mut self.0.model.lock().unwrap())
    }

    /// ENIs attached to the instance: id → secondary IPs.
    pub fn ec2_enis(&self) -> BTreeMap<String, BTreeSet<Ipv4Addr>> {
        self.with_model(|m| {
            m.enis()
                .filter(|e| {
                    e.attachment
                        .as_ref()
                        .is_some_and(|a| a.instance_id == self.0.instance_id)
                })
                .map(|e| (e.id.clone(), e.secondary_ips.iter().copied().collect()))
                .collect()
        })
    }

    /// Every secondary IP EC2 lists on the instance.
    pub fn ec2_ips(&self) -> BTreeSet<Ipv4Addr> {
        self.ec2_enis().into_values().flatten().collect()
    }

    /// ENIs attached nowhere (leaks, unless the agent is between create and attach).
    pub fn detached_enis(&self) -> Vec<String> {
        self.with_model(|m| {
            m.enis()
                .filter(|e| e.attachment.is_none())
                .map(|e| e.id.clone())
                .collect()
        })
    }

    fn outcome(&self, action: Action) -> Outcome {
        let scripted = self
            .0
            .script
            .lock()
            .unwrap()
            .get_mut(&action)
            .and_then(VecDeque::pop_front);
        let outcome = scripted.unwrap_or_else(|| {
            let mut g = self.0.rates.lock().unwrap();
            let (rates, rng) = &mut *g;
            let draw: f64 = rng.random();
            if draw < rates.throttle {
                Outcome::Throttle
            } else if draw < rates.throttle + rates.unavailable {
                Outcome::Unavailable
            } else if draw < rates.throttle + rates.unavailable + rates.lost_reply {
                Outcome::LostReply
            } else {
                Outcome::Ok
            }
        });
        if let Some(armed) = self.0.after.lock().unwrap().remove(&action) {
            let mut script = self.0.script.lock().unwrap();
            for (then, outcomes) in armed {
                let q = script.entry(then).or_default();
                for o in outcomes.into_iter().rev() {
                    q.push_front(o);
                }
            }
        }
        self.0.calls.lock().unwrap().push(Call {
            action,
            outcome,
            at: tokio::time::Instant::now(),
        });
        outcome
    }

    /// Applies a call to the model now; the model's error as EC2 would answer it.
    fn apply<T>(
        &self,
        action: Action,
        apply: impl FnOnce(&mut model::Cloud, std::time::Instant) -> Result<T, vpcnet_emu::Ec2Error>,
    ) -> Result<T, Ec2Error> {
        let mut m = self.0.model.lock().unwrap();
        let r = apply(&mut m, now());
        m.take_events();
        r.map_err(|e| {
            let status = e.status();
            Ec2Error::api(action, e.code, e.message, Some(status))
        })
    }

    /// Runs `apply` against the model as `action`, with the call's outcome.
    async fn call<T>(
        &self,
        action: Action,
        apply: impl FnOnce(&mut model::Cloud, std::time::Instant) -> Result<T, vpcnet_emu::Ec2Error>,
    ) -> Result<T, Ec2Error> {
        match self.outcome(action) {
            Outcome::Ok => self.apply(action, apply),
            Outcome::Throttle => Err(Ec2Error::api(
                action,
                "RequestLimitExceeded",
                "Request limit exceeded.",
                Some(503),
            )),
            Outcome::Unavailable => Err(Ec2Error::api(
                action,
                "Unavailable",
                "The service is unavailable. Please try again shortly.",
                Some(503),
            )),
            Outcome::Client(code) => Err(Ec2Error::api(action, code, "injected", Some(400))),
            Outcome::LostReply => {
                let _ = self.apply(action, apply);
                Err(Ec2Error::Timeout {
                    action,
                    after: Duration::from_secs(30),
                    attempts: 1,
                })
            }
            Outcome::Delay(d) => {
                tokio::time::sleep(d).await;
                self.apply(action, apply)
            }
            Outcome::SlowReply(d) => {
                let r = self.apply(action, apply);
                tokio::time::sleep(d).await;
                r
            }
            Outcome::Hang => std::future::pending().await,
            Outcome::Transport(why) => Err(Ec2Error::Transport {
                action,
                message: "the request could not be delivered".into(),
                source: Some(Arc::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    why,
                ))),
            }),
        }
    }
}

fn network_interface(e: &model::Eni, now: std::time::Instant) -> NetworkInterface {
    NetworkInterface {
        eni_id: e.id.clone(),
        mac: e.mac.clone(),
        description: e.description.clone(),
        subnet_id: e.subnet_id.clone(),
        vpc_id: e.vpc_id.clone(),
        availability_zone: e.az.clone(),
        primary_ip: e.primary_ip,
        secondary_ips: e.secondary_ips.clone(),
        prefixes: e.prefixes.clone(),
        attachment: e.attachment.as_ref().map(|a| EniAttachment {
            attachment_id: a.id.clone(),
            instance_id: Some(a.instance_id.clone()),
            device_index: a.device_index,
            network_card_index: a.network_card,
            status: a.status(now).into(),
            delete_on_termination: a.delete_on_termination,
        }),
        status: e.status().into(),
        security_group_ids: e.groups.clone(),
        interface_type: "interface".into(),
        requester_managed: false,
        tags: e.tags.0.iter().cloned().collect(),
    }
}

fn subnet(s: &model::Subnet) -> Subnet {
    Subnet {
        subnet_id: s.id.clone(),
        vpc_id: s.vpc_id.clone(),
        availability_zone: s.az.clone(),
        cidr_block: s.cidr,
        available_ip_address_count: s.available(),
        tags: s.tags.0.iter().cloned().collect(),
    }
}

impl Ec2Api for FakeCloud {
    fn describe_instance_network_interfaces<'a>(
        &'a self,
        instance_id: &'a str,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(self.call(Action::DescribeNetworkInterfaces, move |m, now| {
            let mut v: Vec<_> = m
                .enis()
                .filter(|e| {
                    e.attachment
                        .as_ref()
                        .is_some_and(|a| a.instance_id == instance_id)
                })
                .map(|e| network_interface(e, now))
                .collect();
            v.sort_by_key(|e| {
                e.attachment
                    .as_ref()
                    .map(|a| (a.network_card_index, a.device_index))
            });
            Ok(v)
        }))
    }

    fn describe_network_interfaces_by_id<'a>(
        &'a self,
        eni_ids: &'a [String],
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(self.call(Action::DescribeNetworkInterfaces, move |m, now| {
            eni_ids
                .iter()
                .map(|id| {
                    m.eni(id)
                        .map(|e| network_interface(e, now))
                        .ok_or_else(|| vpcnet_emu::Ec2Error::eni_not_found(id))
                })
                .collect()
        }))
    }

    fn describe_network_interfaces_by_tag<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        status: Option<&'a str>,
    ) -> Ec2Result<'a, Vec<NetworkInterface>> {
        Box::pin(self.call(Action::DescribeNetworkInterfaces, move |m, now| {
            Ok(m.enis()
                .filter(|e| e.tags.get(key) == Some(value))
                .filter(|e| status.is_none_or(|s| e.status() == s))
                .map(|e| network_interface(e, now))
                .collect())
        }))
    }

    fn describe_subnets<'a>(&'a self, subnet_ids: &'a [String]) -> Ec2Result<'a, Vec<Subnet>> {
        Box::pin(self.call(Action::DescribeSubnets, move |m, _| {
            subnet_ids
                .iter()
                .map(|id| {
                    m.subnet(id)
                        .map(subnet)
                        .ok_or_else(|| vpcnet_emu::Ec2Error::subnet_not_found(id))
                })
                .collect()
        }))
    }

    fn describe_zone_subnets<'a>(
        &'a self,
        vpc_id: &'a str,
        zone: &'a str,
    ) -> Ec2Result<'a, Vec<Subnet>> {
        Box::pin(self.call(Action::DescribeSubnets, move |m, _| {
            Ok(m.subnets()
                .filter(|s| s.vpc_id == vpc_id && s.az == zone)
                .map(subnet)
                .collect())
        }))
    }

    fn describe_instance_types<'a>(
        &'a self,
        types: &'a [String],
    ) -> Ec2Result<'a, Vec<InstanceLimits>> {
        Box::pin(self.call(Action::DescribeInstanceTypes, move |m, _| {
            Ok(types.iter().filter_map(|t| m.instance_limits(t)).collect())
        }))
    }

    fn create_network_interface<'a>(
        &'a self,
        req: &'a CreateEni,
    ) -> Ec2Result<'a, NetworkInterface> {
        Box::pin(self.call(Action::CreateNetworkInterface, move |m, now| {
            let (secondary_count, prefix_count) = match req.addresses {
                Some(AddressRequest::SecondaryIps(n)) => (n, 0),
                Some(AddressRequest::Prefixes(n)) => (0, n),
                None => (0, 0),
            };
            let id = m.create_eni(CreateEniRequest {
                subnet_id: req.subnet_id.clone(),
                description: req.description.clone(),
                groups: req.security_group_ids.clone(),
                tags: req
                    .tags
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                secondary_count,
                prefix_count,
                ..Default::default()
            })?;
            Ok(network_interface(m.eni(&id).expect("created"), now))
        }))
    }

    fn attach_network_interface<'a>(
        &'a self,
        eni_id: &'a str,
        instance_id: &'a str,
        device_index: u32,
        network_card_index: u32,
    ) -> Ec2Result<'a, String> {
        let delay = *self.0.attach_delay.lock().unwrap();
        Box::pin(self.call(Action::AttachNetworkInterface, move |m, now| {
            m.attach_eni(
                eni_id,
                instance_id,
                device_index,
                Some(network_card_index),
                now,
                now + delay,
            )
        }))
    }

    fn set_delete_on_termination<'a>(
        &'a self,
        eni_id: &'a str,
        attachment_id: &'a str,
        delete: bool,
    ) -> Ec2Result<'a, ()> {
        Box::pin(
            self.call(Action::ModifyNetworkInterfaceAttribute, move |m, _| {
                m.modify_eni(
                    eni_id,
                    ModifyEniRequest {
                        delete_on_termination: Some((attachment_id.to_string(), delete)),
                        ..Default::default()
                    },
                )
            }),
        )
    }

    fn detach_network_interface<'a>(
        &'a self,
        attachment_id: &'a str,
        force: bool,
    ) -> Ec2Result<'a, ()> {
        Box::pin(self.call(Action::DetachNetworkInterface, move |m, _| {
            m.detach_eni(attachment_id, force)
        }))
    }

    fn delete_network_interface<'a>(&'a self, eni_id: &'a str) -> Ec2Result<'a, ()> {
        Box::pin(self.call(Action::DeleteNetworkInterface, move |m, _| {
            m.delete_eni(eni_id)
        }))
    }

    fn assign_private_ips<'a>(
        &'a self,
        eni_id: &'a str,
        req: AddressRequest,
    ) -> Ec2Result<'a, Assigned> {
        Box::pin(self.call(Action::AssignPrivateIpAddresses, move |m, _| {
            let r = match req {
                AddressRequest::SecondaryIps(n) => AssignRequest {
                    count: n,
                    ..Default::default()
                },
                AddressRequest::Prefixes(n) => AssignRequest {
                    prefix_count: n,
                    ..Default::default()
                },
            };
            let (ips, prefixes) = m.assign(eni_id, r)?;
            Ok(Assigned { ips, prefixes })
        }))
    }

    fn unassign_private_ips<'a>(
        &'a self,
        eni_id: &'a str,
        release: &'a AddressRelease,
    ) -> Ec2Result<'a, ()> {
        Box::pin(self.call(
            Action::UnassignPrivateIpAddresses,
            move |m, _| match release {
                AddressRelease::SecondaryIps(ips) => m.unassign(eni_id, ips, &[]),
                AddressRelease::Prefixes(p) => m.unassign(eni_id, &[], p),
            },
        ))
    }

    fn create_tags<'a>(&'a self, resource_ids: &'a [String], tags: &'a Tags) -> Ec2Result<'a, ()> {
        Box::pin(self.call(Action::CreateTags, move |m, _| {
            let tags: Vec<_> = tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            m.create_tags(resource_ids, &tags)
        }))
    }
}

impl FakeCloud {
    fn imds<T>(
        &self,
        path: &str,
        f: impl FnOnce(&model::Cloud, &model::Instance) -> Option<T>,
    ) -> Result<T, ImdsError> {
        let m = self.0.model.lock().unwrap();
        m.instance(&self.0.instance_id)
            .and_then(|i| f(&m, i))
            .ok_or_else(|| ImdsError::NotFound {
                path: path.to_string(),
            })
    }
}

impl MetadataApi for FakeCloud {
    fn instance_id(&self) -> ImdsResult<'_, String> {
        let r = self.imds("instance-id", |_, i| Some(i.id.clone()));
        Box::pin(async move { r })
    }
    fn instance_type(&self) -> ImdsResult<'_, String> {
        let r = self.imds("instance-type", |_, i| Some(i.instance_type.clone()));
        Box::pin(async move { r })
    }
    fn mac(&self) -> ImdsResult<'_, String> {
        let r = self.imds("mac", |m, i| m.eni(&i.primary_eni).map(|e| e.mac.clone()));
        Box::pin(async move { r })
    }
    fn region(&self) -> ImdsResult<'_, String> {
        let r = Ok(self.0.region.clone());
        Box::pin(async move { r })
    }
    fn availability_zone(&self) -> ImdsResult<'_, String> {
        let r = self.imds("placement/availability-zone", |_, i| Some(i.az.clone()));
        Box::pin(async move { r })
    }
    fn local_ipv4(&self) -> ImdsResult<'_, Ipv4Addr> {
        let r = self.imds("local-ipv4", |_, i| Some(i.private_ip));
        Box::pin(async move { r })
    }
    fn interface<'a>(&'a self, mac: &'a str) -> ImdsResult<'a, ImdsInterface> {
        let path = format!("network/interfaces/macs/{mac}/");
        let r = self.imds(&path, |m, i| {
            let e = m.enis().find(|e| e.mac == mac)?;
            imds_interface(m, i, e)
        });
        Box::pin(async move { r })
    }
    fn interfaces(&self) -> ImdsResult<'_, Vec<ImdsInterface>> {
        self.0
            .imds_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = self.imds("network/interfaces/macs/", |m, i| {
            let mut all: Vec<ImdsInterface> =
                m.enis().filter_map(|e| imds_interface(m, i, e)).collect();
            all.sort_by_key(|i| (i.network_card, i.device_number));
            Some(all)
        });
        Box::pin(async move { r })
    }
}

/// ENI `e` as IMDS of instance `i` lists it; `None` unless it is attached to `i`.
fn imds_interface(m: &model::Cloud, i: &model::Instance, e: &model::Eni) -> Option<ImdsInterface> {
    let a = e.attachment.as_ref().filter(|a| a.instance_id == i.id)?;
    let s = m.subnet(&e.subnet_id)?;
    let vpc = m.vpc(&e.vpc_id)?;
    Some(ImdsInterface {
        mac: e.mac.clone(),
        device_number: a.device_index,
        network_card: a.network_card,
        interface_id: e.id.clone(),
        subnet_id: e.subnet_id.clone(),
        subnet_cidr: s.cidr,
        vpc_id: e.vpc_id.clone(),
        vpc_cidrs: vpc.cidrs.iter().map(|(_, c)| *c).collect(),
        security_group_ids: e.groups.clone(),
        local_ipv4s: std::iter::once(e.primary_ip)
            .chain(e.secondary_ips.iter().copied())
            .collect(),
        ipv4_prefixes: e.prefixes.clone(),
    })
}

/// Options for an agent with its files in `dir`: no TCP listeners, no conflist (its cloud, a
/// fake, is in [`fake_deps`]).
pub fn fake_options(dir: &std::path::Path) -> vpcnet_agent::AgentOptions {
    vpcnet_agent::AgentOptions {
        socket_path: dir.join("agent.sock"),
        checkpoint_path: dir.join("ipam.json"),
        introspection_addr: None,
        metrics_addr: None,
        conflist_path: None,
        cluster_name: "lab".into(),
        reconcile_interval: Duration::from_secs(2),
        ..vpcnet_agent::AgentOptions::default()
    }
}

/// Dependencies of an agent on `fake`'s instance: the fake as its cloud.
pub fn fake_deps(fake: &FakeCloud) -> vpcnet_agent::AgentDeps {
    vpcnet_agent::AgentDeps::default().with_cloud(fake.apis())
}
