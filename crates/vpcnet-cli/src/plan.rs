//! `vpcnet plan`: capacity planning for a fleet, on the agent's own IPAM core
//! ([`vpcnet_capacity`]). Input: a YAML or JSON file of subnets, node groups and the VPC CNI
//! settings (`docs/capacity-planning.md` has the format); output: tables or JSON.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args as ClapArgs, ValueEnum};
use vpcnet_capacity::fleet::Shortfall;
use vpcnet_capacity::sim::{SimReport, SimSettings};
use vpcnet_capacity::{plan, FleetPlan, FleetSpec, SubnetSpec};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The fleet: a YAML or JSON file (`-` reads standard input).
    #[arg(long, short = 'f', value_name = "FILE")]
    file: PathBuf,
    /// Read the subnets from EC2: every subnet of this VPC (`DescribeSubnets`: CIDR, zone,
    /// free addresses, tags), in place of the file's `subnets` (which must then be absent).
    /// Credentials, region and endpoint as for any AWS tool (`AWS_REGION`,
    /// `AWS_ENDPOINT_URL_EC2`, ...).
    #[arg(long, value_name = "VPC_ID")]
    vpc_id: Option<String>,
    /// Nodes to add, spread over the groups as the fleet is (overrides the file's
    /// `scale_out`).
    #[arg(long, value_name = "NODES")]
    scale_out: Option<u32>,
    /// Also simulate the scale-out's nodes (`--scale-out` or the file's `scale_out`) joining,
    /// empty, against the account's default EC2 buckets, with the agent's client-side buckets
    /// and retries, in virtual time.
    #[arg(long)]
    simulate: bool,
    /// With `--simulate`: the share (0 to 1) of every account bucket's refill that other
    /// tools in the account use.
    #[arg(long, value_name = "SHARE", requires = "simulate", allow_negative_numbers = true, value_parser = share)]
    other_tools_share: Option<f64>,
    /// With `--simulate`: nodes boot at random within this many seconds.
    #[arg(
        long,
        value_name = "SECONDS",
        requires = "simulate",
        allow_negative_numbers = true
    )]
    boot_spread: Option<u64>,
    /// Output: `table` (default) or `json`.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let text = if args.file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the fleet from standard input")?;
        s
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("reading the fleet file {}", args.file.display()))?
    };
    let subnets = match &args.vpc_id {
        Some(vpc) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Some(rt.block_on(vpc_subnets(vpc))?)
        }
        None => None,
    };
    let stdout = std::io::stdout();
    let simulate = args.simulate.then_some(Simulate {
        other_tools_share: args.other_tools_share.unwrap_or(0.0),
        boot_spread_s: args.boot_spread.unwrap_or(0),
    });
    let how = How {
        subnets,
        scale_out: args.scale_out,
        simulate,
    };
    let source = if args.file.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        args.file.display().to_string()
    };
    execute(&text, how, args.output, &mut stdout.lock())
        .with_context(|| format!("planning the fleet of {source}"))
}

fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a share from 0 up to (not including) 1, e.g. 0.3"
        )),
    }
}

/// What `--simulate` asks for.
#[derive(Debug, Clone, Copy)]
struct Simulate {
    other_tools_share: f64,
    boot_spread_s: u64,
}

/// Every subnet of `vpc_id`, from EC2.
async fn vpc_subnets(vpc_id: &str) -> anyhow::Result<Vec<SubnetSpec>> {
    let ec2 = vpcnet_ec2::Ec2::connect_unobserved(vpcnet_ec2::Ec2Options::default())
        .await
        .context("connecting to EC2 (set AWS_REGION and credentials as for any AWS tool)")?;
    let found = ec2
        .describe_vpc_subnets(vpc_id)
        .await
        .with_context(|| format!("listing the subnets of {vpc_id} (DescribeSubnets)"))?;
    if found.is_empty() {
        anyhow::bail!(
            "EC2 lists no subnet in {vpc_id}: check the VPC ID and the region (AWS_REGION)"
        );
    }
    Ok(found.into_iter().map(subnet_spec).collect())
}

fn subnet_spec(s: vpcnet_ec2::Subnet) -> SubnetSpec {
    SubnetSpec {
        id: s.subnet_id,
        cidr: s.cidr_block,
        zone: s.availability_zone,
        available: Some(s.available_ip_address_count),
        tags: s.tags,
    }
}

/// What the command line adds to the file.
#[derive(Debug, Default)]
struct How {
    /// The subnets from EC2 (`--vpc-id`).
    subnets: Option<Vec<SubnetSpec>>,
    scale_out: Option<u32>,
    simulate: Option<Simulate>,
}

fn execute(text: &str, how: How, output: Output, out: &mut impl Write) -> anyhow::Result<()> {
    let mut spec: FleetSpec = serde_yaml::from_str(text)
        .context("the fleet file is not valid (see docs/capacity-planning.md for its fields)")?;
    if how.scale_out.is_some() {
        spec.scale_out = how.scale_out;
    }
    if let Some(subnets) = how.subnets {
        if !spec.subnets.is_empty() {
            anyhow::bail!(
                "the fleet file lists subnets and --vpc-id reads them from EC2: remove the file's subnets, or drop --vpc-id"
            );
        }
        spec.subnets = subnets;
    }
    let simulate = how.simulate;
    let p = plan(&spec)?;
    let sim = match (simulate, spec.scale_out) {
        (Some(_), None) => anyhow::bail!(
            "--simulate plays a scale-out: give its size with --scale-out N or scale_out in the file"
        ),
        (Some(how), Some(extra)) => {
            let nodes = vpcnet_capacity::fleet::scale_out_nodes(&spec, extra)?;
            let settings = SimSettings {
                other_tools_share: how.other_tools_share,
                boot_spread_ms: how.boot_spread_s * 1000,
                ..SimSettings::default()
            };
            Some(vpcnet_capacity::sim::simulate(&nodes, &settings))
        }
        _ => None,
    };
    match output {
        Output::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "plan": p, "simulation": sim }))?
        )?,
        Output::Table => {
            render(&p, out)?;
            if let Some(r) = &sim {
                render_sim(r, out)?;
            }
        }
    }
    Ok(())
}

fn render_sim(r: &SimReport, out: &mut impl Write) -> std::io::Result<()> {
    let s = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    writeln!(out)?;
    writeln!(
        out,
        "SIMULATED JOIN of {} empty nodes (no pods), {}",
        r.nodes,
        if r.boot_spread_ms == 0 {
            "booting at once".to_string()
        } else {
            format!("booting within {} s", r.boot_spread_ms / 1000)
        }
    )?;
    writeln!(out, "{:<24} {:>10} {:>10} {:>10}", "", "P50", "P99", "LAST")?;
    for (what, v) in [
        ("first pod servable", r.first_address),
        ("warm pool full", r.warm_full),
    ] {
        writeln!(
            out,
            "{:<24} {:>10} {:>10} {:>10}",
            what,
            s(v.p50_ms),
            s(v.p99_ms),
            s(v.last_ms)
        )?;
    }
    let floor = r.floor_first_address.seconds;
    let last = r.first_address.last_ms as f64 / 1000.0;
    if floor > 0.0 {
        writeln!(
            out,
            "last node's first pod: {last:.1} s against a floor of {floor:.1} s ({:.2}×; the floor of empty nodes' first addresses, not the plan's settled floor)",
            last / floor
        )?;
    } else {
        writeln!(
            out,
            "last node's first pod: {last:.1} s (every first address within the buckets' burst)"
        )?;
    }
    writeln!(
        out,
        "EC2 calls {} (throttled {}, {:.1} %); nodes not settled: {}",
        r.calls.total(),
        r.throttled.total(),
        100.0 * r.throttled.total() as f64 / r.calls.total().max(1) as f64,
        r.unfinished
    )?;
    for (action, n) in r.calls.iter() {
        writeln!(
            out,
            "  {action:<34} {n:>8} (throttled {})",
            r.throttled.get(action)
        )?;
    }
    Ok(())
}

fn render(p: &FleetPlan, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<16} {:<14} {:>6} {:>8} {:>9} {:>5} {:>10} {:>9} {:>10}",
        "GROUP",
        "TYPE",
        "NODES",
        "MAX-PODS",
        "PODS/NODE",
        "ENIS",
        "ADDRESSES",
        "PREFIXES",
        "EC2-CALLS"
    )?;
    for g in &p.groups {
        writeln!(
            out,
            "{:<16} {:<14} {:>6} {:>8} {:>9} {:>5} {:>10} {:>9} {:>10}",
            g.name,
            g.instance_type,
            g.nodes,
            g.max_pods,
            g.pods_per_node,
            g.per_node.enis.len(),
            g.per_node.addresses(),
            g.per_node.prefixes(),
            g.per_node.calls.total()
        )?;
    }
    writeln!(
        out,
        "(per node: ENIs, subnet addresses, /28 prefixes and EC2 calls from start-up to settled)"
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<26} {:<12} {:<18} {:>9} {:>9} {:>9} {:>14}  PREFIX-RISK",
        "SUBNET", "ZONE", "CIDR", "FREE", "FLEET", "HEADROOM", "RUNS-OUT-AT"
    )?;
    for s in &p.subnets {
        let runs_out = s
            .runs_out_at_nodes
            .map_or("-".to_string(), |n| format!("{n} nodes"));
        let risk = s.prefix_risk.as_ref().map_or("-".to_string(), |r| {
            format!(
                "{:?}: {} prefixes, {}..{} free /28s",
                r.verdict, r.needed, r.free_blocks_worst, r.free_blocks_best
            )
            .to_lowercase()
        });
        writeln!(
            out,
            "{:<26} {:<12} {:<18} {:>9} {:>9} {:>9} {:>14}  {}",
            s.id, s.zone, s.cidr, s.available, s.fleet_addresses, s.headroom, runs_out, risk
        )?;
    }
    shortfalls(&p.shortfalls, "of the fleet", out)?;
    if let Some(so) = &p.scale_out {
        writeln!(out)?;
        writeln!(out, "SCALE-OUT of {} nodes", so.nodes)?;
        writeln!(
            out,
            "{:<34} {:>10} {:>16}",
            "EC2 ACTION", "CALLS", "TO-FIRST-ADDRESS"
        )?;
        for (action, n) in so.calls.iter() {
            writeln!(
                out,
                "{:<34} {:>10} {:>16}",
                action,
                n,
                so.calls_to_first_address.get(action)
            )?;
        }
        let floor = |f: &vpcnet_capacity::rates::Floor| match f.limiting_action {
            Some(a) => format!("{:.1} s (set by {a})", f.seconds),
            None => "0 s (every action within its burst)".into(),
        };
        writeln!(
            out,
            "time floor, every new node serving its first pod: {}",
            floor(&so.floor_first_address)
        )?;
        writeln!(
            out,
            "time floor, every new node settled:                {}",
            floor(&so.floor_settled)
        )?;
        writeln!(
            out,
            "(the account's default EC2 request-token buckets, no other caller, no retry)"
        )?;
        shortfalls(&so.shortfalls, "of the scale-out", out)?;
    }
    Ok(())
}

/// Short nodes summed up by group and subnets (`--output json` lists each one).
fn shortfalls(v: &[Shortfall], which: &str, out: &mut impl Write) -> std::io::Result<()> {
    let mut by: BTreeMap<(&str, String), (u64, u64, u64)> = BTreeMap::new();
    for s in v {
        let e = by
            .entry((s.group.as_str(), s.subnets.join(", ")))
            .or_insert((0, s.node, 0));
        e.0 += 1;
        e.2 += u64::from(s.addresses);
    }
    for ((group, subnets), (nodes, first, addresses)) in by {
        writeln!(
            out,
            "SHORT: {nodes} {} {which} in group {group}, the first node {first}, lack {addresses} addresses: no room in {subnets}",
            if nodes == 1 { "node" } else { "nodes" }
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: &str = r#"
subnets:
  - id: subnet-a
    cidr: 10.0.0.0/24
    zone: us-east-1a
settings:
  WARM_ENI_TARGET: "1"
node_groups:
  - name: web
    instance_type: m5.large
    count: 10
    pods_per_node: 5
    subnets: [subnet-a]
"#;

    fn run(text: &str, scale_out: Option<u32>, o: Output) -> anyhow::Result<String> {
        let mut out = Vec::new();
        let how = How {
            scale_out,
            ..How::default()
        };
        execute(text, how, o, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn tables_show_the_group_the_subnet_and_the_scale_out() {
        let t = run(FLEET, Some(2), Output::Table).unwrap();
        assert!(t.contains("web"), "{t}");
        let subnet_row = t.lines().find(|l| l.starts_with("subnet-a")).unwrap();
        let cols: Vec<&str> = subnet_row.split_whitespace().collect();
        assert_eq!(&cols[3..7], ["251", "200", "51", "13"], "{subnet_row}");
        assert!(t.contains("SCALE-OUT of 2 nodes"), "{t}");
        assert!(t.contains("0 s (every action within its burst)"), "{t}");
    }

    #[test]
    fn json_carries_the_same_figures() {
        let j: serde_json::Value =
            serde_json::from_str(&run(FLEET, None, Output::Json).unwrap()).unwrap();
        assert_eq!(j["plan"]["subnets"][0]["fleet_addresses"], 200);
        assert_eq!(j["plan"]["subnets"][0]["runs_out_at_nodes"], 13);
        assert!(j["plan"]["scale_out"].is_null());
        assert!(j["simulation"].is_null());
    }

    #[test]
    fn a_simulated_join_reports_its_spread_and_the_floor() {
        let mut out = Vec::new();
        let how = Simulate {
            other_tools_share: 0.0,
            boot_spread_s: 0,
        };
        let how = How {
            scale_out: Some(300),
            simulate: Some(how),
            ..How::default()
        };
        execute(FLEET, how, Output::Table, &mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.contains("SIMULATED JOIN of 300 empty nodes (no pods), booting at once"),
            "{t}"
        );
        // 300 first assigns: 100 at once, 200 more at 5 a second.
        assert!(t.contains("against a floor of 40.0 s"), "{t}");
    }

    #[test]
    fn a_misspelt_field_is_refused_by_name() {
        let bad = FLEET.replace("pods_per_node", "pod_per_node");
        let e = format!("{:#}", run(&bad, None, Output::Table).unwrap_err());
        assert!(e.contains("pod_per_node"), "{e}");
    }
}
