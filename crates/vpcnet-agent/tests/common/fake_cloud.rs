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
use vpcnet_agent::cloud::CloudApis;
use vpcnet_ec2::{Action, Ec2Error};
use vpcnet_emu::model;

mod ec2;
mod imds;

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
    /// The EC2 error codes the model answered, in order (calls that reached it and were
    /// refused, e.g. `InsufficientCidrBlocks`).
    refused: Mutex<Vec<(Action, String)>>,
    /// IMDS's delay behind EC2 (`None`: IMDS shows the model as it is).
    imds_lag: Mutex<Option<Duration>>,
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
            imds_lag: Mutex::new(None),
            refused: Mutex::new(Vec::new()),
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

    /// Drops the outcomes still queued for `action` (its calls succeed again, unless rates say
    /// otherwise).
    pub fn unscript(&self, action: Action) {
        self.0.script.lock().unwrap().remove(&action);
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

    /// IMDS shows each change of the instance's network `lag` after EC2 made it (the
    /// emulator's eventual consistency, `vpcnet_emu::model::Cloud::refresh_imds`).
    pub fn set_imds_lag(&self, lag: Duration) {
        *self.0.imds_lag.lock().unwrap() = Some(lag);
        self.with_model(|m| m.refresh_imds(now(), &|_| lag));
    }

    /// What IMDS shows of the instance's network now when it lags (`None` without a lag).
    fn lagged_imds(&self) -> Option<Arc<model::ImdsNetwork>> {
        let lag = (*self.0.imds_lag.lock().unwrap())?;
        let mut m = self.0.model.lock().unwrap();
        // Attachments complete with time, not with a call: recorded as they are seen.
        m.refresh_imds(now(), &|_| lag);
        m.imds_network(&self.0.instance_id, now())
    }

    /// How many calls the model refused with the EC2 error `code` so far.
    pub fn refusals(&self, code: &str) -> usize {
        let refused = self.0.refused.lock().unwrap();
        refused.iter().filter(|(_, c)| c == code).count()
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

    /// The ENIs attached to the instance, as EC2 has them.
    pub fn attached_enis(&self) -> Vec<model::Eni> {
        self.with_model(|m| {
            m.enis()
                .filter(|e| {
                    e.attachment
                        .as_ref()
                        .is_some_and(|a| a.instance_id == self.0.instance_id)
                })
                .cloned()
                .collect()
        })
    }

    /// ENIs attached to the instance: id → secondary IPs.
    pub fn ec2_enis(&self) -> BTreeMap<String, BTreeSet<Ipv4Addr>> {
        self.attached_enis()
            .into_iter()
            .map(|e| (e.id, e.secondary_ips.into_iter().collect()))
            .collect()
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
        if let Some(lag) = *self.0.imds_lag.lock().unwrap() {
            m.refresh_imds(now(), &|_| lag);
        }
        r.map_err(|e| {
            self.0
                .refused
                .lock()
                .unwrap()
                .push((action, e.code.to_string()));
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
