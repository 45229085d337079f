//! `vpcnet max-pods`: kubelet max pods per instance type, with the flags of AWS's
//! max-pods-calculator.sh so existing scripts carry over.
//!
//! The formula is [`vpcnet_limits::max_pods`]; types missing from the compiled table are
//! asked from EC2 `DescribeInstanceTypes`, and if that fails too the answer is 110 with a
//! warning ([`vpcnet_bootstrap::max_pods::resolve`], shared with `vpcnet-bootstrap`).
//!
//! `--show-max-allowed` prints the ENI formula uncapped; in secondary-IP mode with no other
//! flag that is exactly the published eni-max-pods.txt value (what bootstrap.sh and nodeadm
//! give kubelet). Without it the recommended ceiling applies (110 for ≤ 30 vCPUs, else 250).

use std::io::Write;

use clap::{ArgGroup, Args as ClapArgs, ValueEnum};
use serde::Serialize;
use vpcnet_bootstrap::cloud::AwsEc2;
use vpcnet_bootstrap::max_pods::{resolve, LimitsSource, ResolvedMaxPods};
use vpcnet_limits::MaxPodsOptions;

#[derive(ClapArgs, Debug)]
#[command(group(ArgGroup::new("which").required(true).multiple(true)
    .args(["types", "instance_type_flag", "instance_type_from_imds", "all"])))]
pub struct Args {
    /// Instance types, e.g. m5.large c6in.32xlarge.
    #[arg(value_name = "TYPE")]
    types: Vec<String>,
    /// Instance type (repeatable; same as a positional TYPE).
    #[arg(long = "instance-type", value_name = "TYPE")]
    instance_type_flag: Vec<String>,
    /// Read this instance's type from IMDS.
    #[arg(long)]
    instance_type_from_imds: bool,
    /// Every instance type vpcnet knows.
    #[arg(long)]
    all: bool,
    /// VPC CNI version (e.g. 1.18.3); prefix delegation needs ≥ 1.9.0. Optional.
    #[arg(long, value_name = "VERSION")]
    cni_version: Option<String>,
    /// Pods never use the primary ENI (VPC CNI custom networking): one ENI less.
    #[arg(long)]
    cni_custom_networking_enabled: bool,
    /// /28 prefixes instead of secondary IPs (Nitro only; others stay in secondary-IP mode).
    #[arg(long)]
    cni_prefix_delegation_enabled: bool,
    /// Use at most N ENIs (the VPC CNI's MAX_ENI); applied before the custom-networking ENI.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    cni_max_eni: Option<u32>,
    /// The ENI formula's value without the recommended 110/250 ceiling.
    #[arg(long)]
    show_max_allowed: bool,
    /// Output: `number` (one per line), `table`, `json`. Default: number for one type, else table.
    #[arg(long, short = 'o', value_enum)]
    output: Option<Output>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Number,
    Table,
    Json,
}

/// One row of `--output json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    instance_type: &'a str,
    max_pods: u32,
    /// `table`, `ec2` or `fallback`.
    source: LimitsSource,
    /// ENI formula value before the recommended ceiling (absent for the fallback).
    #[serde(skip_serializing_if = "Option::is_none")]
    uncapped: Option<u32>,
    /// ENIs used for pods (after MAX_ENI and custom networking).
    #[serde(skip_serializing_if = "Option::is_none")]
    enis: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ipv4_per_eni: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prefix_delegation: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<&'a str>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stdout = std::io::stdout();
    rt.block_on(execute(args, &mut stdout.lock(), &mut std::io::stderr()))
}

/// Whether a VPC CNI version supports prefix delegation (1.9.0 and later).
fn cni_supports_prefix_delegation(version: &str) -> anyhow::Result<bool> {
    let v = version.trim().trim_start_matches('v');
    let mut it = v
        .split('.')
        .map(|p| p.split(['-', '+']).next().unwrap_or("").parse::<u32>());
    match (it.next(), it.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Ok(major > 1 || (major == 1 && minor >= 9)),
        _ => anyhow::bail!(
            "invalid --cni-version {version:?}: not a version. Fix: pass e.g. --cni-version 1.18.3"
        ),
    }
}

async fn execute(args: Args, out: &mut impl Write, warn: &mut impl Write) -> anyhow::Result<()> {
    let mut types: Vec<String> = args
        .instance_type_flag
        .iter()
        .chain(&args.types)
        // EC2 instance type names are lower case: `M5.LARGE` means m5.large.
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    if args.instance_type_from_imds {
        let imds = vpcnet_imds::Imds::new();
        types.push(
            imds.instance_type()
                .await
                .map_err(|e| anyhow::anyhow!("--instance-type-from-imds: {e}"))?,
        );
    }
    if args.all {
        types.extend(vpcnet_limits::all().iter().map(|l| l.instance_type.clone()));
    }
    let mut prefix_delegation = args.cni_prefix_delegation_enabled;
    if let (true, Some(v)) = (prefix_delegation, &args.cni_version) {
        if !cni_supports_prefix_delegation(v)? {
            writeln!(warn, "warning: VPC CNI {v} predates prefix delegation (1.9.0); computing secondary-IP max pods")?;
            prefix_delegation = false;
        }
    } else if let Some(v) = &args.cni_version {
        cni_supports_prefix_delegation(v)?;
    }
    let opts = MaxPodsOptions {
        custom_networking: args.cni_custom_networking_enabled,
        prefix_delegation,
        max_eni: args.cni_max_eni,
        show_max_allowed: args.show_max_allowed,
    };

    // EC2 is only contacted (and its client only built) for types missing from the table.
    let ec2 = AwsEc2::new(vpcnet_ec2::Ec2Options::default());
    let hint = "pass the value yourself (kubelet --max-pods / vpcnet-bootstrap --kubelet-extra-args '--max-pods=N')";
    let mut results = Vec::with_capacity(types.len());
    for t in &types {
        results.push(resolve(t, opts, &ec2, hint).await);
    }
    for r in &results {
        if let Some(w) = &r.warning {
            writeln!(warn, "warning: {w}")?;
        }
    }

    let output = args.output.unwrap_or(if results.len() == 1 {
        Output::Number
    } else {
        Output::Table
    });
    match output {
        Output::Number => {
            for r in &results {
                writeln!(out, "{}", r.max_pods)?;
            }
        }
        Output::Json => {
            let rows: Vec<Row> = results.iter().map(row).collect();
            serde_json::to_writer_pretty(&mut *out, &rows)?;
            writeln!(out)?;
        }
        Output::Table => write_table(out, &results)?,
    }
    Ok(())
}

fn row(r: &ResolvedMaxPods) -> Row<'_> {
    Row {
        instance_type: &r.instance_type,
        max_pods: r.max_pods,
        source: r.source,
        uncapped: r.report.map(|p| p.uncapped),
        enis: r.report.map(|p| p.enis),
        ipv4_per_eni: r.limits.as_ref().map(|l| l.ipv4_per_eni),
        prefix_delegation: r.report.map(|p| p.prefix_delegation),
        warning: r.warning.as_deref(),
    }
}

fn write_table(out: &mut impl Write, results: &[ResolvedMaxPods]) -> std::io::Result<()> {
    let width = results
        .iter()
        .map(|r| r.instance_type.len())
        .max()
        .unwrap_or(0)
        .max("INSTANCE TYPE".len());
    writeln!(
        out,
        "{:<width$}  {:>8}  {:>4}  {:>8}  {:>6}  SOURCE",
        "INSTANCE TYPE", "MAX PODS", "ENIS", "IPV4/ENI", "PREFIX"
    )?;
    for r in results {
        let dash = || "-".to_string();
        writeln!(
            out,
            "{:<width$}  {:>8}  {:>4}  {:>8}  {:>6}  {}",
            r.instance_type,
            r.max_pods,
            r.report.map(|p| p.enis.to_string()).unwrap_or_else(dash),
            r.limits
                .as_ref()
                .map(|l| l.ipv4_per_eni.to_string())
                .unwrap_or_else(dash),
            r.report
                .map(|p| if p.prefix_delegation { "yes" } else { "no" }.to_string())
                .unwrap_or_else(dash),
            match r.source {
                LimitsSource::Table => "table",
                LimitsSource::Ec2 => "ec2",
                LimitsSource::Fallback => "fallback",
            }
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cni_version_gate() {
        assert!(!cni_supports_prefix_delegation("1.8.0").unwrap());
        assert!(cni_supports_prefix_delegation("1.9.0").unwrap());
        assert!(cni_supports_prefix_delegation("v1.18.3-eksbuild.1").unwrap());
        assert!(cni_supports_prefix_delegation("2.0").unwrap());
        assert!(cni_supports_prefix_delegation("one").is_err());
    }
}
