//! The lab's load-balancer data plane: the emulator's [`LoadBalancerPlane`], run by the cloud
//! daemon. Each ELBv2 load balancer gets
//!
//! - a network namespace on the VPC fabric, `<prefix>-lb<N>`, recorded in the lab state before
//!   it is created; its ELB ENIs appear there as `eth<i>` with their MACs and addresses,
//!   plugged into the subnet bridges and routed (and source/destination checked) like any ENI;
//! - an HAProxy (master-worker) inside that namespace, recorded in the lab state, serving the
//!   listeners on the ENI addresses ([`crate::haproxy`] renders its configuration).
//!
//! Targets are added, drained and removed through HAProxy's runtime API, never by restarting
//! it: a new target starts down and becomes healthy after `HealthyThresholdCount` passing
//! checks; a deregistered one is set to `drain` (existing connections continue, no new ones);
//! when its delay ends it is set to `maint` and deleted once its connections are gone (at once,
//! with `shutdown sessions`, when `deregistration_delay.connection_termination.enabled`).
//! Listener, target-group and health-check changes rewrite the configuration and reload
//! HAProxy through its master CLI, carrying server states over in its state file.
//!
//! A poller reads `show stat` of every HAProxy every [`POLL`] and keeps what the checks report
//! per target; [`LoadBalancerPlane::observe`] answers DescribeTargetHealth from it. `lab down`
//! (and any failure) removes the namespaces and processes through the lab state record.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ipnet::Ipv4Net;
use vpcnet_emu::elbv2::{LbSpec, LoadBalancerPlane, Observation, PlaneFuture};

use crate::fabric::{self, EniPort};
use crate::haproxy::{self, Files, Present};
use crate::procs::{self, ProcRecord};
use crate::spawn::Place;
use crate::wait::log_tail;
use crate::{cmd, netns, state};

/// How often the poller reads HAProxy's check states.
pub const POLL: Duration = Duration::from_millis(250);
/// How long HAProxy may take to start or reload.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A server of one HAProxy: backend, target address and port.
type ServerKey = (String, Ipv4Addr, u16);

#[derive(Debug, Clone)]
struct Server {
    /// The target group's ARN.
    tg: String,
    draining: bool,
    /// Deregistered and in `maint`, waiting for its connections to end before `del server`.
    removing: bool,
}

/// One load balancer's running data plane.
struct Lb {
    name: String,
    netns: String,
    files: Files,
    proc: ProcRecord,
    /// ELB ENIs plugged into the fabric: (bridge, ENI ID, address).
    ports: Vec<(String, String, Ipv4Addr)>,
    config: String,
    servers: BTreeMap<ServerKey, Server>,
}

struct Shared {
    lab_dir: PathBuf,
    vpc: String,
    prefix: String,
    subnets: Vec<Ipv4Net>,
    lbs: Mutex<BTreeMap<String, Lb>>,
    next_index: Mutex<usize>,
    /// What the checks report, by (target group ARN, address, port).
    observed: Mutex<HashMap<(String, Ipv4Addr, u16), Observation>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lab's [`LoadBalancerPlane`] (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct HaproxyPlane {
    shared: Arc<Shared>,
}

impl HaproxyPlane {
    /// The plane of the lab in `lab_dir` whose fabric is namespace `vpc_netns`
    /// (`<prefix>-vpc`) with `subnets` (bridge `br<i>` for subnet `i`). Starts the poller.
    pub fn new(lab_dir: &Path, vpc_netns: &str, subnets: Vec<Ipv4Net>) -> Self {
        let shared = Arc::new(Shared {
            lab_dir: lab_dir.to_path_buf(),
            vpc: vpc_netns.to_string(),
            prefix: vpc_netns
                .strip_suffix("-vpc")
                .unwrap_or(vpc_netns)
                .to_string(),
            subnets,
            lbs: Mutex::new(BTreeMap::new()),
            next_index: Mutex::new(1),
            observed: Mutex::new(HashMap::new()),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::spawn(move || poll_loop(weak));
        HaproxyPlane { shared }
    }
}

fn poll_loop(shared: Weak<Shared>) {
    while let Some(s) = shared.upgrade() {
        poll_once(&s);
        drop(s);
        std::thread::sleep(POLL);
    }
}

/// Read every HAProxy's server states into `observed`; delete drained servers whose
/// connections have ended.
fn poll_once(s: &Shared) {
    let snapshot: Vec<(String, PathBuf, BTreeMap<ServerKey, Server>)> = lock(&s.lbs)
        .iter()
        .map(|(arn, lb)| (arn.clone(), lb.files.admin_socket(), lb.servers.clone()))
        .collect();
    for (arn, socket, servers) in snapshot {
        let Ok(csv) = haproxy::command(&socket, "show stat -1 4 -1") else {
            continue;
        };
        let mut gone = Vec::new();
        {
            let mut observed = lock(&s.observed);
            for row in haproxy::parse_stat(&csv) {
                let Some((ip, port)) = haproxy::parse_server_name(&row.server) else {
                    continue;
                };
                let key = (row.backend.clone(), ip, port);
                let Some(server) = servers.get(&key) else {
                    continue;
                };
                if server.removing {
                    if row.sessions == 0 {
                        gone.push(key);
                    }
                    continue;
                }
                let entry = observed
                    .entry((server.tg.clone(), ip, port))
                    .or_insert(Observation {
                        up: false,
                        ever_up: false,
                        last_failure: None,
                        checked: false,
                    });
                entry.up = row.up();
                entry.ever_up |= entry.up;
                entry.checked |= row.checked();
                entry.last_failure = row.failure();
            }
        }
        for key in gone {
            let name = format!("{}/{}", key.0, haproxy::server_name(key.1, key.2));
            if haproxy::checked(&socket, &format!("del server {name}")).is_ok() {
                if let Some(lb) = lock(&s.lbs).get_mut(&arn) {
                    lb.servers.remove(&key);
                }
            }
        }
    }
}

impl Shared {
    fn log_path(&self, name: &str) -> PathBuf {
        self.lab_dir
            .join("logs")
            .join(format!("haproxy-{name}.log"))
    }

    /// Build the namespace, plug the ENIs, start HAProxy with `config`; on failure, undo.
    fn create(&self, spec: &LbSpec, config_for: impl Fn(&Files) -> Result<String>) -> Result<Lb> {
        let index = {
            let mut n = lock(&self.next_index);
            *n += 1;
            *n - 1
        };
        let ns = format!("{}-lb{index}", self.prefix);
        state::update(&self.lab_dir, |s| {
            s.namespaces.push(ns.clone());
            Ok(())
        })?;
        let files = Files {
            dir: self.lab_dir.join("lb").join(&spec.name),
        };
        let mut lb = Lb {
            name: spec.name.clone(),
            netns: ns.clone(),
            files,
            proc: ProcRecord {
                role: format!("haproxy {}", spec.name),
                pid: 0,
                start_time: 0,
            },
            ports: Vec::new(),
            config: String::new(),
            servers: BTreeMap::new(),
        };
        let built = self.build(spec, &mut lb, &config_for);
        if let Err(e) = built {
            self.destroy(&lb);
            return Err(e);
        }
        Ok(lb)
    }

    fn build(
        &self,
        spec: &LbSpec,
        lb: &mut Lb,
        config_for: &impl Fn(&Files) -> Result<String>,
    ) -> Result<()> {
        netns::create(&lb.netns)?;
        for (i, a) in spec.addresses.iter().enumerate() {
            let bridge = fabric::subnet_index(&self.subnets, a.subnet_cidr)
                .map(fabric::bridge_name)
                .with_context(|| format!("subnet {} is not on the lab fabric", a.subnet_cidr))?;
            let port = EniPort {
                eni_id: a.eni_id.clone(),
                mac: a.mac.clone(),
                bridge: bridge.clone(),
                node_netns: lb.netns.clone(),
                device_index: i as u32,
                network_card: 0,
            };
            lb.ports.push((bridge.clone(), a.eni_id.clone(), a.ip));
            fabric::plug(&self.vpc, &port)?;
            if i == 0 {
                fabric::configure_primary(&lb.netns, a.ip, a.subnet_cidr)?;
            } else {
                let link = fabric::node_link_name(i as u32);
                let addr = format!("{}/{}", a.ip, a.subnet_cidr.prefix_len());
                cmd::ip_in(&lb.netns, &["addr", "replace", &addr, "dev", &link])?;
                cmd::ip_in(&lb.netns, &["link", "set", &link, "up"])?;
            }
            let host = Ipv4Net::new(a.ip, 32).expect("/32");
            fabric::route(
                &self.vpc,
                &bridge,
                &fabric::port_name(&a.eni_id),
                &[host],
                &a.mac,
            )?;
        }
        std::fs::create_dir_all(&lb.files.dir)?;
        lb.config = config_for(&lb.files)?;
        std::fs::write(lb.files.config(), &lb.config)?;
        let mut c = Command::new("haproxy");
        c.arg("-W")
            .arg("-S")
            .arg(lb.files.master_socket())
            .arg("-f")
            .arg(lb.files.config());
        let log = self.log_path(&lb.name);
        lb.proc = procs::spawn(&lb.proc.role, c, &Place::netns(&lb.netns), &log)
            .context("starting haproxy (Debian package haproxy: run scripts/install-deps.sh)")?;
        state::update(&self.lab_dir, |s| {
            s.processes.push(lb.proc.clone());
            Ok(())
        })?;
        let t0 = Instant::now();
        while haproxy::worker_pid(&lb.files.admin_socket()).is_err() {
            if !lb.proc.alive() {
                bail!("haproxy for {} exited:\n{}", lb.name, log_tail(&log));
            }
            if t0.elapsed() > READY_TIMEOUT {
                bail!(
                    "haproxy for {} did not answer within {READY_TIMEOUT:?}",
                    lb.name
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stop HAProxy, unplug the ENIs, delete the namespace and the directory, and drop all of
    /// it from the lab state record. Best effort, idempotent.
    fn destroy(&self, lb: &Lb) {
        if lb.proc.pid > 0 {
            lb.proc.stop(Duration::from_secs(5));
        }
        for (bridge, eni, ip) in &lb.ports {
            let host = Ipv4Net::new(*ip, 32).expect("/32");
            fabric::unroute(&self.vpc, bridge, &fabric::port_name(eni), &[host]);
            fabric::unplug(&self.vpc, eni);
        }
        for pid in netns::pids_in(&lb.netns) {
            procs::kill_pid(pid);
        }
        let deleted = netns::delete(&lb.netns).is_ok();
        let _ = std::fs::remove_dir_all(&lb.files.dir);
        let _ = state::update(&self.lab_dir, |s| {
            s.processes.retain(|p| *p != lb.proc);
            if deleted {
                s.namespaces.retain(|n| *n != lb.netns);
            }
            Ok(())
        });
    }

    /// Rewrite the configuration and reload HAProxy, keeping server states.
    fn reload(&self, lb: &mut Lb, config: String) -> Result<()> {
        let admin = lb.files.admin_socket();
        let old = haproxy::worker_pid(&admin)?;
        let states = haproxy::command(&admin, "show servers state")?;
        std::fs::write(lb.files.state_file(), states)?;
        std::fs::write(lb.files.config(), &config)?;
        haproxy::reload(&lb.files.master_socket(), READY_TIMEOUT)?;
        let t0 = Instant::now();
        loop {
            if haproxy::worker_pid(&admin).is_ok_and(|p| p != old) {
                break;
            }
            if t0.elapsed() > READY_TIMEOUT {
                bail!(
                    "haproxy for {} did not reload within {READY_TIMEOUT:?}:\n{}",
                    lb.name,
                    log_tail(&self.log_path(&lb.name))
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        lb.config = config;
        Ok(())
    }

    /// Bring `arn`'s HAProxy to `spec`: start it, reload on configuration changes, then add,
    /// drain, resume and remove servers through the runtime API.
    fn apply(&self, spec: &LbSpec) -> Result<()> {
        let mut lbs = lock(&self.lbs);
        if !lbs.contains_key(&spec.arn) {
            let lb = self.create(spec, |files| haproxy::render(spec, files, &BTreeMap::new()))?;
            lbs.insert(spec.arn.clone(), lb);
        }
        let lb = lbs.get_mut(&spec.arn).expect("just made");
        // Desired servers: (backend, ip, port) → (target group, draining, terminate on removal).
        let mut desired: BTreeMap<ServerKey, (&str, bool)> = BTreeMap::new();
        for tg in &spec.target_groups {
            let be = haproxy::backend_name(tg);
            for t in &tg.targets {
                desired.insert((be.clone(), t.ip, t.port), (tg.arn.as_str(), t.draining));
            }
        }
        // Servers of backends that no longer exist go with the reload.
        let backends: Vec<String> = spec
            .target_groups
            .iter()
            .map(haproxy::backend_name)
            .collect();
        lb.servers.retain(|k, _| backends.contains(&k.0));
        let mut present: BTreeMap<String, Vec<Present>> = BTreeMap::new();
        for ((be, ip, port), s) in &lb.servers {
            if !s.removing {
                present.entry(be.clone()).or_default().push(Present {
                    ip: *ip,
                    port: *port,
                });
            }
        }
        let config = haproxy::render(spec, &lb.files, &present)?;
        if config != lb.config {
            lb.servers.retain(|_, s| !s.removing);
            self.reload(lb, config)?;
        }
        let admin = lb.files.admin_socket();
        let name = |k: &ServerKey| format!("{}/{}", k.0, haproxy::server_name(k.1, k.2));
        for (key, (tg_arn, draining)) in &desired {
            let tg = spec
                .target_groups
                .iter()
                .find(|t| t.arn == *tg_arn)
                .expect("desired comes from the spec");
            match lb.servers.get_mut(key) {
                None => {
                    let t = tg
                        .targets
                        .iter()
                        .find(|t| t.ip == key.1 && t.port == key.2)
                        .expect("desired comes from the spec");
                    for c in haproxy::add_server_command(&key.0, tg, t) {
                        haproxy::checked(&admin, &c)?;
                    }
                    lock(&self.observed).remove(&(tg.arn.clone(), key.1, key.2));
                    lb.servers.insert(
                        key.clone(),
                        Server {
                            tg: tg.arn.clone(),
                            draining: false,
                            removing: false,
                        },
                    );
                    if *draining {
                        haproxy::checked(&admin, &format!("set server {} state drain", name(key)))?;
                        lb.servers.get_mut(key).expect("inserted").draining = true;
                    }
                }
                Some(s) if s.removing || s.draining != *draining => {
                    let n = name(key);
                    let cmd = if *draining {
                        format!("set server {n} state drain")
                    } else {
                        // registered again: checks start over, as ELBv2's initial
                        lock(&self.observed).remove(&(tg.arn.clone(), key.1, key.2));
                        format!("set server {n} state ready; set server {n} health down")
                    };
                    haproxy::checked(&admin, &cmd)?;
                    s.draining = *draining;
                    s.removing = false;
                }
                Some(_) => {}
            }
        }
        let leaving: Vec<ServerKey> = lb
            .servers
            .iter()
            .filter(|(k, s)| !desired.contains_key(*k) && !s.removing)
            .map(|(k, _)| k.clone())
            .collect();
        for key in leaving {
            let terminate = spec
                .target_groups
                .iter()
                .find(|t| haproxy::backend_name(t) == key.0)
                .is_some_and(|t| t.terminate_on_removal);
            let n = name(&key);
            haproxy::checked(&admin, &format!("set server {n} state maint"))?;
            let tg = lb.servers[&key].tg.clone();
            lock(&self.observed).remove(&(tg, key.1, key.2));
            if terminate {
                haproxy::checked(&admin, &format!("shutdown sessions server {n}"))?;
            }
            // Deleted now when it has no connection left, else by the poller once they end.
            if haproxy::checked(&admin, &format!("del server {n}")).is_ok() {
                lb.servers.remove(&key);
            } else if let Some(s) = lb.servers.get_mut(&key) {
                s.removing = true;
            }
        }
        Ok(())
    }

    fn remove(&self, arn: &str) {
        let Some(lb) = lock(&self.lbs).remove(arn) else {
            return;
        };
        self.destroy(&lb);
        let tgs: Vec<String> = lb.servers.values().map(|s| s.tg.clone()).collect();
        lock(&self.observed).retain(|(tg, _, _), _| !tgs.contains(tg));
    }
}

/// Runs blocking plane work off the async workers; errors become the load balancer's state.
fn blocking(f: impl FnOnce() -> Result<()> + Send + 'static) -> PlaneFuture<'static> {
    Box::pin(async move {
        match tokio::task::spawn_blocking(f).await {
            Ok(r) => r.map_err(|e| format!("{e:#}")),
            Err(e) => Err(format!("data plane task failed: {e}")),
        }
    })
}

impl LoadBalancerPlane for HaproxyPlane {
    fn apply(&self, spec: LbSpec) -> PlaneFuture<'_> {
        let s = self.shared.clone();
        blocking(move || s.apply(&spec))
    }

    fn remove(&self, lb_arn: String) -> PlaneFuture<'_> {
        let s = self.shared.clone();
        blocking(move || {
            s.remove(&lb_arn);
            Ok(())
        })
    }

    fn observe(&self, tg_arn: &str, ip: Ipv4Addr, port: u16) -> Option<Observation> {
        lock(&self.shared.observed)
            .get(&(tg_arn.to_string(), ip, port))
            .cloned()
    }
}
