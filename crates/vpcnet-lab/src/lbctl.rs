//! Operating the lab's load balancers as an operator would, through the ELBv2 API
//! (vpcnet-elbv2 over aws-sdk-elasticloadbalancingv2) from inside the VPC namespace: a load
//! balancer + target group (type `ip`) + listener in one step, target registration by container
//! name or address, target health, deletion, and load through a load balancer from a node.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use vpcnet_elbv2::{
    CallSettings, Elbv2, Elbv2Options, HealthCheck, Listener, LoadBalancer, LoadBalancerType,
    NewLoadBalancer, NewTargetGroup, StaticCredentials, Target, TargetGroup, TargetHealth,
    TargetType,
};

use crate::daemon::{self, Ready};
use crate::lab::Lab;
use crate::load::{self, LoadOptions, LoadReport};

/// What [`LoadBalancers::create_lb`] builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbSettings {
    /// Name of the load balancer and of its target group.
    pub name: String,
    pub lb_type: LoadBalancerType,
    /// Listener port (TCP for network, HTTP for application load balancers).
    pub port: u16,
    /// Port targets receive traffic on (the target group's port).
    pub target_port: u16,
    /// Health check; None fields take ELBv2's defaults.
    pub health: HealthCheck,
    /// `deregistration_delay.timeout_seconds` (ELBv2's default 300 when None).
    pub deregistration_delay: Option<u32>,
}

/// A lab load balancer with its listener and target group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabLb {
    pub lb: LoadBalancer,
    pub listener: Listener,
    pub target_group: TargetGroup,
    /// Where the load balancer listens (its ENI in the lab subnet).
    pub address: Ipv4Addr,
}

impl LabLb {
    /// `address:listener port`.
    pub fn endpoint(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.address, self.listener.port)
    }
}

/// The lab's load balancers ([`Lab::lbs`]).
#[derive(Debug, Clone, Copy)]
pub struct LoadBalancers<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// The lab's load balancers (ELBv2 through the lab cloud, run by HAProxy).
    pub fn lbs(&self) -> LoadBalancers<'_> {
        LoadBalancers { lab: self }
    }
}

impl LoadBalancers<'_> {
    pub(crate) fn ready(&self) -> Result<Ready> {
        let p = daemon::ready_path(&self.lab.dir);
        serde_json::from_slice(
            &std::fs::read(&p)
                .with_context(|| format!("{} missing: is the lab cloud running?", p.display()))?,
        )
        .context("parsing the lab cloud's ready.json")
    }

    /// Runs `f` with an ELBv2 client of the lab cloud, on a thread inside the VPC namespace
    /// (the endpoint is only reachable there).
    pub fn elbv2<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Elbv2) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>>,
    {
        let s = self.lab.state()?;
        let vpc = s
            .namespaces
            .first()
            .cloned()
            .context("the lab has no VPC namespace")?;
        let endpoint = s
            .ec2_endpoint
            .context("the lab has no cloud endpoint yet")?;
        crate::spawn::in_netns_async(&vpc, move || async move {
            let client = Elbv2::connect(Elbv2Options {
                region: Some(daemon::REGION.into()),
                endpoint_url: Some(endpoint),
                credentials: Some(StaticCredentials {
                    access_key_id: "AKIDVPCNETLAB".into(),
                    secret_access_key: "vpcnet-lab".into(),
                    session_token: None,
                }),
                calls: CallSettings {
                    operation_timeout: Duration::from_secs(60),
                    ..CallSettings::default()
                },
            })
            .await?;
            f(client).await
        })
    }

    /// The subnets of the lab's worker nodes (not the control plane's), where load balancers
    /// go.
    fn node_subnets(&self) -> Result<Vec<String>> {
        let ready = self.ready()?;
        let spec: daemon::DaemonSpec = serde_json::from_slice(
            &std::fs::read(daemon::spec_path(&self.lab.dir))
                .context("reading the lab's spec.json")?,
        )?;
        let mut out: Vec<String> = Vec::new();
        for n in spec
            .nodes
            .iter()
            .filter(|n| n.name != crate::lab::CONTROL_PLANE_NAME)
        {
            if let Some(id) = ready.subnet_ids.get(n.subnet) {
                if !out.contains(id) {
                    out.push(id.clone());
                }
            }
        }
        Ok(out)
    }

    /// Creates an internal load balancer in the nodes' subnet, a target group of type `ip` in
    /// the lab VPC and a listener forwarding to it. Errors: ELBv2's (name taken, bad health
    /// settings); an application load balancer needs two zones, and the lab's nodes have one
    /// subnet.
    pub fn create_lb(&self, s: &LbSettings) -> Result<LabLb> {
        self.check_zones(s)?;
        let tg = self.create_target_group(s)?;
        self.create_lb_for(s, &tg.arn)
    }

    /// The target group of [`Self::create_lb`] alone (type `ip`, `s`'s port, health check and
    /// deregistration delay), used by no load balancer: its targets are `unused` /
    /// `Target.NotInUse` until [`Self::create_lb_for`] puts one in front of it.
    pub fn create_target_group(&self, s: &LbSettings) -> Result<TargetGroup> {
        let ready = self.ready()?;
        let s = s.clone();
        self.elbv2(move |elb| async move {
            let mut health = s.health.clone();
            health
                .protocol
                .get_or_insert_with(|| protocol_of(s.lb_type).into());
            let tg = elb
                .create_target_group(&NewTargetGroup {
                    name: s.name.clone(),
                    protocol: protocol_of(s.lb_type).into(),
                    port: s.target_port,
                    vpc_id: ready.vpc_id.clone(),
                    target_type: TargetType::Ip,
                    health,
                    tags: vec![],
                })
                .await?;
            if let Some(d) = s.deregistration_delay {
                elb.modify_target_group_attributes(
                    &tg.arn,
                    &[("deregistration_delay.timeout_seconds", &d.to_string())],
                )
                .await?;
            }
            Ok(tg)
        })
    }

    /// An internal load balancer named `s.name` in the nodes' subnet with a listener on
    /// `s.port` forwarding to the existing target group `tg_arn`.
    pub fn create_lb_for(&self, s: &LbSettings, tg_arn: &str) -> Result<LabLb> {
        self.check_zones(s)?;
        let subnets = self.node_subnets()?;
        let s = s.clone();
        let tg_arn = tg_arn.to_string();
        self.elbv2(move |elb| async move {
            let lb = elb
                .create_load_balancer(&NewLoadBalancer {
                    name: s.name.clone(),
                    lb_type: s.lb_type,
                    internal: true,
                    subnets,
                    security_groups: vec![],
                    tags: vec![("created-by".into(), "vpcnet lab lb".into())],
                })
                .await?;
            let listener = elb
                .create_listener(&lb.arn, protocol_of(s.lb_type), s.port, &tg_arn)
                .await?;
            let tg = elb.target_group(&tg_arn).await?;
            let lb = described(&elb, &s.name).await?;
            lab_lb(lb, listener, tg)
        })
    }

    fn check_zones(&self, s: &LbSettings) -> Result<()> {
        let subnets = self.node_subnets()?;
        if s.lb_type == LoadBalancerType::Application && subnets.len() < 2 {
            bail!(
                "an application load balancer needs subnets in two zones and this lab's nodes have {}: use --type network",
                subnets.len()
            );
        }
        Ok(())
    }

    /// Every load balancer of the lab with its first listener and that listener's target
    /// group.
    pub fn list(&self) -> Result<Vec<LabLb>> {
        self.elbv2(|elb| async move {
            let mut out = Vec::new();
            for lb in elb.load_balancers(&[]).await? {
                out.push(complete(&elb, lb).await?);
            }
            Ok(out)
        })
    }

    /// The load balancer named `name`. Error: no such load balancer (ELBv2's
    /// `LoadBalancerNotFound`).
    pub fn get(&self, name: &str) -> Result<LabLb> {
        let name = name.to_string();
        self.elbv2(move |elb| async move {
            let lb = described(&elb, &name).await?;
            complete(&elb, lb).await
        })
    }

    /// A target from `spec`: a container name or an IPv4 address, with an optional `:port`
    /// (else the target group's).
    pub fn target(&self, spec: &str) -> Result<Target> {
        let (what, port) = match spec.rsplit_once(':') {
            Some((w, p)) => (
                w,
                Some(
                    p.parse::<u16>()
                        .with_context(|| format!("target {spec:?}: {p:?} is not a port number"))?,
                ),
            ),
            None => (spec, None),
        };
        let ip = match what.parse::<Ipv4Addr>() {
            Ok(ip) => ip,
            Err(_) => self
                .lab
                .containers()
                .list()?
                .into_iter()
                .find(|c| c.id == what)
                .map(|c| c.ip)
                .with_context(|| {
                    format!("target {what:?} is neither a running container nor an IPv4 address")
                })?,
        };
        Ok(Target {
            id: ip.to_string(),
            port,
            availability_zone: None,
        })
    }

    /// Registers `targets` (see [`Self::target`]) with load balancer `name`'s target group.
    pub fn register(&self, name: &str, targets: &[String]) -> Result<()> {
        self.change_targets(name, targets, true)
    }

    /// Deregisters `targets`: they drain for the target group's deregistration delay.
    pub fn deregister(&self, name: &str, targets: &[String]) -> Result<()> {
        self.change_targets(name, targets, false)
    }

    fn change_targets(&self, name: &str, targets: &[String], register: bool) -> Result<()> {
        if targets.is_empty() {
            bail!("name at least one target (a container or an IPv4 address)");
        }
        let ts = targets
            .iter()
            .map(|t| self.target(t))
            .collect::<Result<Vec<_>>>()?;
        let tg = self.get(name)?.target_group.arn;
        self.elbv2(move |elb| async move {
            if register {
                elb.register_targets(&tg, &ts).await?;
            } else {
                elb.deregister_targets(&tg, &ts).await?;
            }
            Ok(())
        })
    }

    /// DescribeTargetHealth of load balancer `name`'s target group.
    pub fn target_health(&self, name: &str) -> Result<Vec<TargetHealth>> {
        let tg = self.get(name)?.target_group.arn;
        self.elbv2(move |elb| async move { Ok(elb.target_health(&tg, &[]).await?) })
    }

    /// Deletes load balancer `name`, then its target group.
    pub fn delete(&self, name: &str) -> Result<()> {
        let l = self.get(name)?;
        self.elbv2(move |elb| async move {
            elb.delete_load_balancer(&l.lb.arn).await?;
            elb.delete_target_group(&l.target_group.arn).await?;
            Ok(())
        })
    }

    /// Sends load through load balancer `name` from node `from`'s namespace (see
    /// [`crate::load`]).
    pub fn load(
        &self,
        name: &str,
        from: &str,
        path: &str,
        connections: usize,
        duration: Duration,
    ) -> Result<LoadReport> {
        self.load_with_stop(name, from, path, connections, duration, None)
    }

    /// [`Self::load`] that ends early once `stop` is set (at most `duration`).
    pub fn load_until(
        &self,
        name: &str,
        from: &str,
        path: &str,
        connections: usize,
        duration: Duration,
        stop: Arc<AtomicBool>,
    ) -> Result<LoadReport> {
        self.load_with_stop(name, from, path, connections, duration, Some(stop))
    }

    fn load_with_stop(
        &self,
        name: &str,
        from: &str,
        path: &str,
        connections: usize,
        duration: Duration,
        stop: Option<Arc<AtomicBool>>,
    ) -> Result<LoadReport> {
        let l = self.get(name)?;
        let netns = self.lab.state()?.node(from)?.netns.clone();
        load::run_in_netns(
            &netns,
            LoadOptions {
                target: l.endpoint(),
                path: path.to_string(),
                connections,
                duration,
                timeout: Duration::from_secs(5),
                stop,
            },
        )
    }
}

/// Listener and health-check protocol of a load balancer type.
fn protocol_of(t: LoadBalancerType) -> &'static str {
    match t {
        LoadBalancerType::Network => "TCP",
        LoadBalancerType::Application => "HTTP",
    }
}

async fn described(elb: &Elbv2, name: &str) -> Result<LoadBalancer> {
    elb.load_balancers(&[name.to_string()])
        .await?
        .into_iter()
        .next()
        .with_context(|| format!("no load balancer named {name:?}"))
}

async fn complete(elb: &Elbv2, lb: LoadBalancer) -> Result<LabLb> {
    let listener = elb
        .listeners(&lb.arn)
        .await?
        .into_iter()
        .next()
        .with_context(|| format!("load balancer {} has no listener", lb.name))?;
    let tg_arn = listener
        .target_group_arn
        .clone()
        .with_context(|| format!("the listener of {} forwards nowhere", lb.name))?;
    let tg = elb
        .target_groups(Some(&lb.arn), &[])
        .await?
        .into_iter()
        .find(|t| t.arn == tg_arn)
        .with_context(|| format!("target group {tg_arn} not found"))?;
    lab_lb(lb, listener, tg)
}

fn lab_lb(lb: LoadBalancer, listener: Listener, target_group: TargetGroup) -> Result<LabLb> {
    let address = lb
        .zones
        .iter()
        .find_map(|z| z.private_ip)
        .with_context(|| format!("load balancer {} reports no address", lb.name))?;
    Ok(LabLb {
        lb,
        listener,
        target_group,
        address,
    })
}
