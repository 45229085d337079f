//! `vpcnet lab lb ...`: the lab's load balancers (ELBv2 on the lab cloud, HAProxy in the
//! lab's namespaces) by hand — create, list, register, deregister, health, load, delete. The
//! work is in `vpcnet_lab::lbctl`; this module is the command line and the tables.

use std::time::Duration;

use anyhow::Result;
use clap::{Args as ClapArgs, Subcommand, ValueEnum};
use vpcnet_elbv2::{HealthCheck, LoadBalancerType};
use vpcnet_lab::lab::Lab;
use vpcnet_lab::lbctl::{LabLb, LbSettings};
use vpcnet_lab::load::LoadReport;

use vpcnet_introspection::text::table;

#[derive(ClapArgs)]
pub struct Args {
    /// Lab name (state in /run/vpcnet-lab/<name>).
    #[arg(long, default_value = "lab")]
    name: String,
    #[command(subcommand)]
    command: LbCommand,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Network,
    Application,
}

#[derive(Subcommand)]
enum LbCommand {
    /// Create an internal load balancer in the lab subnet, a target group (type ip) of the
    /// same name and a listener forwarding to it.
    Create {
        /// Name of the load balancer and its target group (ELBv2 rules: 1-32 of a-z, 0-9, -).
        lb: String,
        #[arg(long = "type", value_enum, default_value = "network")]
        kind: Kind,
        /// Listener port.
        #[arg(long, default_value_t = 80)]
        port: u16,
        /// Port the targets serve on.
        #[arg(long, default_value_t = 8080)]
        target_port: u16,
        /// Health check protocol: TCP or HTTP (default: the target group's protocol).
        #[arg(long)]
        health_protocol: Option<String>,
        /// HTTP health check path.
        #[arg(long)]
        health_path: Option<String>,
        /// Seconds between checks (5-300; ELBv2 default 30).
        #[arg(long)]
        health_interval: Option<u32>,
        /// Seconds without an answer that fail a check (2-120).
        #[arg(long)]
        health_timeout: Option<u32>,
        /// Passing checks to turn healthy (2-10; default 5).
        #[arg(long)]
        healthy_threshold: Option<u32>,
        /// Failing checks to turn unhealthy (2-10; default 2).
        #[arg(long)]
        unhealthy_threshold: Option<u32>,
        /// Seconds a deregistered target drains (0-3600; default 300).
        #[arg(long)]
        deregistration_delay: Option<u32>,
    },
    /// Load balancers with their address, listener and target group.
    List,
    /// Register targets: container names or IPv4 addresses, each with an optional :port.
    Register { lb: String, targets: Vec<String> },
    /// Deregister targets (they drain for the deregistration delay).
    Deregister { lb: String, targets: Vec<String> },
    /// Target health (DescribeTargetHealth).
    Health { lb: String },
    /// Send HTTP load through the load balancer from a node's namespace and report requests,
    /// errors, latency percentiles and which target answered.
    Load {
        lb: String,
        /// Node whose namespace sends the load.
        #[arg(long, default_value = "n1")]
        from: String,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Requests in flight at once.
        #[arg(long, default_value_t = 8)]
        connections: usize,
        #[arg(long, default_value = "/")]
        path: String,
    },
    /// Delete the load balancer (and its listener) and its target group.
    Delete { lb: String },
}

pub fn run(args: Args) -> Result<()> {
    let lab = Lab::open(&args.name)?;
    match args.command {
        LbCommand::Create {
            lb,
            kind,
            port,
            target_port,
            health_protocol,
            health_path,
            health_interval,
            health_timeout,
            healthy_threshold,
            unhealthy_threshold,
            deregistration_delay,
        } => {
            let l = lab.lbs().create_lb(&LbSettings {
                name: lb,
                lb_type: match kind {
                    Kind::Network => LoadBalancerType::Network,
                    Kind::Application => LoadBalancerType::Application,
                },
                port,
                target_port,
                health: HealthCheck {
                    protocol: health_protocol.map(|p| p.to_uppercase()),
                    path: health_path,
                    interval_seconds: health_interval,
                    timeout_seconds: health_timeout,
                    healthy_threshold,
                    unhealthy_threshold,
                    ..HealthCheck::default()
                },
                deregistration_delay,
            })?;
            print!("{}", lbs_table(&[l]));
        }
        LbCommand::List => print!("{}", lbs_table(&lab.lbs().list()?)),
        LbCommand::Register { lb, targets } => lab.lbs().register(&lb, &targets)?,
        LbCommand::Deregister { lb, targets } => lab.lbs().deregister(&lb, &targets)?,
        LbCommand::Health { lb } => {
            let names: std::collections::HashMap<String, String> = lab
                .containers()
                .list()?
                .into_iter()
                .map(|c| (c.ip.to_string(), c.id))
                .collect();
            let mut rows = vec![row(&[
                "TARGET",
                "CONTAINER",
                "PORT",
                "ZONE",
                "STATE",
                "REASON",
                "DESCRIPTION",
            ])];
            for h in lab.lbs().target_health(&lb)? {
                let name = names.get(&h.target.id).cloned();
                rows.push(vec![
                    h.target.id,
                    name.unwrap_or_else(|| "-".into()),
                    h.target.port.map(|p| p.to_string()).unwrap_or_default(),
                    h.target.availability_zone.unwrap_or_default(),
                    h.state.as_str().to_string(),
                    h.reason.unwrap_or_default(),
                    h.description.unwrap_or_default(),
                ]);
            }
            print!("{}", table(&rows));
        }
        LbCommand::Load {
            lb,
            from,
            seconds,
            connections,
            path,
        } => {
            let r = lab
                .lbs()
                .load(&lb, &from, &path, connections, Duration::from_secs(seconds))?;
            print!("{}", report_text(&r));
        }
        LbCommand::Delete { lb } => lab.lbs().delete(&lb)?,
    }
    Ok(())
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

fn lbs_table(lbs: &[LabLb]) -> String {
    let mut rows = vec![row(&[
        "NAME",
        "TYPE",
        "STATE",
        "ADDRESS",
        "LISTENER",
        "TARGET GROUP",
        "TARGET PORT",
        "HEALTH CHECK",
    ])];
    for l in lbs {
        let h = &l.target_group.health;
        rows.push(vec![
            l.lb.name.clone(),
            l.lb.lb_type.clone(),
            l.lb.state.clone(),
            l.address.to_string(),
            format!("{} {}", l.listener.protocol, l.listener.port),
            l.target_group.name.clone(),
            l.target_group.port.to_string(),
            format!(
                "{} every {}s, {} up / {} down",
                h.protocol.as_deref().unwrap_or("?"),
                h.interval_seconds.unwrap_or(0),
                h.healthy_threshold.unwrap_or(0),
                h.unhealthy_threshold.unwrap_or(0)
            ),
        ]);
    }
    table(&rows)
}

/// The load report as text: totals, latency percentiles, errors and answers by target.
pub fn report_text(r: &LoadReport) -> String {
    let mut out = format!(
        "requests {}  errors {}  {:.1} s  {} req/s\nlatency ms  p50 {}  p90 {}  p99 {}  max {}\n",
        r.requests,
        r.errors,
        r.seconds,
        r.rate,
        r.latency.p50_ms,
        r.latency.p90_ms,
        r.latency.p99_ms,
        r.latency.max_ms
    );
    let mut rows = vec![row(&["ANSWERED BY", "REQUESTS"])];
    for (who, n) in &r.by_responder {
        rows.push(vec![who.clone(), n.to_string()]);
    }
    for (kind, n) in &r.error_kinds {
        rows.push(vec![format!("error: {kind}"), n.to_string()]);
    }
    out.push_str(&table(&rows));
    out
}
